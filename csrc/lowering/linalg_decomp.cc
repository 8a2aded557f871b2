// Matrix decompositions and what is built on them: Cholesky, triangular solves, LU with partial pivoting
// (det, slogdet, inv, solve, lu_solve, lu_unpack), symmetric eigendecomposition and SVD (Jacobi), Householder
// QR (qr, geqrf, householder_product, ormqr), matrix_exp, and eye.
//
// Only portable StableHLO: stablehlo.cholesky and stablehlo.triangular_solve where StableHLO has the op,
// while loops elsewhere; no LAPACK custom calls, which exist only on the CPU. Matrices are the last two dims;
// any leading dims are a batch. Results follow LAPACK's conventions as PyTorch's CPU kernels return them:
// 1-based int32 pivots, `info` = the 1-based position of the first failing pivot (0 on success).
#include <algorithm>
#include <cmath>
#include <functional>
#include <stdexcept>
#include <string>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

std::vector<int64_t> batch_of(const Type& t) { return {t.dims.begin(), t.dims.end() - 2}; }

std::vector<int64_t> append(std::vector<int64_t> dims, std::initializer_list<int64_t> tail) {
  dims.insert(dims.end(), tail);
  return dims;
}

// Swaps the last two dims.
Value transpose_matrix(Graph& g, Value x) {
  const int64_t rank = g.type(x).rank();
  std::vector<int64_t> permutation = dim_range(0, rank - 2);
  permutation.push_back(rank - 1);
  permutation.push_back(rank - 2);
  return g.transpose(x, permutation);
}

// a @ b over equal batch dims.
Value matmul(Graph& g, Value a, Value b) {
  const int64_t rank = g.type(a).rank();
  const std::vector<int64_t> batch = dim_range(0, rank - 2);
  return g.dot_general(a, b, batch, batch, {rank - 1}, {rank - 2}, g.type(a).dtype);
}

// Row and column index of every element of a [..., m, n] shape, as i64.
Value row_index(Graph& g, const std::vector<int64_t>& dims) {
  return g.iota(Type{DType::kI64, dims}, static_cast<int64_t>(dims.size()) - 2);
}
Value column_index(Graph& g, const std::vector<int64_t>& dims) {
  return g.iota(Type{DType::kI64, dims}, static_cast<int64_t>(dims.size()) - 1);
}

Value identity(Graph& g, DType dtype, const std::vector<int64_t>& dims) {
  Value diagonal = g.compare(row_index(g, dims), column_index(g, dims), ir::Comparison::kEQ);
  return g.select(diagonal, g.constant(1, dtype, dims), g.constant(0, dtype, dims));
}

// Zeroes the triangle above (lower) or below (upper) the diagonal.
Value keep_triangle(Graph& g, Value x, bool lower) {
  const Type& t = g.type(x);
  Value keep = g.compare(row_index(g, t.dims), column_index(g, t.dims),
                         lower ? ir::Comparison::kGE : ir::Comparison::kLE);
  return g.select(keep, x, g.constant(0, t.dtype, t.dims));
}

// The diagonal of a square [..., n, n] as [..., n]: the off-diagonal elements are masked out, so infinities
// and NaNs there don't leak into it.
Value diagonal_of(Graph& g, Value x) {
  const Type t = g.type(x);
  Value on_diagonal = g.compare(row_index(g, t.dims), column_index(g, t.dims), ir::Comparison::kEQ);
  Value masked = g.select(on_diagonal, x, g.constant(-0.0, t.dtype, t.dims));
  return g.reduce(masked, g.constant(-0.0, t.dtype), {t.rank() - 1}, ir::Reducer::kAdd);
}

Value dynamic_slice(Graph& g, Value x, const std::vector<Value>& starts, const std::vector<int64_t>& sizes) {
  std::vector<Value> operands{x};
  operands.insert(operands.end(), starts.begin(), starts.end());
  return g.op("dynamic_slice", operands, Type{g.type(x).dtype, sizes}, "slice_sizes = " + ir::dense_i64_array(sizes));
}

// Starts for a dynamic slice at (row, column) of every matrix in a batch of `batch_rank` dims.
std::vector<Value> matrix_starts(Graph& g, size_t batch_rank, Value row, Value column) {
  std::vector<Value> starts(batch_rank, g.constant_int(0, DType::kI64));
  starts.push_back(row);
  starts.push_back(column);
  return starts;
}

// Row `k` (an i64 scalar, the same for the whole batch) of [..., m, n], broadcast back to [..., m, n].
Value broadcast_row(Graph& g, Value x, Value k) {
  const Type t = g.type(x);
  const std::vector<int64_t> batch = batch_of(t);
  Value row = dynamic_slice(g, x, matrix_starts(g, batch.size(), k, g.constant_int(0, DType::kI64)),
                            append(batch, {1, t.dims.back()}));
  return broadcast_to(g, row, t.dims);
}

// Column `k` of [..., m, n], broadcast back to [..., m, n].
Value broadcast_column(Graph& g, Value x, Value k) {
  const Type t = g.type(x);
  const std::vector<int64_t> batch = batch_of(t);
  Value column = dynamic_slice(g, x, matrix_starts(g, batch.size(), g.constant_int(0, DType::kI64), k),
                               append(batch, {t.dims.end()[-2], 1}));
  return broadcast_to(g, column, t.dims);
}

// Element [..., k] of a [..., n] vector, k an i64 scalar: [...].
Value vector_element(Graph& g, Value v, Value k) {
  const Type t = g.type(v);
  std::vector<Value> starts(static_cast<size_t>(t.rank() - 1), g.constant_int(0, DType::kI64));
  starts.push_back(k);
  std::vector<int64_t> sizes(t.dims.begin(), t.dims.end() - 1);
  sizes.push_back(1);
  return g.reshape(dynamic_slice(g, v, starts, sizes), {t.dims.begin(), t.dims.end() - 1});
}

// stablehlo.triangular_solve: op(a) x = b (left) or x op(a) = b, reading only a's named triangle; op(a) is
// a, or with `transpose_a` its adjoint (the transpose, for real a). a and b share their batch dims.
Value triangular_solve(Graph& g, Value a, Value b, bool left, bool lower, bool unit_diagonal, bool transpose_a) {
  const std::string attributes = std::string("left_side = ") + (left ? "true" : "false") +
                                 ", lower = " + (lower ? "true" : "false") +
                                 ", unit_diagonal = " + (unit_diagonal ? "true" : "false") +
                                 ", transpose_a = #stablehlo<transpose " +
                                 (transpose_a ? "ADJOINT" : "NO_TRANSPOSE") + ">";
  return g.op("triangular_solve", {a, b}, g.type(b), attributes);
}

// The Cholesky factor of the triangle named by `upper`, with the other triangle zeroed as LAPACK's callers
// in PyTorch return it.
Value cholesky_factor(Graph& g, Value a, bool upper) {
  Value factor = g.op("cholesky", {a}, g.type(a), std::string("lower = ") + (upper ? "false" : "true"));
  return keep_triangle(g, factor, !upper);
}


// The LAPACK result of a failed lower Cholesky factorization of the lower triangle of a [..., n, n], for the
// batch elements marked in `failed` [...]: right-looking steps up to the first pivot that is not positive
// (or NaN), which stays in place unrooted, and that pivot's 1-based position as info (0 elsewhere). The loop
// runs only while some marked element is unfinished, so it costs nothing when every factorization succeeded.
std::pair<Value, Value> cholesky_failures(Graph& g, Value a, Value failed) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t n = t.dims.back();
  const std::vector<int64_t> batch_positions = dim_range(0, static_cast<int64_t>(batch.size()));
  Value info = g.constant_int(0, DType::kI32, batch);
  if (n == 0) return {a, info};
  // The symmetric matrix the lower triangle describes.
  Value strictly_lower = g.compare(row_index(g, t.dims), column_index(g, t.dims), ir::Comparison::kGT);
  Value symmetric = g.select(strictly_lower, a, transpose_matrix(g, a));
  auto body = [&](const std::vector<Value>& s) {
    Value k = s[0], x = s[1], inf = s[2], done = s[3];
    Value pivot = g.reshape(dynamic_slice(g, x, matrix_starts(g, batch.size(), k, k), append(batch, {1, 1})), batch);
    Value bad = g.unary("not", g.compare(pivot, g.constant(0, t.dtype, batch), ir::Comparison::kGT));
    Value newly_bad = g.binary("and", bad, g.unary("not", done));
    Value step_number = g.convert(g.binary("add", k, g.constant_int(1, DType::kI64)), DType::kI32);
    inf = g.select(newly_bad, g.broadcast_in_dim(step_number, batch, {}), inf);
    done = g.binary("or", done, bad);
    Value root = g.broadcast_in_dim(g.unary("sqrt", pivot), t.dims, batch_positions);
    Value k_full = g.broadcast_in_dim(k, t.dims, {});
    Value rows = row_index(g, t.dims);
    Value columns = column_index(g, t.dims);
    Value column = g.binary("divide", broadcast_column(g, x, k), root);  // l[i] for i > k
    Value row = transpose_matrix(g, column);                               // l[j] for j > k
    Value below = g.compare(rows, k_full, ir::Comparison::kGT);
    Value right = g.compare(columns, k_full, ir::Comparison::kGT);
    Value on_row = g.compare(rows, k_full, ir::Comparison::kEQ);
    Value on_column = g.compare(columns, k_full, ir::Comparison::kEQ);
    Value stepped = g.select(g.binary("and", below, right), g.binary("subtract", x, g.binary("multiply", column, row)),
                             g.select(g.binary("and", below, on_column), column,
                                      g.select(g.binary("and", on_row, on_column), root, x)));
    x = g.select(g.broadcast_in_dim(done, t.dims, batch_positions), x, stepped);
    return std::vector<Value>{g.binary("add", k, g.constant_int(1, DType::kI64)), x, inf, done};
  };
  auto cond = [&](const std::vector<Value>& s) {
    Value more = g.compare(s[0], g.constant_int(n, DType::kI64), ir::Comparison::kLT);
    Value pending = g.reduce(g.unary("not", s[3]), g.constant_int(0, DType::kBool), batch_positions, ir::Reducer::kOr);
    return std::vector<Value>{g.binary("and", more, pending)};
  };
  std::vector<Value> r = g.while_loop({g.constant_int(0, DType::kI64), symmetric, info, g.unary("not", failed)},
                                      cond, body);
  return {r[1], r[2]};
}

