// The nonsymmetric eigendecomposition: linalg_eig and _linalg_eigvals, for real and complex matrices.
//
// linalg.eig by the shifted QR algorithm in complex arithmetic: A - s I = Q R, A <- R Q + s I, with s the
// Wilkinson shift of the trailing 2x2 of the still active block (an exceptional shift every 10th step
// without progress). When the last active row's part left of the diagonal is negligible it is zeroed and the
// block shrinks; the zero rows stay exact, since the reflectors of the columns left of them do not reach
// them. The result is the Schur form T = Z^H A Z; the eigenvectors solve (T - t_kk I) y = 0 with y_k = 1 by
// back substitution (a near-zero pivot is lifted to eps ||T||, as LAPACK's trevc does), are mapped back by Z
// and normalized as LAPACK's geev returns them: unit norm, largest component real. The eigenvalues are in
// the order the iteration finds them, which need not be LAPACK's (PyTorch promises none).
#include <limits>

#include "lowering/matrix.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

struct Schur {
  Value t;  // [..., n, n] upper triangular
  Value z;  // [..., n, n] unitary, A = Z T Z^H
};

Schur complex_schur(Graph& g, Value a) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t n = t.dims.back();
  const DType dtype = t.dtype, real = complex_part(dtype);
  const int64_t batch_rank = static_cast<int64_t>(batch.size());
  const std::vector<int64_t> batch_positions = dim_range(0, batch_rank);
  auto per_matrix = [&](Value v) { return g.broadcast_in_dim(v, t.dims, batch_positions); };
  Value rows = row_index(g, t.dims), columns = column_index(g, t.dims);
  // Element (i, j) of each matrix, i and j [...] i64 per batch element, by masking.
  auto element = [&](Value x, Value i, Value j) {
    Value at = g.binary("and", g.compare(rows, per_matrix(i), ir::Comparison::kEQ),
                        g.compare(columns, per_matrix(j), ir::Comparison::kEQ));
    return g.reduce(g.select(at, x, g.constant(0, dtype, t.dims)), g.constant(0, dtype),
                    {batch_rank, batch_rank + 1}, ir::Reducer::kAdd);
  };
  auto one = [&](int64_t v) { return g.constant_int(v, DType::kI64, batch); };
  const double eps = epsilon(real);
  auto body = [&](const std::vector<Value>& s) {
    Value x = s[0], z = s[1], hi = s[2], stalled = s[3], steps = s[4];
    Value active = g.compare(hi, one(0), ir::Comparison::kGT);
    Value lo = g.binary("subtract", hi, one(1));
    Value p = element(x, lo, lo), q = element(x, lo, hi), r = element(x, hi, lo), d = element(x, hi, hi);
    // The eigenvalue of [[p, q], [r, d]] nearer d.
    Value half = g.constant(0.5, dtype, batch);
    Value mean = g.binary("multiply", g.binary("add", p, d), half);
    Value gap = g.binary("multiply", g.binary("subtract", p, d), half);
    Value root = g.unary("sqrt", g.binary("add", g.binary("multiply", gap, gap), g.binary("multiply", q, r)));
    Value plus = g.binary("add", mean, root), minus = g.binary("subtract", mean, root);
    Value nearer_plus = g.compare(magnitude(g, g.binary("subtract", plus, d)), magnitude(g, g.binary("subtract", minus, d)),
                                  ir::Comparison::kLE);
    Value shift = g.select(nearer_plus, plus, minus);
    Value exceptional = g.compare(g.binary("remainder", stalled, one(10)), one(9), ir::Comparison::kEQ);
    Value kick = g.binary("add", d, g.complex(g.binary("multiply", magnitude(g, r), g.constant(0.75, real, batch)),
                                              g.constant(0, real, batch)));
    shift = g.select(exceptional, kick, shift);
    Value shifted_eye = g.binary("multiply", identity(g, dtype, t.dims), per_matrix(shift));
    auto [compact, tau] = householder_qr(g, g.binary("subtract", x, shifted_eye));
    Value q_factor = apply_reflectors(g, compact, tau, identity(g, dtype, t.dims), true, false, false);
    Value next = g.binary("add", matmul(g, keep_triangle(g, compact, false), q_factor), shifted_eye);
    Value next_z = matmul(g, z, q_factor);
    // Deflate: row hi left of the diagonal against the two diagonal entries beside it.
    Value row_hi = g.compare(rows, per_matrix(hi), ir::Comparison::kEQ);
    Value left_of_diagonal = g.binary("and", row_hi, g.compare(columns, per_matrix(hi), ir::Comparison::kLT));
    Value off = g.reduce(g.select(left_of_diagonal, magnitude(g, next), g.constant(0, real, t.dims)),
                         g.constant(0, real), {batch_rank, batch_rank + 1}, ir::Reducer::kAdd);
    Value scale = g.binary("add", magnitude(g, element(next, hi, hi)), magnitude(g, element(next, lo, lo)));
    Value done = g.compare(off, g.binary("multiply", scale, g.constant(eps, real, batch)), ir::Comparison::kLE);
    done = g.binary("or", done, g.compare(off, g.constant(smallest_normal(real), real, batch), ir::Comparison::kLT));
    next = g.select(g.binary("and", per_matrix(done), left_of_diagonal), g.constant(0, dtype, t.dims), next);
    Value keep = g.unary("not", per_matrix(active));
    return std::vector<Value>{
        g.select(keep, x, next), g.select(keep, z, next_z),
        g.select(g.binary("and", active, done), lo, hi),
        g.select(done, one(0), g.binary("add", stalled, one(1))),
        g.binary("add", steps, g.constant_int(1, DType::kI64))};
  };
  auto cond = [&](const std::vector<Value>& s) {
    Value pending = g.reduce(g.compare(s[2], one(0), ir::Comparison::kGT), g.constant_int(0, DType::kBool),
                             batch_positions, ir::Reducer::kOr);
    return std::vector<Value>{g.binary("and", pending, g.compare(s[4], g.constant_int(30 * n, DType::kI64),
                                                                  ir::Comparison::kLT))};
  };
  std::vector<Value> r = g.while_loop(
      {a, identity(g, dtype, t.dims), one(n - 1), one(0), g.constant_int(0, DType::kI64)}, cond, body);
  return {keep_triangle(g, r[0], false), r[1]};
}

