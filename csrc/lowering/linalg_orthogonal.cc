// Orthogonal factorizations: symmetric eigendecomposition and SVD by Jacobi rotations (and least squares
// through the SVD), Householder QR (qr, geqrf, householder_product, ormqr). Portable StableHLO while loops;
// results follow LAPACK's conventions as PyTorch's CPU kernels return them.
#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>

#include "lowering/matrix.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

// ---- Symmetric eigendecomposition and SVD by Jacobi rotations ----
//
// Both use parallel (round-robin) Jacobi: each round rotates n/2 disjoint index pairs (p, q) at once and
// n - 1 rounds make a sweep that meets every pair once. A round gathers the rows (or columns) into the order
// [p's..., q's...], combines the two halves with the rotations' (c, s) and scatters them back, so it costs
// O(n^2) per matrix. Sweeps repeat until the off-diagonal part is negligible. An odd n is padded with one zero
// row and column, which no rotation ever touches (its pairs have a zero off-diagonal, hence c = 1, s = 0
// exactly), and is cut off at the end.

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

// Sum over the last dim of conj(a) * b.
Value row_dot(Graph& g, Value a, Value b) {
  const Type& t = g.type(a);
  return g.reduce(g.binary("multiply", conjugate(g, a), b), g.constant(0, t.dtype), {t.rank() - 1}, ir::Reducer::kAdd);
}

// |x|^2 elementwise, in x's real type.
Value squared_magnitude(Graph& g, Value x) {
  if (!is_complex(g.type(x).dtype)) return g.binary("multiply", x, x);
  Value re = g.real(x), im = g.imag(x);
  return g.binary("add", g.binary("multiply", re, re), g.binary("multiply", im, im));
}