// The Cholesky factor (lower, or upper) and LAPACK's info. stablehlo.cholesky gives no position of a
// failure (XLA fills a failed factor with NaN), so failed batch elements are refactored step by step for
// LAPACK's info and partial factor.
std::pair<Value, Value> cholesky_with_info(Graph& g, Value input, bool upper) {
  // The upper factor of A is the transposed lower factor of A^T.
  Value a = upper ? transpose_matrix(g, input) : input;
  Value factor = cholesky_factor(g, a, false);
  Value diagonal = diagonal_of(g, factor);
  const Type& d = g.type(diagonal);
  Value bad = g.unary("not", g.compare(diagonal, g.constant(0, d.dtype, d.dims), ir::Comparison::kGT));
  Value failed = g.reduce(bad, g.constant_int(0, DType::kBool), {d.rank() - 1}, ir::Reducer::kOr);
  auto [partial, info] = cholesky_failures(g, a, failed);
  const Type& t = g.type(factor);
  factor = g.select(g.broadcast_in_dim(failed, t.dims, dim_range(0, t.rank() - 2)), keep_triangle(g, partial, true),
                    factor);
  return {upper ? transpose_matrix(g, factor) : factor, info};
}

// linalg_cholesky_ex(self, *, upper, check_errors) -> (L, info). check_errors is raised by linalg.cholesky's
// own _linalg_check_errors call.
std::vector<Value> lower_linalg_cholesky_ex(LoweringContext& ctx) {
  auto [factor, info] = cholesky_with_info(ctx.graph, ctx.tensor(0), ctx.boolean(1));
  return {factor, info};
}

// cholesky(self, upper), deprecated: CPU raises for a matrix that is not positive-definite, here a device-side
// check raising at the next sync point (docs/value_checks.md).
std::vector<Value> lower_cholesky(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  auto [factor, info] = cholesky_with_info(g, ctx.tensor(0), ctx.boolean(1));
  const Type& t = g.type(info);
  ctx.check(CheckKind::kNotPositiveDefinite, g.compare(info, g.constant_int(0, t.dtype, t.dims), ir::Comparison::kNE),
            g.convert(info, DType::kI64), {t.rank() > 0 ? 1 : 0});
  return {factor};
}

// cholesky_inverse(self, upper): (L L^T)^-1 = L^-T L^-1, or (U^T U)^-1 = U^-1 U^-T, from the factor's triangle.
std::vector<Value> lower_cholesky_inverse(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value factor = ctx.tensor(0);
  const bool upper = ctx.boolean(1);
  const Type& t = g.type(factor);
  Value inverse_factor = triangular_solve(g, factor, identity(g, t.dtype, t.dims), true, !upper, false, false);
  Value transposed = transpose_matrix(g, inverse_factor);
  return {upper ? matmul(g, inverse_factor, transposed) : matmul(g, transposed, inverse_factor)};
}

// _cholesky_solve_helper(self=B, A=factor, upper): two triangular solves; batch dims are already broadcast.
std::vector<Value> lower_cholesky_solve_helper(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value b = ctx.tensor(0);
  Value factor = ctx.tensor(1);
  const bool upper = ctx.boolean(2);
  // lower: L y = b, L^T x = y.  upper: U^T y = b, U x = y.
  Value y = triangular_solve(g, factor, b, true, !upper, false, upper);
  return {triangular_solve(g, factor, y, true, !upper, false, !upper)};
}

// triangular_solve(self=B, A, upper, transpose, unitriangular) -> (solution, cloned_coefficient)
std::vector<Value> lower_triangular_solve(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value b = broadcast_to(g, ctx.tensor(0), out(ctx, 0).dims);
  Value a = broadcast_to(g, ctx.tensor(1), out(ctx, 1).dims);
  return {triangular_solve(g, a, b, true, !ctx.boolean(2), ctx.boolean(4), ctx.boolean(3)), a};
}

// linalg_solve_triangular(self=A, B, *, upper, left, unitriangular)
std::vector<Value> lower_linalg_solve_triangular(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = out(ctx);
  const Type& a_type = ctx.type_of(0);
  Value a = broadcast_to(g, ctx.tensor(0), append(batch_of(result), {a_type.dims.end()[-2], a_type.dims.back()}));
  Value b = broadcast_to(g, ctx.tensor(1), result.dims);
  return {triangular_solve(g, a, b, ctx.boolean(3), !ctx.boolean(2), ctx.boolean(4), false)};
}

// ---- LU with partial pivoting ----

// Swaps the slices at positions k and p along dim `dim` of x (the rows of a batch of matrices, or the entries
// of a batch of vectors): k is one i64 scalar, p an i64 position per batch element (x's dims before `dim`).
// Selects, not arithmetic, so infinities and NaNs move unchanged.
Value swap_along(Graph& g, Value x, int64_t dim, Value k, Value p) {
  const Type t = g.type(x);
  Value index = g.iota(Type{DType::kI64, t.dims}, dim);
  Value p_full = g.broadcast_in_dim(p, t.dims, dim_range(0, dim));
  Value at_k = g.compare(index, g.broadcast_in_dim(k, t.dims, {}), ir::Comparison::kEQ);
  Value at_p = g.compare(index, p_full, ir::Comparison::kEQ);
  // The entries at k, and at p (picked by a masked sum: every other term is an exact zero).
  std::vector<int64_t> starts_sizes = t.dims;
  starts_sizes[static_cast<size_t>(dim)] = 1;
  std::vector<Value> starts(static_cast<size_t>(t.rank()), g.constant_int(0, DType::kI64));
  starts[static_cast<size_t>(dim)] = k;
  Value entry_k = broadcast_to(g, dynamic_slice(g, x, starts, starts_sizes), t.dims);
  const bool is_float = is_floating(t.dtype);
  Value zero = is_float ? g.constant(-0.0, t.dtype) : g.constant_int(0, t.dtype);
  Value picked = g.select(at_p, x, g.broadcast_in_dim(zero, t.dims, {}));
  Value entry_p = g.reduce(picked, zero, {dim}, ir::Reducer::kAdd);
  std::vector<int64_t> kept = dim_range(0, t.rank());
  kept.erase(kept.begin() + dim);
  entry_p = g.broadcast_in_dim(entry_p, t.dims, kept);
  return g.select(at_k, entry_p, g.select(at_p, entry_k, x));
}

struct Lu {
  Value lu;           // [..., m, n]: unit-lower L below the diagonal, U on and above it
  Value pivots;       // i32 [..., min(m, n)], 1-based rows swapped with each row in turn
  Value permutation;  // i64 [..., m]: row i of L U is row permutation[i] of the input
  Value info;         // i32 [...]: 1-based first zero pivot, 0 if none
};

// Right-looking LU with partial pivoting, one column per loop step. The pivot is the first largest |a| in
// the column on or below the diagonal (|re| + |im| for complex a), as LAPACK's getrf picks it; a zero pivot
// column is left unscaled and recorded in info.
Lu lu_factor(Graph& g, Value a) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t m = t.dims.end()[-2];
  const int64_t n = t.dims.back();
  const int64_t steps = std::min(m, n);
  Value permutation = g.iota(Type{DType::kI64, append(batch, {m})}, static_cast<int64_t>(batch.size()));
  Value pivots = g.constant_int(0, DType::kI32, append(batch, {steps}));
  Value info = g.constant_int(0, DType::kI32, batch);
  if (steps == 0) return {a, pivots, permutation, info};

  const int64_t batch_rank = static_cast<int64_t>(batch.size());
  auto body = [&](const std::vector<Value>& s) {
    Value k = s[0], x = s[1], perm = s[2], piv = s[3], inf = s[4];
    Value rows = row_index(g, t.dims);
    Value columns = column_index(g, t.dims);
    Value k_full = g.broadcast_in_dim(k, t.dims, {});
    // The pivot row: first largest |x[i, k]| for i >= k.
    Value column = g.reshape(dynamic_slice(g, x, matrix_starts(g, batch.size(), g.constant_int(0, DType::kI64), k),
                                           append(batch, {m, 1})),
                             append(batch, {m}));
    const std::vector<int64_t> vector_dims = append(batch, {m});
    Value vector_rows = g.iota(Type{DType::kI64, vector_dims}, batch_rank);
    Value eligible = g.compare(vector_rows, g.broadcast_in_dim(k, vector_dims, {}), ir::Comparison::kGE);
    Value size = is_complex(t.dtype) ? g.binary("add", g.unary("abs", g.real(column)), g.unary("abs", g.imag(column)))
                                     : g.unary("abs", column);
    const DType size_dtype = g.type(size).dtype;
    Value magnitude = g.select(eligible, size, g.constant(-1, size_dtype, vector_dims));
    Value largest = g.reduce(magnitude, g.constant(-1, size_dtype), {batch_rank}, ir::Reducer::kMax);
    Value is_largest = g.compare(magnitude, g.broadcast_in_dim(largest, vector_dims, dim_range(0, batch_rank)),
                                 ir::Comparison::kEQ);
    Value row_or_end = g.select(is_largest, vector_rows, g.constant_int(m, DType::kI64, vector_dims));
    Value p = g.reduce(row_or_end, g.constant_int(m, DType::kI64), {batch_rank}, ir::Reducer::kMin);
    // A NaN column has no largest entry: keep the diagonal row.
    Value no_pivot = g.compare(p, g.constant_int(m, DType::kI64, batch), ir::Comparison::kEQ);
    p = g.select(no_pivot, g.broadcast_in_dim(k, batch, {}), p);

    x = swap_along(g, x, batch_rank, k, p);
    perm = swap_along(g, perm, batch_rank, k, p);
    const std::vector<int64_t> pivot_dims = append(batch, {steps});
    Value at_k = g.compare(g.iota(Type{DType::kI64, pivot_dims}, batch_rank), g.broadcast_in_dim(k, pivot_dims, {}),
                           ir::Comparison::kEQ);
    Value pivot_row = g.convert(g.binary("add", p, g.constant_int(1, DType::kI64, batch)), DType::kI32);
    piv = g.select(at_k, g.broadcast_in_dim(pivot_row, pivot_dims, dim_range(0, batch_rank)), piv);

    // Eliminate below the pivot.
    Value pivot = g.reshape(dynamic_slice(g, x, matrix_starts(g, batch.size(), k, k), append(batch, {1, 1})), batch);
    Value zero_pivot = g.compare(pivot, g.constant(0, t.dtype, batch), ir::Comparison::kEQ);
    Value first_zero = g.binary("and", zero_pivot, g.compare(inf, g.constant_int(0, DType::kI32, batch),
                                                             ir::Comparison::kEQ));
    Value step_number = g.convert(g.binary("add", k, g.constant_int(1, DType::kI64)), DType::kI32);
    inf = g.select(first_zero, g.broadcast_in_dim(step_number, batch, {}), inf);

    Value column_k = broadcast_column(g, x, k);
    Value scaled = g.binary("divide", column_k, g.broadcast_in_dim(pivot, t.dims, dim_range(0, batch_rank)));
    Value multipliers = g.select(g.broadcast_in_dim(zero_pivot, t.dims, dim_range(0, batch_rank)), column_k, scaled);
    Value updated = g.binary("subtract", x, g.binary("multiply", multipliers, broadcast_row(g, x, k)));
    Value below = g.compare(rows, k_full, ir::Comparison::kGT);
    Value right = g.compare(columns, k_full, ir::Comparison::kGT);
    Value on_column = g.compare(columns, k_full, ir::Comparison::kEQ);
    x = g.select(g.binary("and", below, right), updated,
                 g.select(g.binary("and", below, on_column), multipliers, x));
    return std::vector<Value>{g.binary("add", k, g.constant_int(1, DType::kI64)), x, perm, piv, inf};
  };
  auto cond = [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], g.constant_int(steps, DType::kI64), ir::Comparison::kLT)};
  };
  std::vector<Value> r = g.while_loop({g.constant_int(0, DType::kI64), a, permutation, pivots, info}, cond, body);
  return {r[1], r[3], r[2], r[4]};
}