// Eigenvectors [..., n, n] (columns) of A = Z T Z^H, normalized as LAPACK's geev normalizes them.
Value schur_eigenvectors(Graph& g, const Schur& schur) {
  const Type t = g.type(schur.t);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t n = t.dims.back();
  const DType dtype = t.dtype, real = complex_part(dtype);
  const int64_t b = static_cast<int64_t>(batch.size());
  // One system per eigenvalue k: a batch dim [..., k, n, n] right after the matrix batch.
  const std::vector<int64_t> dims = append(batch, {n, n, n});
  const std::vector<int64_t> vector_dims = append(batch, {n, n, 1});
  Value k = g.iota(Type{DType::kI64, dims}, b), i = g.iota(Type{DType::kI64, dims}, b + 1),
        j = g.iota(Type{DType::kI64, dims}, b + 2);
  Value tt = g.broadcast_in_dim(schur.t, dims, append(dim_range(0, b), {b + 1, b + 2}));
  Value diagonal = diagonal_of(g, schur.t);                                                 // [..., n]
  Value t_kk = g.broadcast_in_dim(diagonal, dims, append(dim_range(0, b), {b}));
  Value inside = g.binary("and", g.compare(i, k, ir::Comparison::kLT), g.compare(j, k, ir::Comparison::kLT));
  Value same = g.compare(i, j, ir::Comparison::kEQ);
  Value shifted = g.binary("subtract", tt, g.select(same, t_kk, g.constant(0, dtype, dims)));
  // Lift pivots below eps ||T|| (max |t_ij|) so repeated eigenvalues keep finite vectors.
  Value norm = g.reduce(magnitude(g, schur.t), g.constant(0, real), {b, b + 1}, ir::Reducer::kMax);
  Value floor = g.binary("maximum", g.binary("multiply", norm, g.constant(epsilon(real), real, batch)),
                         g.constant(smallest_normal(real), real, batch));
  Value floor_full = g.broadcast_in_dim(g.complex(floor, g.constant(0, real, batch)), dims, dim_range(0, b));
  Value tiny = g.compare(magnitude(g, shifted), g.broadcast_in_dim(floor, dims, dim_range(0, b)), ir::Comparison::kLT);
  shifted = g.select(g.binary("and", same, tiny), floor_full, shifted);
  Value system = g.select(inside, shifted, g.select(same, g.constant(1, dtype, dims), g.constant(0, dtype, dims)));
  // Right-hand sides: -T[i, k] above k, 1 at k, 0 below.
  Value kv = g.iota(Type{DType::kI64, vector_dims}, b), iv = g.iota(Type{DType::kI64, vector_dims}, b + 1);
  Value column_k = g.reshape(transpose_matrix(g, schur.t), append(batch, {n, n, 1}));  // [..., k, i, 1] = T[i, k]
  Value rhs = g.select(g.compare(iv, kv, ir::Comparison::kLT), g.unary("negate", column_k),
                       g.select(g.compare(iv, kv, ir::Comparison::kEQ), g.constant(1, dtype, vector_dims),
                                g.constant(0, dtype, vector_dims)));
  Value y = triangular_solve(g, system, rhs, true, false, false, false);                // [..., k, n, 1]
  Value vectors = matmul(g, schur.z, transpose_matrix(g, g.reshape(y, append(batch, {n, n}))));
  // Unit norm, then the phase that makes the largest component real.
  Value size2 = g.binary("add", g.binary("multiply", g.real(vectors), g.real(vectors)),
                         g.binary("multiply", g.imag(vectors), g.imag(vectors)));
  Value norms = g.unary("sqrt", g.reduce(size2, g.constant(0, real), {b}, ir::Reducer::kAdd));  // [..., n]
  const std::vector<int64_t> nn = append(batch, {n, n});
  Value largest = g.reduce(size2, g.constant(-1, real), {b}, ir::Reducer::kMax);
  Value at_largest = g.compare(size2, g.broadcast_in_dim(largest, nn, append(dim_range(0, b), {b + 1})),
                               ir::Comparison::kEQ);
  Value first = g.reduce(g.select(at_largest, row_index(g, nn), g.constant_int(n, DType::kI64, nn)),
                         g.constant_int(n, DType::kI64), {b}, ir::Reducer::kMin);
  Value pick = g.compare(row_index(g, nn), g.broadcast_in_dim(first, nn, append(dim_range(0, b), {b + 1})),
                         ir::Comparison::kEQ);
  Value pivot = g.reduce(g.select(pick, vectors, g.constant(0, dtype, nn)), g.constant(0, dtype), {b},
                         ir::Reducer::kAdd);
  // conj(pivot) / (|pivot| norm): the pivot becomes real and positive, the vector unit.
  const std::vector<int64_t>& per_vector = g.type(norms).dims;
  Value pivot_size = magnitude(g, pivot);
  Value zero_pivot = g.compare(pivot_size, g.constant(0, real, per_vector), ir::Comparison::kEQ);
  Value divisor = g.binary("multiply", g.select(zero_pivot, g.constant(1, real, per_vector), pivot_size), norms);
  Value factor = g.binary("divide", g.select(zero_pivot, g.constant(1, dtype, per_vector), conjugate(g, pivot)),
                          g.complex(divisor, g.constant(0, real, per_vector)));
  return g.binary("multiply", vectors, g.broadcast_in_dim(factor, nn, append(dim_range(0, b), {b + 1})));
}

