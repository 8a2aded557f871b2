// LDL^T factorization of symmetric matrices with Bunch-Kaufman pivoting: linalg_ldl_factor_ex and
// linalg_ldl_solve for real and complex symmetric matrices (hermitian=False; the Hermitian variant of complex
// matrices, hetrf, takes the CPU fallback).
//
// They follow LAPACK's unblocked sytf2 and sytrs for the lower triangle step for step (complex ones compare
// magnitudes as |re| + |im|, as zsytf2 does), so the pivots (1-based
// int32, negative for a 2x2 block: both of its rows hold minus the row it was swapped with), the compact factor
// and `info` (the first zero pivot, 1-based) are what PyTorch's CPU kernels return. Each step is data
// dependent (a 1x1 or a 2x2 pivot, which row to swap in), so one while loop runs per matrix, and a batch is an
// outer loop over its matrices. Inside a step the trailing block is kept as a full symmetric matrix, so the
// symmetric row-and-column swap is two gathers; the columns already factored are never swapped, as in sytf2
// (sytrs replays the swaps one step at a time).
#include <cmath>
#include <functional>

#include "lowering/matrix.h"
#include "lowering/nn.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

// Arithmetic on the values of one n x n problem (rank-0 scalars, [n] vectors, [n, n] matrices or [n, m]
// right-hand sides).
struct Ldl {
  Graph& g;
  int64_t n;
  DType dtype;
  DType real;  // of magnitudes: dtype, or its parts' type for complex values

  Value i64(int64_t v, std::vector<int64_t> dims = {}) const { return g.constant_int(v, DType::kI64, dims); }
  Value c(double v, std::vector<int64_t> dims = {}) const { return g.constant(v, dtype, dims); }
  Value r(double v, std::vector<int64_t> dims = {}) const { return g.constant(v, real, dims); }
  // LAPACK's magnitude for pivoting: |x|, or |re x| + |im x| (cabs1) for complex x.
  Value size(Value x) const {
    if (!is_complex(g.type(x).dtype)) return g.unary("abs", x);
    return g.binary("add", g.unary("abs", g.real(x)), g.unary("abs", g.imag(x)));
  }
  Value index() const { return g.iota(Type{DType::kI64, {n}}, 0); }
  // M[i, j] (i64 scalars).
  Value element(Value m, Value i, Value j) const {
    return g.reshape(g.dynamic_slice(m, {i, j}, {1, 1}), {});
  }
  // Column j of [n, w] as [n]; row i of [n, w] as [w].
  Value column(Value m, Value j) const {
    return g.reshape(g.dynamic_slice(m, {i64(0), j}, {n, 1}), {n});
  }
  Value row(Value m, Value i) const {
    const int64_t width = g.type(m).dims[1];
    return g.reshape(g.dynamic_slice(m, {i, i64(0)}, {1, width}), {width});
  }
  // u v^T for u [n] and v [w].
  Value outer(Value u, Value v) const {
    const std::vector<int64_t> dims{n, g.type(v).dims[0]};
    return g.binary("multiply", g.broadcast_in_dim(u, dims, {0}), g.broadcast_in_dim(v, dims, {1}));
  }
  // v where the [n] mask holds, 0 elsewhere.
  Value keep(Value mask, Value v) const {
    const Type& t = g.type(v);
    return g.select(mask, v, g.constant(0, t.dtype, t.dims));
  }
  Value rows_past(Value k) const {  // [n]: i > k
    return g.compare(index(), g.broadcast_in_dim(k, {n}, {}), Comparison::kGT);
  }
  // x with rows (and, for a matrix, columns too when `symmetric`) r1 and r2 exchanged.
  Value swap(Value x, Value r1, Value r2, bool symmetric) const {
    Value idx = index();
    Value at_r1 = g.compare(idx, g.broadcast_in_dim(r1, {n}, {}), Comparison::kEQ);
    Value at_r2 = g.compare(idx, g.broadcast_in_dim(r2, {n}, {}), Comparison::kEQ);
    Value order = g.select(at_r1, g.broadcast_in_dim(r2, {n}, {}), g.select(at_r2, g.broadcast_in_dim(r1, {n}, {}), idx));
    Value swapped = take_along(g, x, 0, order);
    return symmetric ? take_along(g, swapped, 1, order) : swapped;
  }
  Value add(Value a, Value b) const { return g.binary("add", a, b); }
  Value sub(Value a, Value b) const { return g.binary("subtract", a, b); }
  Value mul(Value a, Value b) const { return g.binary("multiply", a, b); }
  Value div(Value a, Value b) const { return g.binary("divide", a, b); }
  Value ge(Value a, Value b) const { return g.compare(a, b, Comparison::kGE); }
};