// A complex x as |x| and x / |x| (1 where x is 0), the phase that a complex Jacobi step divides out so the
// real rotation applies; a real x is its own magnitude, with no phase (an invalid Value).
std::pair<Value, Value> magnitude_and_phase(Graph& g, Value x) {
  const Type& t = g.type(x);
  if (!is_complex(t.dtype)) return {x, Value{}};
  Value size = magnitude(g, x);
  const Type& st = g.type(size);
  Value zero = g.compare(size, g.constant(0, st.dtype, st.dims), ir::Comparison::kEQ);
  Value safe = g.select(zero, g.constant(1, st.dtype, st.dims), size);
  Value phase = g.binary("divide", x, g.complex(safe, g.constant(0, st.dtype, st.dims)));
  return {size, g.select(zero, g.constant(1, t.dtype, t.dims), phase)};
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
// c x_p - s x_q' and row q becomes s x_p + c x_q', i.e. J^T x, where x_q' = x_q times `phase` [..., size/2]
// (complex rows; no phase: x_q' = x_q). c and s are real. Returns the rows in round order.
Value rotate_ordered_rows(Graph& g, Value ordered, Value c, Value s, Value phase = {}) {
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
  if (phase.valid()) second = g.binary("multiply", second, g.broadcast_in_dim(phase, middle, pair_positions));
  Value c_full = g.convert(g.broadcast_in_dim(c, middle, pair_positions), t.dtype);
  Value s_full = g.convert(g.broadcast_in_dim(s, middle, pair_positions), t.dtype);
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

// Eigendecomposition of the symmetric (Hermitian) matrix a [..., n, n] by two-sided Jacobi. For complex a,
// each step first turns q by the phase of a_pq (D = diag(1, e^(-i phi))), so D^H A D has a real a_pq.
Eigen symmetric_eigen(Graph& g, Value a) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const DType dtype = is_complex(t.dtype) ? complex_part(t.dtype) : t.dtype;  // of eigenvalues and rotations
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
    auto [app, aqq] = halves(g, real_part(g, diagonal_of(g, ordered)));
    std::vector<int64_t> block_start(square.size(), 0), block_limit = square, unit(square.size(), 1);
    block_start.back() = size / 2;
    block_limit.end()[-2] = size / 2;
    auto [apq, phase] = magnitude_and_phase(g, diagonal_of(g, g.slice(ordered, block_start, block_limit, unit)));
    auto [c, sn] = rotation(g, app, aqq, apq);
    // J^H x J with J = D R: rotate the rows (row q turned by e^(i phi)), then the columns as rows of the
    // transpose (column q turned by e^(-i phi)), then restore the index order.
    Value column_phase = phase.valid() ? conjugate(g, phase) : phase;
    Value rows_rotated = rotate_ordered_rows(g, ordered, c, sn, phase);
    Value rotated = rotate_ordered_rows(g, transpose_matrix(g, rows_rotated), c, sn, column_phase);
    Value x = rows_in_order(g, transpose_matrix(g, rows_in_order(g, rotated, back)), back);
    // V J: rotate V's columns.
    Value v_columns = rows_in_order(g, transpose_matrix(g, s[1]), order);
    Value v = transpose_matrix(g, rows_in_order(g, rotate_ordered_rows(g, v_columns, c, sn, column_phase), back));
    return std::vector<Value>{x, v};
  };
  auto converged = [&](const std::vector<Value>& s) {
    Value squares = squared_magnitude(g, s[0]);
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
  std::vector<Value> r = jacobi_sweeps(g, {x, identity(g, t.dtype, square)}, size, 30, step, converged);
  std::vector<int64_t> zero(square.size(), 0), unit(square.size(), 1);
  Value values = real_part(g, diagonal_of(g, g.slice(r[0], zero, t.dims, unit)));
  Value vectors = g.slice(r[1], zero, t.dims, unit);
  auto [sorted, order] = sort_with_order(g, values, false);
  return {sorted, gather_columns(g, vectors, order)};
}

// The symmetric (Hermitian) matrix whose lower (or upper) triangle is a's; as LAPACK's heevd, the imaginary
// parts of a complex diagonal are taken as zero.
Value symmetric_from_triangle(Graph& g, Value a, bool lower) {
  const Type& t = g.type(a);
  Value keep = g.compare(row_index(g, t.dims), column_index(g, t.dims),
                         lower ? ir::Comparison::kGE : ir::Comparison::kLE);
  Value full = g.select(keep, a, adjoint_matrix(g, a));
  if (!is_complex(t.dtype)) return full;
  Value diagonal = g.compare(row_index(g, t.dims), column_index(g, t.dims), ir::Comparison::kEQ);
  const Type part{complex_part(t.dtype), t.dims};
  return g.select(diagonal, g.complex(g.real(full), g.constant(0, part.dtype, part.dims)), full);
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
// are the singular values, the normalized columns U and the accumulated rotations V. For complex columns,
// each pair's inner product a_p^H a_q = |g| e^(i phi) is made real by turning a_q by e^(-i phi) first.
Svd one_sided_jacobi(Graph& g, Value a) {
  const Type t = g.type(a);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t m = t.dims.end()[-2];
  const int64_t n = t.dims.back();
  const DType dtype = is_complex(t.dtype) ? complex_part(t.dtype) : t.dtype;  // of norms and rotations
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
    const int64_t last = ct.rank() - 1;
    auto norm2 = [&](Value rows) {
      return g.reduce(squared_magnitude(g, rows), g.constant(0, dtype), {last}, ir::Reducer::kAdd);
    };
    auto [gamma, phase] = magnitude_and_phase(g, row_dot(g, first, second));
    auto [c, sn] = rotation(g, norm2(first), norm2(second), gamma);
    if (phase.valid()) phase = conjugate(g, phase);
    Value x = transpose_matrix(g, rows_in_order(g, rotate_ordered_rows(g, columns, c, sn, phase), back));
    Value v_columns = rows_in_order(g, transpose_matrix(g, s[1]), order);
    Value v = transpose_matrix(g, rows_in_order(g, rotate_ordered_rows(g, v_columns, c, sn, phase), back));
    return std::vector<Value>{x, v};
  };
  auto converged = [&](const std::vector<Value>& s) {
    // Every pair of columns orthogonal to working precision: gamma^2 <= tol^2 alpha beta.
    Value gram = matmul(g, adjoint_matrix(g, s[0]), s[0]);
    Value norms = real_part(g, diagonal_of(g, gram));
    Value scale = g.binary("multiply", g.broadcast_in_dim(norms, square, append(dim_range(0, column_dim), {column_dim})),
                           g.broadcast_in_dim(norms, square, append(dim_range(0, column_dim), {column_dim + 1})));
    Value off_diagonal = g.compare(row_index(g, square), column_index(g, square), ir::Comparison::kNE);
    const double tolerance = static_cast<double>(m) * epsilon(dtype);
    Value excess = g.compare(squared_magnitude(g, gram),
                             g.binary("multiply", scale, g.constant(tolerance * tolerance, dtype, square)),
                             ir::Comparison::kGT);
    Value bad = g.binary("and", off_diagonal, excess);
    return g.unary("not", g.reduce(bad, g.constant_int(0, DType::kBool), {column_dim, column_dim + 1},
                                   ir::Reducer::kOr));
  };
  std::vector<Value> r = jacobi_sweeps(g, {x, identity(g, t.dtype, square)}, size, 30, step, converged);
  std::vector<int64_t> zero(square.size(), 0), unit(square.size(), 1);
  Value columns = g.slice(r[0], zero, append(batch, {m, n}), unit);
  Value v = g.slice(r[1], zero, append(batch, {n, n}), unit);
  Value norms = g.unary("sqrt", g.reduce(squared_magnitude(g, columns), g.constant(0, dtype), {column_dim},
                                         ir::Reducer::kAdd));
  auto [sorted, order] = sort_with_order(g, norms, true);
  const std::vector<int64_t> mn = append(batch, {m, n});
  Value divisor = g.broadcast_in_dim(norms, mn, append(dim_range(0, column_dim), {column_dim + 1}));
  Value is_zero = g.compare(divisor, g.constant(0, dtype, mn), ir::Comparison::kEQ);
  Value u = g.select(is_zero, g.constant(0, t.dtype, mn), g.binary("divide", columns, g.convert(divisor, t.dtype)));
  return {gather_columns(g, u, order), sorted, gather_columns(g, v, order)};
}

// An orthonormal basis [..., m, m - k] of the complement of the orthonormal columns u [..., m, k]: the
// strongest columns of the projector I - u u^H after orthogonalizing them.
Value orthogonal_complement(Graph& g, Value u) {
  const Type t = g.type(u);
  const std::vector<int64_t> batch = batch_of(t);
  const int64_t m = t.dims.end()[-2];
  const int64_t k = t.dims.back();
  Value projector = g.binary("subtract", identity(g, t.dtype, append(batch, {m, m})),
                             matmul(g, u, adjoint_matrix(g, u)));
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
  // CPU refuses a NaN in the input (so do pinv, matrix_rank and the 2-norms built on it); an inf gives NaNs.
  auto nan = [&](Value v) { return g.compare(v, v, ir::Comparison::kNE); };
  ctx.check(CheckKind::kSvdNonFinite, is_complex(t.dtype) ? g.binary("or", nan(g.real(a)), nan(g.imag(a))) : nan(a));
  // A wide matrix is the adjoint of a tall one: A^H = V S U^H.
  Svd svd = one_sided_jacobi(g, wide ? adjoint_matrix(g, a) : a);
  if (!ctx.boolean(2)) {
    return {g.constant(0, out(ctx, 0).dtype, out(ctx, 0).dims), svd.s,
            g.constant(0, out(ctx, 2).dtype, out(ctx, 2).dims)};
  }
  Value left = svd.u;  // the tall side's factor, [..., max, min]
  if (ctx.boolean(1) && m != n) {
    left = g.concatenate({left, orthogonal_complement(g, left)}, t.rank() - 1);
  }
  if (wide) return {svd.v, svd.s, adjoint_matrix(g, left)};
  return {left, svd.s, adjoint_matrix(g, svd.v)};
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
  const DType real = is_complex(dtype) ? complex_part(dtype) : dtype;  // of singular values and residuals
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
    const bool wide = m < n;  // A^H = V S U^H
    Svd svd = one_sided_jacobi(g, wide ? adjoint_matrix(g, a) : a);
    Value left = wide ? svd.v : svd.u;   // A = left S right^H
    Value right = wide ? svd.u : svd.v;
    const Type& s_type = g.type(svd.s);
    const int64_t last = s_type.rank() - 1;
    const double rcond = ctx.is_none(2) ? epsilon(real) * static_cast<double>(std::max(m, n)) : ctx.real(2);
    std::vector<int64_t> zero(s_type.dims.size(), 0), first = s_type.dims, unit(s_type.dims.size(), 1);
    first.back() = 1;
    Value largest = g.reshape(g.slice(svd.s, zero, first, unit), batch);
    Value cutoff = g.broadcast_in_dim(g.binary("multiply", largest, g.constant(rcond, real, batch)), s_type.dims,
                                      dim_range(0, last));
    Value kept = g.compare(svd.s, cutoff, ir::Comparison::kGT);
    Value inverse = g.convert(g.select(kept, g.binary("divide", g.constant(1, real, s_type.dims), svd.s),
                                       g.constant(0, real, s_type.dims)),
                              dtype);
    rank = g.reduce(g.convert(kept, DType::kI64), g.constant_int(0, DType::kI64), {last}, ir::Reducer::kAdd);
    Value projected = matmul(g, adjoint_matrix(g, left), b);  // [..., p, k]
    const Type& p_type = g.type(projected);
    Value scaled = g.binary("multiply", projected, g.broadcast_in_dim(inverse, p_type.dims, dim_range(0, last + 1)));
    x = matmul(g, right, scaled);
  }
  Value residuals = g.constant(0, real, out(ctx, 1).dims);
  if (out(ctx, 1).numel() > 0) {
    Value error = g.binary("subtract", matmul(g, a, x), b);
    residuals = g.reshape(g.reduce(squared_magnitude(g, error), g.constant(0, real),
                                   {static_cast<int64_t>(batch.size())}, ir::Reducer::kAdd),
                          out(ctx, 1).dims);
  }
  if (out(ctx, 2).dims != batch) rank = g.constant_int(0, DType::kI64, out(ctx, 2).dims);  // gels: no rank
  return {g.reshape(x, solution.dims), residuals, rank, g.constant(0, real, out(ctx, 3).dims)};
}

