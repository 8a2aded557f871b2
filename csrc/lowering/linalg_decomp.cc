// Matrix decompositions and what is built on them: Cholesky, triangular solves, LU with partial pivoting
// (det, slogdet, inv, solve, lu_solve, lu_unpack), matrix_exp, and eye. The Jacobi and Householder families
// are in linalg_orthogonal.cc, LDL in linalg_ldl.cc, eig in linalg_eig.cc; add_linalg_decomposition_rules
// adds them all.
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

#include "lowering/matrix.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

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
  // The symmetric (Hermitian) matrix the lower triangle describes.
  Value strictly_lower = g.compare(row_index(g, t.dims), column_index(g, t.dims), ir::Comparison::kGT);
  Value symmetric = g.select(strictly_lower, a, adjoint_matrix(g, a));
  auto body = [&](const std::vector<Value>& s) {
    Value k = s[0], x = s[1], inf = s[2], done = s[3];
    Value pivot = g.reshape(dynamic_slice(g, x, matrix_starts(g, batch.size(), k, k), append(batch, {1, 1})), batch);
    Value pivot_real = real_part(g, pivot);
    Value bad = g.unary("not", g.compare(pivot_real, g.constant(0, g.type(pivot_real).dtype, batch),
                                         ir::Comparison::kGT));
    Value newly_bad = g.binary("and", bad, g.unary("not", done));
    Value step_number = g.convert(g.binary("add", k, g.constant_int(1, DType::kI64)), DType::kI32);
    inf = g.select(newly_bad, g.broadcast_in_dim(step_number, batch, {}), inf);
    done = g.binary("or", done, bad);
    Value root = g.broadcast_in_dim(g.unary("sqrt", pivot), t.dims, batch_positions);
    Value k_full = g.broadcast_in_dim(k, t.dims, {});
    Value rows = row_index(g, t.dims);
    Value columns = column_index(g, t.dims);
    Value column = g.binary("divide", broadcast_column(g, x, k), root);  // l[i] for i > k
    Value row = adjoint_matrix(g, column);                                 // conj(l[j]) for j > k
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
  Value diagonal = real_part(g, diagonal_of(g, factor));
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

// cholesky_inverse(self, upper): (L L^H)^-1 = L^-H L^-1, or (U^H U)^-1 = U^-1 U^-H, from the factor's triangle.
std::vector<Value> lower_cholesky_inverse(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value factor = ctx.tensor(0);
  const bool upper = ctx.boolean(1);
  const Type& t = g.type(factor);
  Value inverse_factor = triangular_solve(g, factor, identity(g, t.dtype, t.dims), true, !upper, false, false);
  Value adjoint = adjoint_matrix(g, inverse_factor);
  return {upper ? matmul(g, inverse_factor, adjoint) : matmul(g, adjoint, inverse_factor)};
}

// _cholesky_solve_helper(self=B, A=factor, upper): two triangular solves; batch dims are already broadcast.
std::vector<Value> lower_cholesky_solve_helper(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value b = ctx.tensor(0);
  Value factor = ctx.tensor(1);
  const bool upper = ctx.boolean(2);
  // lower: L y = b, L^H x = y.  upper: U^H y = b, U x = y.
  Value y = triangular_solve(g, factor, b, true, !upper, false, upper);
  return {triangular_solve(g, factor, y, true, !upper, false, !upper)};
}

// triangular_solve(self=B, A, upper, transpose, unitriangular) -> (solution, cloned_coefficient). `transpose`
// solves with A^T, also for complex A: the adjoint of conj(A).
std::vector<Value> lower_triangular_solve(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value b = broadcast_to(g, ctx.tensor(0), out(ctx, 0).dims);
  Value a = broadcast_to(g, ctx.tensor(1), out(ctx, 1).dims);
  const bool transpose = ctx.boolean(3);
  return {triangular_solve(g, transpose ? conjugate(g, a) : a, b, true, !ctx.boolean(2), ctx.boolean(4), transpose), a};
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
  // B may have more batch dims than A (A [n, n], B [k, n, m]): the factors are A's, each applied to the batch.
  const std::vector<int64_t> batch(b_dims.begin(), b_dims.end() - 2);
  auto over_batch = [&](Value v, size_t trailing) {
    const std::vector<int64_t>& dims = g.type(v).dims;
    std::vector<int64_t> target = batch;
    target.insert(target.end(), dims.end() - static_cast<std::ptrdiff_t>(trailing), dims.end());
    return broadcast_to(g, v, target);
  };
  Value x = lu_solve(g, over_batch(lu.lu, 2), over_batch(lu.permutation, 1), b, left, false);
  return {g.reshape(x, result.dims), lu.lu, lu.pivots, lu.info};
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
  // 1-norm: the largest column sum of |a|. The norm, the scaling and its exponent are real.
  const DType real = is_complex(dtype) ? complex_part(dtype) : dtype;
  Value column_sums = g.reduce(magnitude(g, a), g.constant(0, real), {batch_rank}, ir::Reducer::kAdd);
  Value norm = g.reduce(column_sums, g.constant(0, real), {batch_rank}, ir::Reducer::kMax);
  constexpr double kTheta13 = 5.371920351148152;
  Value exponent = g.unary("ceil", g.binary("divide", g.unary("log", g.binary("divide", norm, g.constant(kTheta13, real, batch))),
                                            g.constant(std::log(2.0), real, batch)));
  // A NaN or infinite norm gives a NaN result whatever s is. Any finite norm needs s <= the largest normal
  // exponent, so 2^-s is a normal number, built exactly from its exponent bits.
  const bool is_double = real == DType::kF64;
  const int64_t largest_exponent = is_double ? 1022 : 126;
  Value finite = g.op("is_finite", {exponent}, Type{DType::kBool, batch});
  exponent = g.select(finite, exponent, g.constant(0, real, batch));
  exponent = g.binary("maximum", g.binary("minimum", exponent, g.constant(static_cast<double>(largest_exponent), real, batch)),
                      g.constant(0, real, batch));
  const DType bits_dtype = is_double ? DType::kI64 : DType::kI32;
  Value squarings = g.convert(exponent, DType::kI64);
  Value biased = g.binary("subtract", g.constant_int(is_double ? 1023 : 127, bits_dtype, batch), g.convert(exponent, bits_dtype));
  Value bits = g.binary("shift_left", biased, g.constant_int(is_double ? 52 : 23, bits_dtype, batch));
  Value scale = g.convert(g.bitcast_convert(bits, Type{real, batch}), dtype);
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
  table.push_back({"aten::_linalg_slogdet", &lower_linalg_slogdet});
  table.push_back({"aten::_linalg_solve_ex", &lower_linalg_solve_ex});
  table.push_back({"aten::cholesky_inverse", &lower_cholesky_inverse});
  table.push_back({"aten::eye.m_out", &lower_eye_out});
  table.push_back({"aten::eye.out", &lower_eye_out});
  table.push_back({"aten::linalg_cholesky_ex", &lower_linalg_cholesky_ex});
  table.push_back({"aten::cholesky", &lower_cholesky});
  table.push_back({"aten::linalg_inv_ex", &lower_linalg_inv_ex});
  table.push_back({"aten::linalg_lu", &lower_linalg_lu});
  table.push_back({"aten::linalg_lu_factor_ex", &lower_linalg_lu_factor_ex});
  table.push_back({"aten::linalg_lu_solve", &lower_linalg_lu_solve});
  table.push_back({"aten::linalg_matrix_exp", &lower_linalg_matrix_exp});
  table.push_back({"aten::linalg_solve_triangular", &lower_linalg_solve_triangular});
  table.push_back({"aten::lu_unpack", &lower_lu_unpack});
  table.push_back({"aten::triangular_solve", &lower_triangular_solve});
  add_linalg_orthogonal_rules(table);
  add_linalg_ldl_rules(table);
  add_linalg_eig_rules(table);
}

}  // namespace torchtpu::lowering