struct Factor {
  Value ld;      // [n, n], the compact factor (lower triangle)
  Value pivots;  // [n] i32
  Value info;    // i32 scalar
};

// sytf2 ("L") of one symmetric matrix given by its lower triangle.
Factor factor_one(Graph& g, Value a) {
  const Type t = g.type(a);
  const Ldl m{g, t.dims[0], t.dtype, is_complex(t.dtype) ? complex_part(t.dtype) : t.dtype};
  const int64_t n = m.n;
  const std::vector<int64_t> nn{n, n};
  const double alpha = (1 + std::sqrt(17.0)) / 8;  // Bunch-Kaufman's growth bound
  Value symmetric = g.select(g.compare(row_index(g, nn), column_index(g, nn), Comparison::kGE), a, transpose_matrix(g, a));

  auto body = [&](const std::vector<Value>& s) {
    Value k = s[0], x = s[1], pivots = s[2], info = s[3];
    Value idx = m.index();
    Value below = m.rows_past(k);
    // The largest off-diagonal magnitude in column k (colmax) and its first row (imax).
    Value magnitudes = g.select(below, m.size(m.column(x, k)), m.r(-1, {n}));
    Value largest = g.reduce(magnitudes, m.r(-1), {0}, ir::Reducer::kMax);
    Value colmax = g.binary("maximum", largest, m.r(0));
    Value at_largest = g.binary("and", below, g.compare(magnitudes, g.broadcast_in_dim(largest, {n}, {}), Comparison::kEQ));
    Value imax = g.reduce(g.select(at_largest, idx, m.i64(n - 1, {n})), m.i64(n - 1), {0}, ir::Reducer::kMin);
    Value absakk = m.size(m.element(x, k, k));
    Value zero = g.binary("or", g.compare(g.binary("maximum", absakk, colmax), m.r(0), Comparison::kEQ),
                          g.compare(absakk, absakk, Comparison::kNE));
    // The largest off-diagonal magnitude in row imax of the trailing block.
    Value in_row = g.binary("and", g.compare(idx, g.broadcast_in_dim(k, {n}, {}), Comparison::kGE),
                            g.compare(idx, g.broadcast_in_dim(imax, {n}, {}), Comparison::kNE));
    Value rowmax = g.reduce(m.keep(in_row, m.size(m.row(x, imax))), m.r(0), {0}, ir::Reducer::kMax);
    Value alpha_colmax = m.mul(m.r(alpha), colmax);
    Value keep_k = g.binary("or", zero, g.binary("or", m.ge(absakk, alpha_colmax),
                                                  m.ge(absakk, m.mul(alpha_colmax, m.div(colmax, rowmax)))));
    Value single = g.binary("or", keep_k, m.ge(m.size(m.element(x, imax, imax)), m.mul(m.r(alpha), rowmax)));
    Value kstep = g.select(single, m.i64(1), m.i64(2));
    Value kp = g.select(keep_k, k, imax);
    Value kk = m.add(k, m.sub(kstep, m.i64(1)));

    // Swap kk and kp in the trailing block.
    Value trailing = g.binary("and", g.compare(row_index(g, nn), g.broadcast_in_dim(k, nn, {}), Comparison::kGE),
                              g.compare(column_index(g, nn), g.broadcast_in_dim(k, nn, {}), Comparison::kGE));
    x = g.select(trailing, m.swap(x, kk, kp, true), x);

    // 1x1 pivot: L[:, k] = A[:, k] / d, and the trailing block loses d L L^T.
    Value k1 = m.add(k, m.i64(1));
    Value col_k = m.column(x, k);
    Value below_k = m.rows_past(k), below_k1 = m.rows_past(k1);
    Value d11 = m.div(m.c(1), m.element(x, k, k));
    Value v = m.keep(below_k, col_k);
    Value step1 = m.sub(x, m.mul(g.broadcast_in_dim(d11, nn, {}), m.outer(v, v)));
    Value l1 = m.mul(v, g.broadcast_in_dim(d11, {n}, {}));
    // 2x2 pivot (LAPACK's formulas): columns k and k + 1 of L from the block's inverse.
    Value d21 = m.element(x, k1, k);
    Value e11 = m.div(m.element(x, k1, k1), d21), e22 = m.div(m.element(x, k, k), d21);
    Value scale = m.div(m.div(m.c(1), m.sub(m.mul(e11, e22), m.c(1))), d21);
    Value a_k = m.keep(below_k1, col_k), a_k1 = m.keep(below_k1, m.column(x, k1));
    auto bcast = [&](Value scalar) { return g.broadcast_in_dim(scalar, {n}, {}); };
    Value wk = m.mul(bcast(scale), m.sub(m.mul(bcast(e11), a_k), a_k1));
    Value wk1 = m.mul(bcast(scale), m.sub(m.mul(bcast(e22), a_k1), a_k));
    Value step2 = m.sub(x, m.add(m.outer(a_k, wk), m.outer(a_k1, wk1)));

    Value rows = row_index(g, nn), cols = column_index(g, nn);
    auto after = [&](Value r) { return g.compare(r, g.broadcast_in_dim(m.add(k, kstep), nn, {}), Comparison::kGE); };
    auto in_column = [&](Value j) { return g.compare(cols, g.broadcast_in_dim(j, nn, {}), Comparison::kEQ); };
    Value block = g.binary("and", after(rows), after(cols));
    Value two = g.compare(kstep, m.i64(2), Comparison::kEQ);
    Value updated = g.select(g.broadcast_in_dim(two, nn, {}), step2, step1);
    Value next = g.select(block, updated, x);
    Value below_block = after(rows);
    Value l_k = g.select(g.broadcast_in_dim(two, {n}, {}), wk, l1);
    next = g.select(g.binary("and", below_block, in_column(k)), g.broadcast_in_dim(l_k, nn, {0}), next);
    next = g.select(g.binary("and", g.binary("and", below_block, in_column(k1)), g.broadcast_in_dim(two, nn, {})),
                    g.broadcast_in_dim(wk1, nn, {0}), next);
    x = g.select(g.broadcast_in_dim(zero, nn, {}), x, next);

    // Pivots: kp + 1 for a 1x1 step, -(kp + 1) on both rows of a 2x2 one; info: the first zero pivot.
    Value label = g.convert(g.select(two, g.unary("negate", m.add(kp, m.i64(1))), m.add(kp, m.i64(1))), DType::kI32);
    Value in_step = g.binary("and", g.compare(idx, g.broadcast_in_dim(k, {n}, {}), Comparison::kGE),
                             g.compare(idx, g.broadcast_in_dim(m.add(k, kstep), {n}, {}), Comparison::kLT));
    pivots = g.select(in_step, g.broadcast_in_dim(label, {n}, {}), pivots);
    Value first_zero = g.binary("and", zero, g.compare(info, g.constant_int(0, DType::kI32), Comparison::kEQ));
    info = g.select(first_zero, g.convert(k1, DType::kI32), info);
    return std::vector<Value>{m.add(k, kstep), x, pivots, info};
  };
  auto cond = [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], m.i64(n), Comparison::kLT)};
  };
  std::vector<Value> r = g.while_loop(
      {m.i64(0), symmetric, g.constant_int(0, DType::kI32, {n}), g.constant_int(0, DType::kI32)}, cond, body);
  return {keep_triangle(g, r[1], true), r[2], r[3]};
}