// The row permutation the 1-based LAPACK `pivots` [..., k] describe over m rows: row i of L U is row
// permutation[i] of A (i64 [..., m]).
Value permutation_from_pivots(Graph& g, Value pivots, int64_t m) {
  const Type t = g.type(pivots);
  const std::vector<int64_t> batch(t.dims.begin(), t.dims.end() - 1);
  const int64_t steps = t.dims.back();
  const int64_t batch_rank = static_cast<int64_t>(batch.size());
  Value permutation = g.iota(Type{DType::kI64, append(batch, {m})}, batch_rank);
  if (steps == 0 || m == 0) return permutation;
  auto body = [&](const std::vector<Value>& s) {
    Value k = s[0];
    Value p = g.binary("subtract", g.convert(vector_element(g, s[1], k), DType::kI64),
                       g.constant_int(1, DType::kI64, batch));
    Value perm = swap_along(g, s[2], batch_rank, k, p);
    return std::vector<Value>{g.binary("add", k, g.constant_int(1, DType::kI64)), s[1], perm};
  };
  auto cond = [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], g.constant_int(steps, DType::kI64), ir::Comparison::kLT)};
  };
  return g.while_loop({g.constant_int(0, DType::kI64), pivots, permutation}, cond, body)[2];
}

// The permutation matrix P with A = P L U: P[r, c] = 1 where permutation[c] == r.
Value permutation_matrix(Graph& g, Value permutation, DType dtype) {
  const Type t = g.type(permutation);
  const int64_t m = t.dims.back();
  const std::vector<int64_t> dims = append({t.dims.begin(), t.dims.end() - 1}, {m, m});
  Value source = g.broadcast_in_dim(permutation, dims, append(dim_range(0, t.rank() - 1), {t.rank()}));
  Value is_one = g.compare(source, row_index(g, dims), ir::Comparison::kEQ);
  return g.select(is_one, g.constant(1, dtype, dims), g.constant(0, dtype, dims));
}

// out[..., i, :] = x[..., rows[..., i], :] for x [..., m, k] and i64 rows [..., m], by one gather.
Value gather_rows(Graph& g, Value x, Value rows) {
  const Type t = g.type(x);
  const int64_t m = t.dims.end()[-2];
  const int64_t k = t.dims.back();
  if (t.numel() == 0) return x;
  // Flat index of (batch b, row rows[b, i], column c) = (b * m + rows[b, i]) * k + c.
  std::vector<int64_t> batch = batch_of(t);
  int64_t batch_count = 1;
  for (int64_t d : batch) batch_count *= d;
  const std::vector<int64_t> flat_dims{batch_count, m, k};
  Value batch_start = g.binary("multiply", g.iota(Type{DType::kI64, flat_dims}, 0),
                               g.constant_int(m, DType::kI64, flat_dims));
  Value source_rows = g.broadcast_in_dim(g.reshape(rows, {batch_count, m}), flat_dims, {0, 1});
  Value flat = g.binary("add", g.binary("multiply", g.binary("add", batch_start, source_rows),
                                        g.constant_int(k, DType::kI64, flat_dims)),
                        g.iota(Type{DType::kI64, flat_dims}, 2));
  Value picked = g.gather_flat(g.reshape(x, {t.numel()}), g.reshape(flat, {batch_count, m, k, 1}));
  return g.reshape(picked, t.dims);
}

// The inverse of a permutation [..., m]: inverse[permutation[i]] = i, found as the position of each value.
Value invert_permutation(Graph& g, Value permutation) {
  const Type t = g.type(permutation);
  const int64_t m = t.dims.back();
  const int64_t batch_rank = t.rank() - 1;
  const std::vector<int64_t> dims = append({t.dims.begin(), t.dims.end() - 1}, {m, m});
  // match[..., j, i]: permutation[i] == j.
  Value values = g.broadcast_in_dim(permutation, dims, append(dim_range(0, batch_rank), {batch_rank + 1}));
  Value match = g.compare(values, g.iota(Type{DType::kI64, dims}, batch_rank), ir::Comparison::kEQ);
  Value positions = g.select(match, g.iota(Type{DType::kI64, dims}, batch_rank + 1),
                             g.constant_int(0, DType::kI64, dims));
  return g.reduce(positions, g.constant_int(0, DType::kI64), {batch_rank + 1}, ir::Reducer::kAdd);
}

// Solves A X = B (or A^H X = B when adjoint) from A's LU factors; lu [..., n, n], b [..., n, k] with equal
// batch dims, permutation from the pivots.
Value lu_solve_left(Graph& g, Value lu, Value permutation, Value b, bool adjoint) {
  if (!adjoint) {  // A = P L U: X = U^-1 L^-1 P^T B
    Value y = triangular_solve(g, lu, gather_rows(g, b, permutation), true, true, true, false);
    return triangular_solve(g, lu, y, true, false, false, false);
  }
  // A^H = U^H L^H P^T: X = P L^-H U^-H B
  Value y = triangular_solve(g, lu, b, true, false, false, true);
  Value z = triangular_solve(g, lu, y, true, true, true, true);
  return gather_rows(g, z, invert_permutation(g, permutation));
}

// Solves op(A) X = B (left) or X op(A) = B, op(A) being A or A^H, via the transposed system: X A = B is
// A^H conj(X)^T = conj(B)^T, and X A^H = B is conj(A) X^T = B^T.
Value lu_solve(Graph& g, Value lu, Value permutation, Value b, bool left, bool adjoint) {
  if (left) return lu_solve_left(g, lu, permutation, b, adjoint);
  if (!adjoint) {
    Value y = lu_solve_left(g, lu, permutation, conjugate(g, transpose_matrix(g, b)), true);
    return transpose_matrix(g, conjugate(g, y));
  }
  return transpose_matrix(g, lu_solve_left(g, conjugate(g, lu), permutation, transpose_matrix(g, b), false));
}

void require_pivoting(const LoweringContext& ctx, size_t arg) {
  if (!ctx.boolean(arg)) {
    throw std::invalid_argument("LU without pivoting is not implemented on the CPU, so neither on tpu");
  }
}

// linalg_lu_factor_ex(A, *, pivot, check_errors) -> (LU, pivots, info)
std::vector<Value> lower_linalg_lu_factor_ex(LoweringContext& ctx) {
  require_pivoting(ctx, 1);
  Lu lu = lu_factor(ctx.graph, ctx.tensor(0));
  return {lu.lu, lu.pivots, lu.info};
}

// The unit-lower L [..., m, k] and upper U [..., k, n] held in a packed LU [..., m, n], k = min(m, n).
std::pair<Value, Value> unpack_lu(Graph& g, Value lu) {
  const Type t = g.type(lu);
  const int64_t m = t.dims.end()[-2];
  const int64_t n = t.dims.back();
  const int64_t k = std::min(m, n);
  const std::vector<int64_t> batch = batch_of(t);
  std::vector<int64_t> zero(static_cast<size_t>(t.rank()), 0), unit(static_cast<size_t>(t.rank()), 1);
  Value l = g.slice(lu, zero, append(batch, {m, k}), unit);
  const Type l_type = g.type(l);
  Value strictly_lower = g.compare(row_index(g, l_type.dims), column_index(g, l_type.dims), ir::Comparison::kGT);
  l = g.binary("add", g.select(strictly_lower, l, g.constant(0, t.dtype, l_type.dims)),
               identity(g, t.dtype, l_type.dims));
  Value u = keep_triangle(g, g.slice(lu, zero, append(batch, {k, n}), unit), false);
  return {l, u};
}