// ---- Householder QR ----
//
// LAPACK's compact form (geqrf): column k below the diagonal holds the reflector v_k (v_k[k] = 1 implied),
// R is on and above the diagonal, and H_k = I - tau_k v_k v_k^H with Q = H_0 H_1 ... H_{k-1}. The reflector
// is chosen as LAPACK's larfg does (beta = -sign(re alpha) ||(alpha, x)||, real; tau = 0 when x is zero and
// alpha real), so Q and R carry the same signs (phases, for complex values) as on the CPU; the trailing
// columns are multiplied by H_k^H.

// linalg_householder_product(input, tau): the first n columns of H_0 ... H_{k-1}.
std::vector<Value> lower_linalg_householder_product(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  return {apply_reflectors(g, ctx.tensor(0), ctx.tensor(1), identity(g, t.dtype, t.dims), true, false, false)};
}

// ormqr(self=a, input2=tau, input3=C, left, transpose): op(Q) C or C op(Q), Q = H_0 ... H_{k-1}, op(Q) = Q^H
// with `transpose` (the conjugate transpose, as LAPACK's unmqr takes it for complex Q).
std::vector<Value> lower_ormqr(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const bool left = ctx.boolean(3);
  const bool transpose = ctx.boolean(4);
  // Q C and C Q^H apply H_{k-1} first; Q^H C and C Q apply H_0 first.
  const bool forward = left == transpose;
  Value c = broadcast_to(g, ctx.tensor(2), out(ctx).dims);
  return {apply_reflectors(g, ctx.tensor(0), ctx.tensor(1), c, left, forward, transpose)};
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
  return {apply_reflectors(g, compact, tau, identity(g, q_type.dtype, q_type.dims), true, false, false), r};
}

// geqrf(self) -> (a, tau): LAPACK's compact QR, as householder_qr builds it.
std::vector<Value> lower_geqrf(LoweringContext& ctx) {
  auto [compact, tau] = householder_qr(ctx.graph, ctx.tensor(0));
  return {compact, tau};
}

}  // namespace

void add_linalg_orthogonal_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_linalg_eigh", &lower_linalg_eigh});
  table.push_back({"aten::_linalg_svd", &lower_linalg_svd});
  table.push_back({"aten::linalg_lstsq", &lower_linalg_lstsq});
  table.push_back({"aten::linalg_householder_product", &lower_linalg_householder_product});
  table.push_back({"aten::linalg_qr", &lower_linalg_qr});
  table.push_back({"aten::geqrf", &lower_geqrf});
  table.push_back({"aten::ormqr", &lower_ormqr});
}

}  // namespace torchtpu::lowering