// sytrs ("L") for one factor: solves A X = B from ld [n, n], pivots [n] and b [n, m].
Value solve_one(Graph& g, Value ld, Value pivots, Value b) {
  const Type t = g.type(b);
  const Ldl m{g, t.dims[0], t.dtype, t.dtype};
  const int64_t n = m.n, width = t.dims[1];
  const std::vector<int64_t> nw{n, width};
  auto pivot_at = [&](Value k) {
    return g.convert(g.reshape(g.dynamic_slice(pivots, {k}, {1}), {}), DType::kI64);
  };
  auto bcast_row = [&](Value row) { return g.broadcast_in_dim(row, nw, {1}); };
  auto is_row = [&](Value r) { return g.compare(g.iota(Type{DType::kI64, nw}, 0), g.broadcast_in_dim(r, nw, {}), Comparison::kEQ); };

  // L D y = P b, one pivot block at a time.
  auto forward = [&](const std::vector<Value>& s) {
    Value k = s[0], x = s[1];
    Value k1 = m.add(k, m.i64(1));
    Value p = pivot_at(k);
    Value single = g.compare(p, m.i64(0), Comparison::kGT);
    x = m.swap(x, g.select(single, k, k1), g.select(single, m.sub(p, m.i64(1)), m.sub(g.unary("negate", p), m.i64(1))),
               false);
    Value xk = m.row(x, k), xk1 = m.row(x, k1);
    // 1x1: x[i] -= L[i, k] x[k] below k, then x[k] /= D[k, k].
    Value one = m.sub(x, m.outer(m.keep(m.rows_past(k), m.column(ld, k)), xk));
    one = g.select(is_row(k), bcast_row(m.div(xk, g.broadcast_in_dim(m.element(ld, k, k), {width}, {}))), one);
    // 2x2: x[i] -= L[i, k] x[k] + L[i, k+1] x[k+1] below k + 1, then the block's 2x2 solve.
    Value below = m.rows_past(k1);
    Value two = m.sub(x, m.add(m.outer(m.keep(below, m.column(ld, k)), xk), m.outer(m.keep(below, m.column(ld, k1)), xk1)));
    Value off = m.element(ld, k1, k);
    Value akm1 = m.div(m.element(ld, k, k), off), ak = m.div(m.element(ld, k1, k1), off);
    auto w = [&](Value scalar) { return g.broadcast_in_dim(scalar, {width}, {}); };
    Value denom = w(m.sub(m.mul(akm1, ak), m.c(1)));
    Value bkm1 = m.div(xk, w(off)), bk = m.div(xk1, w(off));
    two = g.select(is_row(k), bcast_row(m.div(m.sub(m.mul(w(ak), bkm1), bk), denom)), two);
    two = g.select(is_row(k1), bcast_row(m.div(m.sub(m.mul(w(akm1), bk), bkm1), denom)), two);
    return std::vector<Value>{m.add(k, g.select(single, m.i64(1), m.i64(2))),
                              g.select(g.broadcast_in_dim(single, nw, {}), one, two)};
  };
  // L^T x = y, from the last block back, undoing the swaps.
  auto backward = [&](const std::vector<Value>& s) {
    Value k = s[0], x = s[1];
    Value km1 = m.sub(k, m.i64(1));
    Value p = pivot_at(k);
    Value single = g.compare(p, m.i64(0), Comparison::kGT);
    Value below = m.rows_past(k);
    auto dot = [&](Value column) {  // sum over i > k of L[i, column] x[i]
      Value weights = m.keep(below, m.column(ld, column));
      return g.dot_general(weights, x, {}, {}, {0}, {0}, m.dtype);
    };
    Value xk = m.sub(m.row(x, k), dot(k));
    x = g.select(is_row(k), bcast_row(xk), x);
    Value xkm1 = m.sub(m.row(x, km1), dot(km1));
    x = g.select(g.binary("and", is_row(km1), g.broadcast_in_dim(g.unary("not", single), nw, {})), bcast_row(xkm1), x);
    x = m.swap(x, k, g.select(single, m.sub(p, m.i64(1)), m.sub(g.unary("negate", p), m.i64(1))), false);
    return std::vector<Value>{m.sub(k, g.select(single, m.i64(1), m.i64(2))), x};
  };
  Value y = g.while_loop({m.i64(0), b}, [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], m.i64(n), Comparison::kLT)};
  }, forward)[1];
  return g.while_loop({m.i64(n - 1), y}, [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], m.i64(0), Comparison::kGE)};
  }, backward)[1];
}

