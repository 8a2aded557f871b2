// Pairwise p-norm distances: _cdist_forward / _cdist_backward and _pdist_forward / _pdist_backward.
//
// Both broadcast the rows against each other ([..., P, 1, M] - [..., 1, R, M]) and reduce over M, with
// PyTorch's special cases for p = 0 (count of differing coordinates), 1, 2 and infinity. (cdist's
// matrix-multiply path for large inputs is a composite of other ops and never reaches these rules.) pdist
// is the upper triangle of the square distance matrix, picked and spread back with host-computed indices.
#include <cmath>
#include <limits>

#include "lowering/nn.h"

namespace torchtpu::lowering {

using ir::Comparison;
using ir::Reducer;

Value p_norm_last(Graph& g, Value diff, double p) {
  const Type t = g.type(diff);
  const int64_t last = t.rank() - 1;
  Value zero = g.constant(0, t.dtype);
  Value magnitude = g.unary("abs", diff);
  if (p == 0) {
    Value nonzero = g.convert(g.compare(diff, g.constant(0, t.dtype, t.dims), Comparison::kNE), t.dtype);
    return g.reduce(nonzero, zero, {last}, Reducer::kAdd);
  }
  if (p == 1) return g.reduce(magnitude, zero, {last}, Reducer::kAdd);
  if (p == 2) return g.unary("sqrt", g.reduce(g.binary("multiply", diff, diff), zero, {last}, Reducer::kAdd));
  if (std::isinf(p)) return g.reduce(magnitude, zero, {last}, Reducer::kMax);
  Value powered = g.binary("power", magnitude, g.constant(p, t.dtype, t.dims));
  Value total = g.reduce(powered, zero, {last}, Reducer::kAdd);
  const std::vector<int64_t> dims = g.type(total).dims;
  return g.binary("power", total, g.constant(1.0 / p, t.dtype, dims));
}

namespace {

// x1 - x2 for every row pair: x1 [..., P, M] and x2 [..., R, M] (batch dims broadcast to `batch`) give
// [batch..., P, R, M].
Value row_differences(Graph& g, Value x1, Value x2, const std::vector<int64_t>& batch, DType dtype) {
  const std::vector<int64_t> d1 = g.type(x1).dims, d2 = g.type(x2).dims;
  const int64_t rows1 = d1[d1.size() - 2], rows2 = d2[d2.size() - 2], width = d1.back();
  const int64_t b = static_cast<int64_t>(batch.size());
  std::vector<int64_t> full = batch;
  full.insert(full.end(), {rows1, rows2, width});
  std::vector<int64_t> shape1 = batch, shape2 = batch;
  shape1.insert(shape1.end(), {rows1, width});
  shape2.insert(shape2.end(), {rows2, width});
  const std::vector<int64_t> batch_dims = dim_range(0, b);
  std::vector<int64_t> place1 = batch_dims, place2 = batch_dims;
  place1.insert(place1.end(), {b, b + 2});
  place2.insert(place2.end(), {b + 1, b + 2});
  Value a = g.broadcast_in_dim(broadcast_to(g, g.convert(x1, dtype), shape1), full, place1);
  Value c = g.broadcast_in_dim(broadcast_to(g, g.convert(x2, dtype), shape2), full, place2);
  return g.binary("subtract", a, c);
}

// d(dist)/d(x1) times grad for every pair, before summing over the x2 rows: `diff` [..., P, R, M],
// `dist` and `grad` [..., P, R]. Pairs at distance 0 get 0, as in PyTorch.
Value p_norm_grad(Graph& g, Value diff, Value dist, Value grad, double p) {
  const Type t = g.type(diff);
  const int64_t rank = t.rank();
  const std::vector<int64_t> pair_dims = dim_range(0, rank - 1);
  Value d = g.broadcast_in_dim(dist, t.dims, pair_dims);
  Value gr = g.broadcast_in_dim(grad, t.dims, pair_dims);
  Value zero = g.constant(0, t.dtype, t.dims);
  auto constant = [&](double v) { return g.constant(v, t.dtype, t.dims); };
  if (p == 0) return zero;
  Value sign = g.unary("sign", diff);
  if (p == 1) return g.binary("multiply", gr, sign);
  if (std::isinf(p)) {
    Value at_max = g.compare(g.unary("abs", diff), d, Comparison::kEQ);
    return g.select(at_max, g.binary("multiply", gr, sign), zero);
  }
  Value at_zero = g.compare(d, zero, Comparison::kEQ);
  Value value;
  if (p == 2) {
    value = g.binary("divide", g.binary("multiply", gr, diff), d);
  } else {
    Value magnitude = g.unary("abs", diff);
    Value scale = g.binary("divide", gr, g.binary("power", d, constant(p - 1)));
    if (p < 2) {
      value = g.binary("multiply", g.binary("multiply", sign, g.binary("power", magnitude, constant(p - 1))), scale);
      if (p < 1) at_zero = g.binary("or", at_zero, g.compare(diff, zero, Comparison::kEQ));
    } else {
      value = g.binary("multiply", g.binary("multiply", diff, g.binary("power", magnitude, constant(p - 2))), scale);
    }
  }
  return g.select(at_zero, zero, value);
}

// Sums `x` down to `dims` (the inverse of a NumPy broadcast).
Value sum_to(Graph& g, Value x, const std::vector<int64_t>& dims) {
  const Type t = g.type(x);
  const int64_t lead = t.rank() - static_cast<int64_t>(dims.size());
  std::vector<int64_t> reduced;
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (d < lead || (dims[static_cast<size_t>(d - lead)] == 1 && t.dims[static_cast<size_t>(d)] != 1)) {
      reduced.push_back(d);
    }
  }
  if (reduced.empty()) return x;
  return g.reshape(sum_over(g, x, reduced), dims);
}

std::vector<int64_t> leading(const std::vector<int64_t>& dims, size_t drop) {
  return std::vector<int64_t>(dims.begin(), dims.end() - static_cast<std::ptrdiff_t>(drop));
}

// _cdist_forward(x1, x2, p, compute_mode)
std::vector<Value> lower_cdist_forward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  Value diff = row_differences(g, ctx.tensor(0), ctx.tensor(1), leading(result.dims, 2), accumulate);
  return {g.convert(p_norm_last(g, diff, ctx.real(2)), result.dtype)};
}