// linalg_eig(A) -> (eigenvalues, eigenvectors), complex for real A too. Like CPU's kernel (and unlike
// _linalg_eigvals'), it refuses non-finite input: a value check.
std::vector<Value> lower_linalg_eig(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& values = out(ctx, 0);
  Value a = g.convert(ctx.tensor(0), values.dtype);
  ctx.check(CheckKind::kEigNonFinite, g.unary("not", finite_elements(g, a)));
  if (g.type(a).numel() == 0) return {g.constant(0, values.dtype, values.dims), a};
  Schur schur = complex_schur(g, a);
  return {diagonal_of(g, schur.t), schur_eigenvectors(g, schur)};
}

// _linalg_eigvals(A)
std::vector<Value> lower_linalg_eigvals(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& values = out(ctx, 0);
  Value a = g.convert(ctx.tensor(0), values.dtype);
  if (g.type(a).numel() == 0) return {g.constant(0, values.dtype, values.dims)};
  return {diagonal_of(g, complex_schur(g, a).t)};
}

}  // namespace

void add_linalg_eig_rules(std::vector<Rule>& table) {
  table.push_back({"aten::linalg_eig", &lower_linalg_eig});
  table.push_back({"aten::_linalg_eigvals", &lower_linalg_eigvals});
}

}  // namespace torchtpu::lowering