// linalg_lu(A, *, pivot) -> (P, L, U)
std::vector<Value> lower_linalg_lu(LoweringContext& ctx) {
  require_pivoting(ctx, 1);
  Graph& g = ctx.graph;
  Lu lu = lu_factor(g, ctx.tensor(0));
  auto [l, u] = unpack_lu(g, lu.lu);
  return {permutation_matrix(g, lu.permutation, out(ctx, 0).dtype), l, u};
}

// lu_unpack(LU_data, LU_pivots, unpack_data, unpack_pivots) -> (P, L, U); the parts not asked for are empty.
std::vector<Value> lower_lu_unpack(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value lu = ctx.tensor(0);
  const Type t = g.type(lu);
  std::vector<Value> results;
  if (ctx.boolean(3)) {
    Value permutation = permutation_from_pivots(g, ctx.tensor(1), t.dims.end()[-2]);
    results.push_back(permutation_matrix(g, permutation, out(ctx, 0).dtype));
  } else {
    results.push_back(g.constant(0, out(ctx, 0).dtype, out(ctx, 0).dims));
  }
  if (ctx.boolean(2)) {
    auto [l, u] = unpack_lu(g, lu);
    results.push_back(l);
    results.push_back(u);
  } else {
    results.push_back(g.constant(0, out(ctx, 1).dtype, out(ctx, 1).dims));
    results.push_back(g.constant(0, out(ctx, 2).dtype, out(ctx, 2).dims));
  }
  return results;
}

// linalg_lu_solve(LU, pivots, B, *, left, adjoint): LU and B broadcast over the result's batch dims.
std::vector<Value> lower_linalg_lu_solve(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = out(ctx);
  const Type& lu_type = ctx.type_of(0);
  const std::vector<int64_t> batch = batch_of(result);
  const int64_t n = lu_type.dims.back();
  Value lu = broadcast_to(g, ctx.tensor(0), append(batch, {n, n}));
  Value pivots = broadcast_to(g, ctx.tensor(1), append(batch, {n}));
  Value b = broadcast_to(g, ctx.tensor(2), result.dims);
  return {lu_solve(g, lu, permutation_from_pivots(g, pivots, n), b, ctx.boolean(3), ctx.boolean(4))};
}

// (-1)^(number of rows the pivots swap), as `dtype` [...].
Value permutation_sign(Graph& g, Value pivots, DType dtype) {
  const Type t = g.type(pivots);
  Value position = g.binary("add", g.iota(Type{DType::kI32, t.dims}, t.rank() - 1),
                            g.constant_int(1, DType::kI32, t.dims));
  Value swapped = g.compare(pivots, position, ir::Comparison::kNE);
  Value factor = g.select(swapped, g.constant(-1, dtype, t.dims), g.constant(1, dtype, t.dims));
  return g.reduce(factor, g.constant(1, dtype), {t.rank() - 1}, ir::Reducer::kMul);
}

// The LU factors _linalg_det and _linalg_slogdet return: PyTorch's CPU kernel factors A^T when A is
// contiguous (its column-major layout), and the backward formulas expect exactly that.
Lu determinant_factors(const LoweringContext& ctx) {
  Value a = ctx.tensor(0);
  return lu_factor(ctx.graph, ctx.args[0].contiguous ? transpose_matrix(ctx.graph, a) : a);
}

// _linalg_det(A) -> (result, LU, pivots)
std::vector<Value> lower_linalg_det(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Lu lu = determinant_factors(ctx);
  Value diagonal = diagonal_of(g, lu.lu);
  const Type& d = g.type(diagonal);
  Value product = g.reduce(diagonal, g.constant(1, d.dtype), {d.rank() - 1}, ir::Reducer::kMul);
  return {g.binary("multiply", product, permutation_sign(g, lu.pivots, d.dtype)), lu.lu, lu.pivots};
}

// _linalg_slogdet(A) -> (sign, logabsdet, LU, pivots); a singular A has sign 0 and logabsdet -inf.
std::vector<Value> lower_linalg_slogdet(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Lu lu = determinant_factors(ctx);
  Value diagonal = diagonal_of(g, lu.lu);
  const Type& d = g.type(diagonal);
  Value signs = g.reduce(g.unary("sign", diagonal), g.constant(1, d.dtype), {d.rank() - 1}, ir::Reducer::kMul);
  Value sign = g.binary("multiply", signs, permutation_sign(g, lu.pivots, d.dtype));
  Value logs = g.unary("log", magnitude(g, diagonal));
  Value logabsdet = g.reduce(logs, g.constant(0, g.type(logs).dtype), {d.rank() - 1}, ir::Reducer::kAdd);
  return {sign, logabsdet, lu.lu, lu.pivots};
}

// linalg_inv_ex(A, *, check_errors) -> (inverse, info)
std::vector<Value> lower_linalg_inv_ex(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value a = ctx.tensor(0);
  Lu lu = lu_factor(g, a);
  const Type& t = g.type(a);
  return {lu_solve(g, lu.lu, lu.permutation, identity(g, t.dtype, t.dims), true, false), lu.info};
}

// _linalg_solve_ex(A, B, *, left, check_errors) -> (result, LU, pivots, info). A vector B (result of rank
// A's - 1; only with left, PyTorch's checks reject it otherwise) is a one-column matrix.
std::vector<Value> lower_linalg_solve_ex(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = out(ctx, 0);
  const Type& lu_type = out(ctx, 1);
  const bool left = ctx.boolean(2);
  Value a = broadcast_to(g, ctx.tensor(0), lu_type.dims);
  Lu lu = lu_factor(g, a);
  const bool vector = result.rank() == lu_type.rank() - 1;
  const std::vector<int64_t> b_dims = vector ? append(result.dims, {1}) : result.dims;
  Value b = broadcast_to(g, g.reshape(ctx.tensor(1), vector ? append(g.type(ctx.tensor(1)).dims, {1})
                                                            : g.type(ctx.tensor(1)).dims),
                         b_dims);
  Value x = lu_solve(g, lu.lu, lu.permutation, b, left, false);
  return {g.reshape(x, result.dims), lu.lu, lu.pivots, lu.info};
}

// ---- Symmetric eigendecomposition and SVD by Jacobi rotations ----
//
// Both use parallel (round-robin) Jacobi: each round rotates n/2 disjoint index pairs (p, q) at once and
// n - 1 rounds make a sweep that meets every pair once. A round gathers the rows (or columns) into the order
// [p's..., q's...], combines the two halves with the rotations' (c, s) and scatters them back, so it costs
// O(n^2) per matrix. Sweeps repeat until the off-diagonal part is negligible. An odd n is padded with one zero
// row and column, which no rotation ever touches (its pairs have a zero off-diagonal, hence c = 1, s = 0
// exactly), and is cut off at the end.

// Machine epsilon of the dtype the decompositions compute in.
double epsilon(DType dtype) { return dtype == DType::kF64 ? 2.220446049250313e-16 : 1.1920928955078125e-07; }

// The order of round `round` (an i64 scalar) of the circle method over `size` (even) indices: the pairs'
// first indices, then their second indices, i64 [size]. Index 0 stays put; the others rotate one place per
// round.
Value round_robin_order(Graph& g, Value round, int64_t size) {
  const std::vector<int64_t> dims{size};
  Value slot = g.iota(Type{DType::kI64, dims}, 0);
  // Slots 0..size/2-1 face slots size-1..size/2: the second half of the order lists the partners.
  Value half = g.constant_int(size / 2, DType::kI64, dims);
  Value second_half = g.compare(slot, half, ir::Comparison::kGE);
  Value partner_slot = g.binary("subtract", g.constant_int(size - 1 + size / 2, DType::kI64, dims), slot);
  slot = g.select(second_half, partner_slot, slot);
  Value shifted = g.binary("add", g.binary("subtract", slot, g.constant_int(1, DType::kI64, dims)),
                           g.broadcast_in_dim(round, dims, {}));
  Value rotating = g.binary("add", g.binary("remainder", shifted, g.constant_int(size - 1, DType::kI64, dims)),
                            g.constant_int(1, DType::kI64, dims));
  Value fixed = g.compare(slot, g.constant_int(0, DType::kI64, dims), ir::Comparison::kEQ);
  return g.select(fixed, g.constant_int(0, DType::kI64, dims), rotating);
}

// Sum over the last dim of a * b.
Value row_dot(Graph& g, Value a, Value b) {
  const Type& t = g.type(a);
  return g.reduce(g.binary("multiply", a, b), g.constant(0, t.dtype), {t.rank() - 1}, ir::Reducer::kAdd);
}

// The rotations (c, s) that make each symmetric 2x2 [[app, apq], [apq, aqq]] diagonal under J^T . J with
// J = [[c, s], [-s, c]]; all [..., n/2]. A zero apq gives exactly c = 1, s = 0.
std::pair<Value, Value> rotation(Graph& g, Value app, Value aqq, Value apq) {
  const Type pt = g.type(apq);
  const DType dtype = pt.dtype;
  auto scalar = [&](double v) { return g.constant(v, dtype, pt.dims); };
  Value zero = g.compare(apq, scalar(0), ir::Comparison::kEQ);
  Value safe_apq = g.select(zero, scalar(1), apq);
  Value tau = g.binary("divide", g.binary("subtract", aqq, app), g.binary("multiply", scalar(2), safe_apq));
  // t = sign(tau) / (|tau| + sqrt(1 + tau^2)), the smaller root; sign(0) = 1.
  Value magnitude = g.unary("abs", tau);
  Value root = g.unary("sqrt", g.binary("add", scalar(1), g.binary("multiply", tau, tau)));
  // For a huge |tau|, tau^2 overflows and t is 1 / (2 |tau|) to working precision.
  Value denominator = g.select(g.op("is_finite", {root}, Type{DType::kBool, pt.dims}), g.binary("add", magnitude, root),
                               g.binary("multiply", scalar(2), magnitude));
  Value negative = g.compare(tau, scalar(0), ir::Comparison::kLT);
  Value t = g.binary("divide", g.select(negative, scalar(-1), scalar(1)), denominator);
  t = g.select(zero, scalar(0), t);
  Value c = g.unary("rsqrt", g.binary("add", scalar(1), g.binary("multiply", t, t)));
  return {c, g.binary("multiply", t, c)};
}