// Runs `one` on each of the `count` problems stacked along dim 0 of `inputs`, writing its results into
// stacks of `result_types`.
std::vector<Value> over_batch(Graph& g, int64_t count, const std::vector<Value>& inputs, const std::vector<Type>& result_types,
                              const std::function<std::vector<Value>(const std::vector<Value>&)>& one) {
  auto origin = [&](const std::vector<int64_t>& dims) {
    return std::vector<Value>(dims.size(), g.constant_int(0, DType::kI64));
  };
  std::vector<Value> init = {g.constant_int(0, DType::kI64)};
  for (const Type& t : result_types) init.push_back(g.constant(0, t.dtype, t.dims));
  auto body = [&](const std::vector<Value>& s) {
    std::vector<Value> slices;
    for (Value input : inputs) {
      const Type& t = g.type(input);
      std::vector<Value> starts = origin(t.dims);
      starts[0] = s[0];
      std::vector<int64_t> sizes = t.dims;
      sizes[0] = 1;
      slices.push_back(g.reshape(g.dynamic_slice(input, starts, sizes), {sizes.begin() + 1, sizes.end()}));
    }
    std::vector<Value> results = one(slices);
    std::vector<Value> next = {g.binary("add", s[0], g.constant_int(1, DType::kI64))};
    for (size_t r = 0; r < results.size(); ++r) {
      std::vector<int64_t> dims = g.type(results[r]).dims;
      dims.insert(dims.begin(), 1);
      std::vector<Value> starts = origin(dims);
      starts[0] = s[0];
      next.push_back(g.dynamic_update_slice(s[r + 1], g.reshape(results[r], dims), starts));
    }
    return next;
  };
  std::vector<Value> r = g.while_loop(init, [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], g.constant_int(count, DType::kI64), Comparison::kLT)};
  }, body);
  return {r.begin() + 1, r.end()};
}