// _cdist_backward(grad, x1, x2, p, cdist): the gradient with respect to x1.
std::vector<Value> lower_cdist_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  const std::vector<int64_t> pair_dims = ctx.type_of(4).dims;
  const std::vector<int64_t> batch = leading(pair_dims, 2);
  Value diff = row_differences(g, ctx.tensor(1), ctx.tensor(2), batch, accumulate);
  Value per_pair = p_norm_grad(g, diff, g.convert(ctx.tensor(4), accumulate),
                               broadcast_to(g, g.convert(ctx.tensor(0), accumulate), pair_dims), ctx.real(3));
  Value grad = sum_over(g, per_pair, {static_cast<int64_t>(batch.size()) + 1});
  return {g.convert(sum_to(g, grad, result.dims), result.dtype)};
}

// Flat positions i * n + j of the pairs i < j in row-major order (pdist's order), and of their mirrors.
std::pair<std::vector<double>, std::vector<double>> upper_pairs(int64_t n) {
  std::vector<double> upper, lower;
  for (int64_t i = 0; i < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) {
      upper.push_back(static_cast<double>(i * n + j));
      lower.push_back(static_cast<double>(j * n + i));
    }
  }
  return {upper, lower};
}

// _pdist_forward(self, p): distances between the rows i < j of self [N, M].
std::vector<Value> lower_pdist_forward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  const int64_t n = ctx.type_of(0).dims[0];
  if (result.numel() == 0) return {g.constant(0, result.dtype, result.dims)};
  Value square = p_norm_last(g, row_differences(g, ctx.tensor(0), ctx.tensor(0), {}, accumulate), ctx.real(1));
  Value picked = take_along(g, g.reshape(square, {n * n}), 0, constant_vector(g, upper_pairs(n).first, DType::kI64));
  return {g.convert(picked, result.dtype)};
}

// _pdist_backward(grad, self, p, pdist): each pair's gradient placed at (i, j) and (j, i) of a square
// matrix, then cdist's backward of self against itself.
std::vector<Value> lower_pdist_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  const int64_t n = ctx.type_of(1).dims[0];
  if (ctx.type_of(0).numel() == 0) return {g.constant(0, result.dtype, result.dims)};
  const auto [upper, lower] = upper_pairs(n);
  auto square = [&](Value pairs) {
    Value flat = g.constant(0, accumulate, {n * n});
    Value v = g.convert(pairs, accumulate);
    flat = scatter_along(g, flat, 0, constant_vector(g, upper, DType::kI64), v, ir::Reducer::kAdd);
    flat = scatter_along(g, flat, 0, constant_vector(g, lower, DType::kI64), v, ir::Reducer::kAdd);
    return g.reshape(flat, {n, n});
  };
  Value diff = row_differences(g, ctx.tensor(1), ctx.tensor(1), {}, accumulate);
  Value per_pair = p_norm_grad(g, diff, square(ctx.tensor(3)), square(ctx.tensor(0)), ctx.real(2));
  return {g.convert(sum_over(g, per_pair, {1}), result.dtype)};
}

}  // namespace

void add_nn_distance_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_cdist_backward", &lower_cdist_backward});
  table.push_back({"aten::_cdist_forward", &lower_cdist_forward});
  table.push_back({"aten::_pdist_backward", &lower_pdist_backward});
  table.push_back({"aten::_pdist_forward", &lower_pdist_forward});
}

}  // namespace torchtpu::lowering