// The rows of x [..., size, k] in `order` [size] (the same for the whole batch).
Value rows_in_order(Graph& g, Value x, Value order) {
  const Type t = g.type(x);
  return gather_rows(g, x, g.broadcast_in_dim(order, std::vector<int64_t>(t.dims.begin(), t.dims.end() - 1),
                                              {t.rank() - 2}));
}

// Applies the round's rotations to the rows of x [..., size, k] held in round order: row p becomes
// c x_p - s x_q and row q becomes s x_p + c x_q, i.e. J^T x. Returns the rows in round order.
Value rotate_ordered_rows(Graph& g, Value ordered, Value c, Value s) {
  const Type t = g.type(ordered);
  const int64_t size = t.dims.end()[-2];
  const int64_t rank = t.rank();
  std::vector<int64_t> zero(static_cast<size_t>(rank), 0), unit(static_cast<size_t>(rank), 1);
  std::vector<int64_t> middle = t.dims, second_start(static_cast<size_t>(rank), 0);
  middle.end()[-2] = size / 2;
  second_start.end()[-2] = size / 2;
  Value first = g.slice(ordered, zero, middle, unit);
  Value second = g.slice(ordered, second_start, t.dims, unit);
  const std::vector<int64_t> pair_positions = dim_range(0, rank - 1);
  Value c_full = g.broadcast_in_dim(c, middle, pair_positions);
  Value s_full = g.broadcast_in_dim(s, middle, pair_positions);
  Value new_first = g.binary("subtract", g.binary("multiply", c_full, first), g.binary("multiply", s_full, second));
  Value new_second = g.binary("add", g.binary("multiply", s_full, first), g.binary("multiply", c_full, second));
  return g.concatenate({new_first, new_second}, rank - 2);
}

// The first and second halves of the last dim of v [..., size].
std::pair<Value, Value> halves(Graph& g, Value v) {
  const Type t = g.type(v);
  const int64_t size = t.dims.back();
  std::vector<int64_t> zero(static_cast<size_t>(t.rank()), 0), unit(static_cast<size_t>(t.rank()), 1);
  std::vector<int64_t> middle = t.dims, second_start(static_cast<size_t>(t.rank()), 0);
  middle.back() = size / 2;
  second_start.back() = size / 2;
  return {g.slice(v, zero, middle, unit), g.slice(v, second_start, t.dims, unit)};
}

// Pads the last `dims_to_pad` dims (1 or 2) of x with one zero when `size` (x's last dim) is odd.
Value pad_to_even(Graph& g, Value x, int dims_to_pad) {
  const Type t = g.type(x);
  if (t.dims.back() % 2 == 0) return x;
  std::vector<int64_t> low(static_cast<size_t>(t.rank()), 0), high(static_cast<size_t>(t.rank()), 0);
  high.back() = 1;
  if (dims_to_pad == 2) high.end()[-2] = 1;
  return g.pad(x, g.constant(0, t.dtype), low, high);
}

// Repeats Jacobi sweeps: `step(round, state)` applies one round's rotations, `converged(state)` is an i1 per
// batch element, tested after each sweep; at most `max_sweeps`.
std::vector<Value> jacobi_sweeps(Graph& g, std::vector<Value> state, int64_t size, int64_t max_sweeps,
                                 const std::function<std::vector<Value>(Value, const std::vector<Value>&)>& step,
                                 const std::function<Value(const std::vector<Value>&)>& converged) {
  if (size <= 1) return state;
  auto sweep_cond = [&](const std::vector<Value>& s) {
    Value more = g.compare(s[0], g.constant_int(max_sweeps, DType::kI64), ir::Comparison::kLT);
    Value done = converged({s.begin() + 1, s.end()});
    const Type& dt = g.type(done);
    Value all_done = g.reduce(done, g.constant_int(1, DType::kBool), dim_range(0, dt.rank()), ir::Reducer::kAnd);
    return std::vector<Value>{g.binary("and", more, g.unary("not", all_done))};
  };
  auto sweep_body = [&](const std::vector<Value>& s) {
    std::vector<Value> inner{g.constant_int(0, DType::kI64)};
    inner.insert(inner.end(), s.begin() + 1, s.end());
    auto round_cond = [&](const std::vector<Value>& r) {
      return std::vector<Value>{g.compare(r[0], g.constant_int(size - 1, DType::kI64), ir::Comparison::kLT)};
    };
    auto round_body = [&](const std::vector<Value>& r) {
      std::vector<Value> next{g.binary("add", r[0], g.constant_int(1, DType::kI64))};
      std::vector<Value> stepped = step(r[0], {r.begin() + 1, r.end()});
      next.insert(next.end(), stepped.begin(), stepped.end());
      return next;
    };
    std::vector<Value> after = g.while_loop(inner, round_cond, round_body);
    after[0] = g.binary("add", s[0], g.constant_int(1, DType::kI64));
    return after;
  };
  std::vector<Value> init{g.constant_int(0, DType::kI64)};
  init.insert(init.end(), state.begin(), state.end());
  std::vector<Value> r = g.while_loop(init, sweep_cond, sweep_body);
  return {r.begin() + 1, r.end()};
}

// Sorts `keys` [..., n] (descending or ascending) and returns them with the order, i64 [..., n].
std::pair<Value, Value> sort_with_order(Graph& g, Value keys, bool descending) {
  const Type t = g.type(keys);
  Value order = g.iota(Type{DType::kI64, t.dims}, t.rank() - 1);
  const Type scalar{t.dtype, {}};
  const Type index{DType::kI64, {}};
  std::string comparator = g.region({scalar, scalar, index, index}, [&](const std::vector<Value>& a) {
    return std::vector<Value>{g.compare(a[0], a[1], descending ? ir::Comparison::kGT : ir::Comparison::kLT)};
  });
  std::vector<Value> r = g.op_multi("stablehlo.sort", {keys, order}, {t, Type{DType::kI64, t.dims}},
                                    "dimension = " + std::to_string(t.rank() - 1) + " : i64, is_stable = true",
                                    comparator);
  return {r[0], r[1]};
}

// The columns of x [..., m, n] in `order` [..., n].
Value gather_columns(Graph& g, Value x, Value order) {
  return transpose_matrix(g, gather_rows(g, transpose_matrix(g, x), order));
}

struct Eigen {
  Value values;   // [..., n], ascending
  Value vectors;  // [..., n, n], columns
};

// Eigendecomposition of the symmetric matrix a [..., n, n] by two-sided Jacobi.
Eigen symmetric_eigen(Graph& g, Value a) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const DType dtype = t.dtype;
  Value x = pad_to_even(g, a, 2);
  const int64_t size = g.type(x).dims.back();
  const std::vector<int64_t> square = append(batch, {size, size});
  const std::vector<int64_t> batch_positions = dim_range(0, static_cast<int64_t>(batch.size()));
  // Both the matrix and the eigenvector columns are kept in the original index order between rounds.
  auto step = [&](Value round, const std::vector<Value>& s) {
    Value order = round_robin_order(g, round, size);
    Value back = invert_permutation(g, order);
    // x in round order on both sides: its diagonal holds app then aqq, the diagonal of its upper-right block apq.
    Value ordered = transpose_matrix(g, rows_in_order(g, transpose_matrix(g, rows_in_order(g, s[0], order)), order));
    auto [app, aqq] = halves(g, diagonal_of(g, ordered));
    std::vector<int64_t> block_start(square.size(), 0), block_limit = square, unit(square.size(), 1);
    block_start.back() = size / 2;
    block_limit.end()[-2] = size / 2;
    Value apq = diagonal_of(g, g.slice(ordered, block_start, block_limit, unit));
    auto [c, sn] = rotation(g, app, aqq, apq);
    // J^T x J: rotate the rows, then the columns (as rows of the transpose), then restore the index order.
    Value rotated = rotate_ordered_rows(g, transpose_matrix(g, rotate_ordered_rows(g, ordered, c, sn)), c, sn);
    Value x = rows_in_order(g, transpose_matrix(g, rows_in_order(g, rotated, back)), back);
    // V J: rotate V's columns.
    Value v_columns = rows_in_order(g, transpose_matrix(g, s[1]), order);
    Value v = transpose_matrix(g, rows_in_order(g, rotate_ordered_rows(g, v_columns, c, sn), back));
    return std::vector<Value>{x, v};
  };
  auto converged = [&](const std::vector<Value>& s) {
    Value squares = g.binary("multiply", s[0], s[0]);
    Value off_diagonal = g.compare(row_index(g, square), column_index(g, square), ir::Comparison::kNE);
    Value off = g.reduce(g.select(off_diagonal, squares, g.constant(0, dtype, square)), g.constant(0, dtype),
                         {static_cast<int64_t>(batch.size()), static_cast<int64_t>(batch.size()) + 1},
                         ir::Reducer::kAdd);
    Value total = g.reduce(squares, g.constant(0, dtype),
                           {static_cast<int64_t>(batch.size()), static_cast<int64_t>(batch.size()) + 1},
                           ir::Reducer::kAdd);
    // ||off-diagonal||_F <= sqrt(size) eps ||x||_F: a stricter bound is out of reach of rounding in the
    // rotations themselves.
    const double tolerance = static_cast<double>(size) * epsilon(dtype) * epsilon(dtype);
    return g.compare(off, g.binary("multiply", total, g.constant(tolerance, dtype, batch)), ir::Comparison::kLE);
  };
  std::vector<Value> r = jacobi_sweeps(g, {x, identity(g, dtype, square)}, size, 30, step, converged);
  std::vector<int64_t> zero(square.size(), 0), unit(square.size(), 1);
  Value values = diagonal_of(g, g.slice(r[0], zero, t.dims, unit));
  Value vectors = g.slice(r[1], zero, t.dims, unit);
  auto [sorted, order] = sort_with_order(g, values, false);
  return {sorted, gather_columns(g, vectors, order)};
}