int64_t product(const std::vector<int64_t>& dims) {
  int64_t p = 1;
  for (int64_t d : dims) p *= d;
  return p;
}

// Complex Hermitian factorizations (hetrf, hetrs) run on the CPU; for real matrices the flag changes nothing.
void require_symmetric_variant(const LoweringContext& ctx, size_t hermitian_arg, size_t matrix_arg) {
  if (is_complex(ctx.type_of(matrix_arg).dtype) && ctx.boolean(hermitian_arg)) throw NotLowered{};
}

// linalg_ldl_factor_ex(self, *, hermitian, check_errors) -> (LD, pivots, info)
std::vector<Value> lower_linalg_ldl_factor_ex(LoweringContext& ctx) {
  require_symmetric_variant(ctx, 1, 0);
  Graph& g = ctx.graph;
  const Type& a = ctx.type_of(0);
  const int64_t n = a.dims.back(), count = product(batch_of(a));
  if (n == 0 || count == 0) {  // nothing to factor: an empty factor and pivots, info 0
    return {g.constant(0, a.dtype, out(ctx, 0).dims), g.constant_int(0, DType::kI32, out(ctx, 1).dims),
            g.constant_int(0, DType::kI32, out(ctx, 2).dims)};
  }
  Value stacked = g.reshape(ctx.tensor(0), {count, n, n});
  std::vector<Value> r = over_batch(g, count, {stacked},
                                    {Type{a.dtype, {count, n, n}}, Type{DType::kI32, {count, n}}, Type{DType::kI32, {count}}},
                                    [&](const std::vector<Value>& one) {
                                      Factor f = factor_one(g, one[0]);
                                      return std::vector<Value>{f.ld, f.pivots, f.info};
                                    });
  return {g.reshape(r[0], out(ctx, 0).dims), g.reshape(r[1], out(ctx, 1).dims), g.reshape(r[2], out(ctx, 2).dims)};
}

// linalg_ldl_solve(LD, pivots, B, *, hermitian): the batch dims broadcast.
std::vector<Value> lower_linalg_ldl_solve(LoweringContext& ctx) {
  require_symmetric_variant(ctx, 3, 0);
  Graph& g = ctx.graph;
  const Type& result = out(ctx);
  const std::vector<int64_t> batch = batch_of(result);
  const int64_t n = result.dims.end()[-2], width = result.dims.back(), count = product(batch);
  if (result.numel() == 0) return {g.constant(0, result.dtype, result.dims)};
  Value ld = g.reshape(broadcast_to(g, ctx.tensor(0), append(batch, {n, n})), {count, n, n});
  Value pivots = g.reshape(broadcast_to(g, ctx.tensor(1), append(batch, {n})), {count, n});
  Value b = g.reshape(broadcast_to(g, ctx.tensor(2), result.dims), {count, n, width});
  std::vector<Value> r = over_batch(g, count, {ld, pivots, b}, {Type{result.dtype, {count, n, width}}},
                                    [&](const std::vector<Value>& one) {
                                      return std::vector<Value>{solve_one(g, one[0], one[1], one[2])};
                                    });
  return {g.reshape(r[0], result.dims)};
}

}  // namespace

void add_linalg_ldl_rules(std::vector<Rule>& table) {
  table.push_back({"aten::linalg_ldl_factor_ex", &lower_linalg_ldl_factor_ex});
  table.push_back({"aten::linalg_ldl_solve", &lower_linalg_ldl_solve});
}

}  // namespace torchtpu::lowering