// The symmetric matrix whose lower (or upper) triangle is a's.
Value symmetric_from_triangle(Graph& g, Value a, bool lower) {
  const Type& t = g.type(a);
  Value keep = g.compare(row_index(g, t.dims), column_index(g, t.dims),
                         lower ? ir::Comparison::kGE : ir::Comparison::kLE);
  return g.select(keep, a, transpose_matrix(g, a));
}

// _linalg_eigh(A, UPLO, compute_v) -> (eigenvalues, eigenvectors); eigenvectors empty unless compute_v.
std::vector<Value> lower_linalg_eigh(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const std::string& uplo = ctx.text(1);
  Eigen e = symmetric_eigen(g, symmetric_from_triangle(g, ctx.tensor(0), uplo == "L" || uplo == "l"));
  if (!ctx.boolean(2)) return {e.values, g.constant(0, out(ctx, 1).dtype, out(ctx, 1).dims)};
  return {e.values, e.vectors};
}

struct Svd {
  Value u;  // [..., m, k]
  Value s;  // [..., k], descending
  Value v;  // [..., n, k]
};

// Thin SVD of a [..., m, n] with m >= n by one-sided Jacobi: rotations orthogonalize a's columns; their norms
// are the singular values, the normalized columns U and the accumulated rotations V.
Svd one_sided_jacobi(Graph& g, Value a) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t m = t.dims.end()[-2];
  const int64_t n = t.dims.back();
  const DType dtype = t.dtype;
  Value x = pad_to_even(g, a, 1);
  const int64_t size = g.type(x).dims.back();
  const std::vector<int64_t> square = append(batch, {size, size});
  const int64_t column_dim = static_cast<int64_t>(batch.size());
  auto step = [&](Value round, const std::vector<Value>& s) {
    Value order = round_robin_order(g, round, size);
    Value back = invert_permutation(g, order);
    // The columns as rows, in round order: [..., size, m].
    Value columns = rows_in_order(g, transpose_matrix(g, s[0]), order);
    const Type ct = g.type(columns);
    std::vector<int64_t> zero(static_cast<size_t>(ct.rank()), 0), unit(static_cast<size_t>(ct.rank()), 1);
    std::vector<int64_t> middle = ct.dims, second_start(static_cast<size_t>(ct.rank()), 0);
    middle.end()[-2] = size / 2;
    second_start.end()[-2] = size / 2;
    Value first = g.slice(columns, zero, middle, unit);
    Value second = g.slice(columns, second_start, ct.dims, unit);
    auto [c, sn] = rotation(g, row_dot(g, first, first), row_dot(g, second, second), row_dot(g, first, second));
    Value x = transpose_matrix(g, rows_in_order(g, rotate_ordered_rows(g, columns, c, sn), back));
    Value v_columns = rows_in_order(g, transpose_matrix(g, s[1]), order);
    Value v = transpose_matrix(g, rows_in_order(g, rotate_ordered_rows(g, v_columns, c, sn), back));
    return std::vector<Value>{x, v};
  };
  auto converged = [&](const std::vector<Value>& s) {
    // Every pair of columns orthogonal to working precision: gamma^2 <= tol^2 alpha beta.
    Value gram = matmul(g, transpose_matrix(g, s[0]), s[0]);
    Value norms = diagonal_of(g, gram);
    Value scale = g.binary("multiply", g.broadcast_in_dim(norms, square, append(dim_range(0, column_dim), {column_dim})),
                           g.broadcast_in_dim(norms, square, append(dim_range(0, column_dim), {column_dim + 1})));
    Value off_diagonal = g.compare(row_index(g, square), column_index(g, square), ir::Comparison::kNE);
    const double tolerance = static_cast<double>(m) * epsilon(dtype);
    Value excess = g.compare(g.binary("multiply", gram, gram),
                             g.binary("multiply", scale, g.constant(tolerance * tolerance, dtype, square)),
                             ir::Comparison::kGT);
    Value bad = g.binary("and", off_diagonal, excess);
    return g.unary("not", g.reduce(bad, g.constant_int(0, DType::kBool), {column_dim, column_dim + 1},
                                   ir::Reducer::kOr));
  };
  std::vector<Value> r = jacobi_sweeps(g, {x, identity(g, dtype, square)}, size, 30, step, converged);
  std::vector<int64_t> zero(square.size(), 0), unit(square.size(), 1);
  Value columns = g.slice(r[0], zero, append(batch, {m, n}), unit);
  Value v = g.slice(r[1], zero, append(batch, {n, n}), unit);
  Value norms = g.unary("sqrt", g.reduce(g.binary("multiply", columns, columns), g.constant(0, dtype),
                                         {column_dim}, ir::Reducer::kAdd));
  auto [sorted, order] = sort_with_order(g, norms, true);
  const std::vector<int64_t> mn = append(batch, {m, n});
  Value divisor = g.broadcast_in_dim(norms, mn, append(dim_range(0, column_dim), {column_dim + 1}));
  Value is_zero = g.compare(divisor, g.constant(0, dtype, mn), ir::Comparison::kEQ);
  Value u = g.select(is_zero, g.constant(0, dtype, mn), g.binary("divide", columns, divisor));
  return {gather_columns(g, u, order), sorted, gather_columns(g, v, order)};
}

// An orthonormal basis [..., m, m - k] of the complement of the orthonormal columns u [..., m, k]: the
// strongest columns of the projector I - u u^T after orthogonalizing them.
Value orthogonal_complement(Graph& g, Value u) {
  const Type t = g.type(u);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t m = t.dims.end()[-2];
  const int64_t k = t.dims.back();
  Value projector = g.binary("subtract", identity(g, t.dtype, append(batch, {m, m})),
                             matmul(g, u, transpose_matrix(g, u)));
  Svd basis = one_sided_jacobi(g, projector);
  std::vector<int64_t> zero(static_cast<size_t>(t.rank()), 0), unit(static_cast<size_t>(t.rank()), 1);
  return g.slice(basis.u, zero, append(batch, {m, m - k}), unit);
}

// _linalg_svd(A, full_matrices, compute_uv, *, driver) -> (U, S, Vh); U and Vh empty unless compute_uv.
std::vector<Value> lower_linalg_svd(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value a = ctx.tensor(0);
  const Type t = g.type(a);
  const int64_t m = t.dims.end()[-2];
  const int64_t n = t.dims.back();
  const bool wide = m < n;
  // A wide matrix is the transpose of a tall one: A^T = V S U^T.
  Svd svd = one_sided_jacobi(g, wide ? transpose_matrix(g, a) : a);
  if (!ctx.boolean(2)) {
    return {g.constant(0, out(ctx, 0).dtype, out(ctx, 0).dims), svd.s,
            g.constant(0, out(ctx, 2).dtype, out(ctx, 2).dims)};
  }
  Value left = svd.u;  // the tall side's factor, [..., max, min]
  if (ctx.boolean(1) && m != n) {
    left = g.concatenate({left, orthogonal_complement(g, left)}, t.rank() - 1);
  }
  if (wide) return {svd.v, svd.s, transpose_matrix(g, left)};
  return {left, svd.s, transpose_matrix(g, svd.v)};
}

// linalg_lstsq(A, B, rcond?, *, driver?) -> (solution, residuals, rank, singular_values) for the drivers
// gelsy (the CPU's default) and gels: the minimum-norm least-squares solution, here through the SVD. gelsy
// returns the rank, the number of singular values above rcond times the largest (rcond defaults to
// eps * max(m, n)); gels, which assumes full rank, returns the squared residuals of a tall A instead. gelsd
// and gelss return residuals only for full-rank data, a shape no program can know beforehand: they run on
// the CPU.
std::vector<Value> lower_linalg_lstsq(LoweringContext& ctx) {
  if (!ctx.is_none(3) && ctx.text(3) != "gelsy" && ctx.text(3) != "gels") throw NotLowered{};
  Graph& g = ctx.graph;
  const Type& a_type = ctx.type_of(0);
  const Type& b_type = ctx.type_of(1);
  const Type& solution = out(ctx, 0);
  const DType dtype = solution.dtype;
  const int64_t m = a_type.dims.end()[-2], n = a_type.dims.back();
  // B is a vector (or a batch of them) as torch reads it: 1-d, or A's shape without its last dim.
  const bool vector =
      b_type.rank() == 1 || b_type.dims == std::vector<int64_t>(a_type.dims.begin(), a_type.dims.end() - 1);
  const std::vector<int64_t> batch(solution.dims.begin(), solution.dims.end() - (vector ? 1 : 2));
  const int64_t k = vector ? 1 : solution.dims.back();
  Value b = vector ? g.reshape(ctx.tensor(1), append(b_type.dims, {1})) : ctx.tensor(1);
  b = broadcast_to(g, b, append(batch, {m, k}));
  Value a = broadcast_to(g, ctx.tensor(0), append(batch, {m, n}));
  Value x = g.constant(0, dtype, append(batch, {n, k}));
  Value rank = g.constant_int(0, DType::kI64, batch);
  if (std::min(m, n) > 0) {
    const bool wide = m < n;  // A^T = V S U^T
    Svd svd = one_sided_jacobi(g, wide ? transpose_matrix(g, a) : a);
    Value left = wide ? svd.v : svd.u;   // A = left S right^T
    Value right = wide ? svd.u : svd.v;
    const Type& s_type = g.type(svd.s);
    const int64_t last = s_type.rank() - 1;
    const double rcond = ctx.is_none(2) ? epsilon(dtype) * static_cast<double>(std::max(m, n)) : ctx.real(2);
    std::vector<int64_t> zero(s_type.dims.size(), 0), first = s_type.dims, unit(s_type.dims.size(), 1);
    first.back() = 1;
    Value largest = g.reshape(g.slice(svd.s, zero, first, unit), batch);
    Value cutoff = g.broadcast_in_dim(g.binary("multiply", largest, g.constant(rcond, dtype, batch)), s_type.dims,
                                      dim_range(0, last));
    Value kept = g.compare(svd.s, cutoff, ir::Comparison::kGT);
    Value inverse = g.select(kept, g.binary("divide", g.constant(1, dtype, s_type.dims), svd.s),
                             g.constant(0, dtype, s_type.dims));
    rank = g.reduce(g.convert(kept, DType::kI64), g.constant_int(0, DType::kI64), {last}, ir::Reducer::kAdd);
    Value projected = matmul(g, transpose_matrix(g, left), b);  // [..., p, k]
    const Type& p_type = g.type(projected);
    Value scaled = g.binary("multiply", projected, g.broadcast_in_dim(inverse, p_type.dims, dim_range(0, last + 1)));
    x = matmul(g, right, scaled);
  }
  Value residuals = g.constant(0, dtype, out(ctx, 1).dims);
  if (out(ctx, 1).numel() > 0) {
    Value error = g.binary("subtract", matmul(g, a, x), b);
    residuals = g.reshape(g.reduce(g.binary("multiply", error, error), g.constant(0, dtype),
                                   {static_cast<int64_t>(batch.size())}, ir::Reducer::kAdd),
                          out(ctx, 1).dims);
  }
  if (out(ctx, 2).dims != batch) rank = g.constant_int(0, DType::kI64, out(ctx, 2).dims);  // gels: no rank
  return {g.reshape(x, solution.dims), residuals, rank, g.constant(0, dtype, out(ctx, 3).dims)};
}

// ---- Householder QR ----
//
// LAPACK's compact form (geqrf): column k below the diagonal holds the reflector v_k (v_k[k] = 1 implied),
// R is on and above the diagonal, and H_k = I - tau_k v_k v_k^T with Q = H_0 H_1 ... H_{k-1}. The reflector
// is chosen as LAPACK's larfg does (beta = -sign(alpha) ||(alpha, x)||, tau = 0 when x is zero), so Q and R
// carry the same signs as on the CPU.

// The reflector vector of column `k` (an i64 scalar) of the compact form a [..., m, n], as [..., m]: zero
// above k, one at k, a's entries below.
Value reflector(Graph& g, Value a, Value k) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t m = t.dims.end()[-2];
  const std::vector<int64_t> vector_dims = append(batch, {m});
  Value column = g.reshape(dynamic_slice(g, a, matrix_starts(g, batch.size(), g.constant_int(0, DType::kI64), k),
                                         append(batch, {m, 1})),
                           vector_dims);
  Value rows = g.iota(Type{DType::kI64, vector_dims}, static_cast<int64_t>(batch.size()));
  Value k_full = g.broadcast_in_dim(k, vector_dims, {});
  Value below = g.compare(rows, k_full, ir::Comparison::kGT);
  Value at = g.compare(rows, k_full, ir::Comparison::kEQ);
  return g.select(below, column, g.select(at, g.constant(1, t.dtype, vector_dims), g.constant(0, t.dtype, vector_dims)));
}

// geqrf by Householder reflections, one column per loop step: returns (compact a, tau [..., min(m, n)]).
std::pair<Value, Value> householder_qr(Graph& g, Value a) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t m = t.dims.end()[-2];
  const int64_t n = t.dims.back();
  const int64_t steps = std::min(m, n);
  const int64_t batch_rank = static_cast<int64_t>(batch.size());
  const std::vector<int64_t> batch_positions = dim_range(0, batch_rank);
  Value tau = g.constant(0, t.dtype, append(batch, {steps}));
  if (steps == 0) return {a, tau};
  auto body = [&](const std::vector<Value>& s) {
    Value k = s[0], x = s[1], taus = s[2];
    const std::vector<int64_t> vector_dims = append(batch, {m});
    Value column = g.reshape(dynamic_slice(g, x, matrix_starts(g, batch.size(), g.constant_int(0, DType::kI64), k),
                                           append(batch, {m, 1})),
                             vector_dims);
    Value rows = g.iota(Type{DType::kI64, vector_dims}, batch_rank);
    Value k_vector = g.broadcast_in_dim(k, vector_dims, {});
    Value below = g.compare(rows, k_vector, ir::Comparison::kGT);
    Value alpha = vector_element(g, column, k);
    Value tail = g.select(below, column, g.constant(0, t.dtype, vector_dims));
    Value tail_norm = g.unary("sqrt", g.reduce(g.binary("multiply", tail, tail), g.constant(0, t.dtype),
                                               {batch_rank}, ir::Reducer::kAdd));
    auto scalar = [&](double v) { return g.constant(v, t.dtype, batch); };
    Value no_reflection = g.compare(tail_norm, scalar(0), ir::Comparison::kEQ);
    Value norm = g.unary("sqrt", g.binary("add", g.binary("multiply", alpha, alpha),
                                          g.binary("multiply", tail_norm, tail_norm)));
    Value alpha_negative = g.compare(alpha, scalar(0), ir::Comparison::kLT);
    Value beta = g.select(alpha_negative, norm, g.unary("negate", norm));
    beta = g.select(no_reflection, alpha, beta);
    Value safe_beta = g.select(no_reflection, scalar(1), beta);
    Value tau_k = g.select(no_reflection, scalar(0), g.binary("divide", g.binary("subtract", beta, alpha), safe_beta));
    Value denominator = g.select(no_reflection, scalar(1), g.binary("subtract", alpha, beta));
    Value v_tail = g.binary("divide", tail, g.broadcast_in_dim(denominator, vector_dims, batch_positions));
    Value at_k = g.compare(rows, k_vector, ir::Comparison::kEQ);
    Value v = g.select(below, v_tail, g.select(at_k, g.constant(1, t.dtype, vector_dims),
                                               g.constant(0, t.dtype, vector_dims)));
    // Apply H = I - tau v v^T to the columns right of k.
    Value v_matrix = g.broadcast_in_dim(v, t.dims, append(batch_positions, {batch_rank}));
    Value w = g.reduce(g.binary("multiply", v_matrix, x), g.constant(0, t.dtype), {batch_rank}, ir::Reducer::kAdd);
    Value tw = g.binary("multiply", g.broadcast_in_dim(tau_k, g.type(w).dims, batch_positions), w);
    Value applied = g.binary("subtract", x, g.binary("multiply", v_matrix,
                                                     g.broadcast_in_dim(tw, t.dims, append(batch_positions, {batch_rank + 1}))));
    Value k_full = g.broadcast_in_dim(k, t.dims, {});
    Value matrix_rows = row_index(g, t.dims);
    Value matrix_columns = column_index(g, t.dims);
    Value right = g.compare(matrix_columns, k_full, ir::Comparison::kGT);
    Value on_column = g.compare(matrix_columns, k_full, ir::Comparison::kEQ);
    Value column_k = g.select(g.compare(matrix_rows, k_full, ir::Comparison::kGT), v_matrix,
                              g.select(g.compare(matrix_rows, k_full, ir::Comparison::kEQ),
                                       g.broadcast_in_dim(beta, t.dims, batch_positions), x));
    x = g.select(right, applied, g.select(on_column, column_k, x));
    const std::vector<int64_t> tau_dims = append(batch, {steps});
    Value tau_at = g.compare(g.iota(Type{DType::kI64, tau_dims}, batch_rank), g.broadcast_in_dim(k, tau_dims, {}),
                             ir::Comparison::kEQ);
    taus = g.select(tau_at, g.broadcast_in_dim(tau_k, tau_dims, batch_positions), taus);
    return std::vector<Value>{g.binary("add", k, g.constant_int(1, DType::kI64)), x, taus};
  };
  auto cond = [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], g.constant_int(steps, DType::kI64), ir::Comparison::kLT)};
  };
  std::vector<Value> r = g.while_loop({g.constant_int(0, DType::kI64), a, tau}, cond, body);
  return {r[1], r[2]};
}

// Applies the reflectors of the compact form a [..., m, k'] (the first tau.size of them) to c: H c (left,
// c [..., m, p]) or c H (right, c [..., p, m]), for H_i in increasing order of i (forward) or decreasing.
Value apply_reflectors(Graph& g, Value a, Value tau, Value c, bool left, bool forward) {
  const Type ct = g.type(c);
  const int64_t count = g.type(tau).dims.back();
  if (count == 0 || ct.numel() == 0) return c;
  const std::vector<int64_t> batch = batch_of(ct);
  const int64_t batch_rank = static_cast<int64_t>(batch.size());
  const std::vector<int64_t> batch_positions = dim_range(0, batch_rank);
  auto body = [&](const std::vector<Value>& s) {
    Value i = forward ? s[0] : g.binary("subtract", g.constant_int(count - 1, DType::kI64), s[0]);
    Value v = reflector(g, a, i);
    Value tau_i = vector_element(g, tau, i);
    // left: c - tau v (v^T c); right: c - tau (c v) v^T
    const int64_t v_dim = left ? batch_rank : batch_rank + 1;
    const int64_t other_dim = left ? batch_rank + 1 : batch_rank;
    Value v_matrix = g.broadcast_in_dim(v, ct.dims, append(batch_positions, {v_dim}));
    Value w = g.reduce(g.binary("multiply", v_matrix, s[1]), g.constant(0, ct.dtype), {v_dim}, ir::Reducer::kAdd);
    Value tw = g.binary("multiply", g.broadcast_in_dim(tau_i, g.type(w).dims, batch_positions), w);
    Value update = g.binary("multiply", v_matrix, g.broadcast_in_dim(tw, ct.dims, append(batch_positions, {other_dim})));
    return std::vector<Value>{g.binary("add", s[0], g.constant_int(1, DType::kI64)), g.binary("subtract", s[1], update)};
  };
  auto cond = [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], g.constant_int(count, DType::kI64), ir::Comparison::kLT)};
  };
  return g.while_loop({g.constant_int(0, DType::kI64), c}, cond, body)[1];
}

// linalg_householder_product(input, tau): the first n columns of H_0 ... H_{k-1}.
std::vector<Value> lower_linalg_householder_product(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  return {apply_reflectors(g, ctx.tensor(0), ctx.tensor(1), identity(g, t.dtype, t.dims), true, false)};
}

// ormqr(self=a, input2=tau, input3=C, left, transpose): op(Q) C or C op(Q), Q = H_0 ... H_{k-1}.
std::vector<Value> lower_ormqr(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const bool left = ctx.boolean(3);
  const bool transpose = ctx.boolean(4);
  // Q C and C Q^T apply H_{k-1} first; Q^T C and C Q apply H_0 first.
  const bool forward = left == transpose;
  Value c = broadcast_to(g, ctx.tensor(2), out(ctx).dims);
  return {apply_reflectors(g, ctx.tensor(0), ctx.tensor(1), c, left, forward)};
}

// linalg_qr(A, mode) -> (Q, R): "reduced" Q [..., m, k], R [..., k, n]; "complete" Q [..., m, m],
// R [..., m, n]; "r" leaves Q empty.
std::vector<Value> lower_linalg_qr(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& q_type = out(ctx, 0);
  const Type& r_type = out(ctx, 1);
  auto [compact, tau] = householder_qr(g, ctx.tensor(0));
  std::vector<int64_t> zero(r_type.dims.size(), 0), unit(r_type.dims.size(), 1);
  Value r = keep_triangle(g, g.slice(compact, zero, r_type.dims, unit), false);
  if (ctx.text(1) == "r") return {g.constant(0, q_type.dtype, q_type.dims), r};
  return {apply_reflectors(g, compact, tau, identity(g, q_type.dtype, q_type.dims), true, false), r};
}

// geqrf(self) -> (a, tau): LAPACK's compact QR, as householder_qr builds it.
std::vector<Value> lower_geqrf(LoweringContext& ctx) {
  auto [compact, tau] = householder_qr(ctx.graph, ctx.tensor(0));
  return {compact, tau};
}

// ---- Matrix exponential ----

// linalg_matrix_exp(self): scaling and squaring around the degree-13 Pade approximant (Higham, 2005), in
// float32 for 16-bit inputs. Each matrix is scaled by 2^-s with s the smallest power that brings its 1-norm
// under theta_13 = 5.37..., and squared back s times (the batch loops to its largest s; matrices that are
// done are left as they are).
std::vector<Value> lower_linalg_matrix_exp(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = out(ctx);
  const DType dtype = accumulation_dtype(result.dtype);
  Value a = g.convert(ctx.tensor(0), dtype);
  const Type t = g.type(a);
  if (t.numel() == 0) return {a};
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t batch_rank = static_cast<int64_t>(batch.size());
  const std::vector<int64_t> batch_positions = dim_range(0, batch_rank);
  // 1-norm: the largest column sum of |a|.
  Value column_sums = g.reduce(g.unary("abs", a), g.constant(0, dtype), {batch_rank}, ir::Reducer::kAdd);
  Value norm = g.reduce(column_sums, g.constant(0, dtype), {batch_rank}, ir::Reducer::kMax);
  constexpr double kTheta13 = 5.371920351148152;
  Value exponent = g.unary("ceil", g.binary("divide", g.unary("log", g.binary("divide", norm, g.constant(kTheta13, dtype, batch))),
                                            g.constant(std::log(2.0), dtype, batch)));
  // A NaN or infinite norm gives a NaN result whatever s is. Any finite norm needs s <= the largest normal
  // exponent, so 2^-s is a normal number, built exactly from its exponent bits.
  const bool is_double = dtype == DType::kF64;
  const int64_t largest_exponent = is_double ? 1022 : 126;
  Value finite = g.op("is_finite", {exponent}, Type{DType::kBool, batch});
  exponent = g.select(finite, exponent, g.constant(0, dtype, batch));
  exponent = g.binary("maximum", g.binary("minimum", exponent, g.constant(static_cast<double>(largest_exponent), dtype, batch)),
                      g.constant(0, dtype, batch));
  const DType bits_dtype = is_double ? DType::kI64 : DType::kI32;
  Value squarings = g.convert(exponent, DType::kI64);
  Value biased = g.binary("subtract", g.constant_int(is_double ? 1023 : 127, bits_dtype, batch), g.convert(exponent, bits_dtype));
  Value bits = g.binary("shift_left", biased, g.constant_int(is_double ? 52 : 23, bits_dtype, batch));
  Value scale = g.bitcast_convert(bits, Type{dtype, batch});
  Value x = g.binary("multiply", a, g.broadcast_in_dim(scale, t.dims, batch_positions));

  static const double b[14] = {64764752532480000.0, 32382376266240000.0, 7771770303897600.0,
                               1187353796428800.0,  129060195264000.0,   10559470521600.0,
                               670442572800.0,      33522128640.0,       1323241920.0,
                               40840800.0,          960960.0,            16380.0,
                               182.0,               1.0};
  auto times = [&](double c, Value m) { return g.binary("multiply", g.constant(c, dtype, t.dims), m); };
  auto plus = [&](Value p, Value q) { return g.binary("add", p, q); };
  Value eye = identity(g, dtype, t.dims);
  Value x2 = matmul(g, x, x);
  Value x4 = matmul(g, x2, x2);
  Value x6 = matmul(g, x4, x2);
  Value u_inner = matmul(g, x6, plus(plus(times(b[13], x6), times(b[11], x4)), times(b[9], x2)));
  Value u = matmul(g, x, plus(plus(plus(plus(u_inner, times(b[7], x6)), times(b[5], x4)), times(b[3], x2)),
                              times(b[1], eye)));
  Value v_inner = matmul(g, x6, plus(plus(times(b[12], x6), times(b[10], x4)), times(b[8], x2)));
  Value v = plus(plus(plus(plus(v_inner, times(b[6], x6)), times(b[4], x4)), times(b[2], x2)), times(b[0], eye));
  // exp(x) ~ (v - u)^-1 (v + u)
  Lu lu = lu_factor(g, g.binary("subtract", v, u));
  Value pade = lu_solve(g, lu.lu, lu.permutation, plus(v, u), true, false);

  Value most = g.reduce(squarings, g.constant_int(0, DType::kI64), batch_positions, ir::Reducer::kMax);
  auto cond = [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], most, ir::Comparison::kLT)};
  };
  auto body = [&](const std::vector<Value>& s) {
    Value squared = matmul(g, s[1], s[1]);
    Value pending = g.compare(g.broadcast_in_dim(s[0], batch, {}), squarings, ir::Comparison::kLT);
    Value next = g.select(g.broadcast_in_dim(pending, t.dims, batch_positions), squared, s[1]);
    return std::vector<Value>{g.binary("add", s[0], g.constant_int(1, DType::kI64)), next};
  };
  Value e = g.while_loop({g.constant_int(0, DType::kI64), pade}, cond, body)[1];
  return {g.convert(e, result.dtype)};
}

// eye.out(n, *, out) and eye.m_out(n, m, *, out): the identity of out's shape and dtype.
std::vector<Value> lower_eye_out(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  Value diagonal = g.compare(g.iota(Type{DType::kI64, t.dims}, 0), g.iota(Type{DType::kI64, t.dims}, 1),
                             ir::Comparison::kEQ);
  if (t.dtype == DType::kBool) return {diagonal};
  return {g.convert(diagonal, t.dtype)};
}

}  // namespace

void add_linalg_decomposition_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_cholesky_solve_helper", &lower_cholesky_solve_helper});
  table.push_back({"aten::_linalg_det", &lower_linalg_det});
  table.push_back({"aten::_linalg_eigh", &lower_linalg_eigh});
  table.push_back({"aten::_linalg_slogdet", &lower_linalg_slogdet});
  table.push_back({"aten::_linalg_solve_ex", &lower_linalg_solve_ex});
  table.push_back({"aten::_linalg_svd", &lower_linalg_svd});
  table.push_back({"aten::linalg_lstsq", &lower_linalg_lstsq});
  table.push_back({"aten::cholesky_inverse", &lower_cholesky_inverse});
  table.push_back({"aten::eye.m_out", &lower_eye_out});
  table.push_back({"aten::eye.out", &lower_eye_out});
  table.push_back({"aten::linalg_cholesky_ex", &lower_linalg_cholesky_ex});
  table.push_back({"aten::cholesky", &lower_cholesky});
  table.push_back({"aten::linalg_householder_product", &lower_linalg_householder_product});
  table.push_back({"aten::linalg_inv_ex", &lower_linalg_inv_ex});
  table.push_back({"aten::linalg_lu", &lower_linalg_lu});
  table.push_back({"aten::linalg_lu_factor_ex", &lower_linalg_lu_factor_ex});
  table.push_back({"aten::linalg_lu_solve", &lower_linalg_lu_solve});
  table.push_back({"aten::linalg_matrix_exp", &lower_linalg_matrix_exp});
  table.push_back({"aten::linalg_qr", &lower_linalg_qr});
  table.push_back({"aten::geqrf", &lower_geqrf});
  table.push_back({"aten::linalg_solve_triangular", &lower_linalg_solve_triangular});
  table.push_back({"aten::lu_unpack", &lower_lu_unpack});
  table.push_back({"aten::ormqr", &lower_ormqr});
  table.push_back({"aten::triangular_solve", &lower_triangular_solve});
}

}  // namespace torchtpu::lowering
