// Reductions over dims: sum, mean, max/min (values and indices), amax/amin, argmax/argmin.
//
// 16-bit floats accumulate in float32, as PyTorch does; results are reshaped to the inferred output
// shape, which carries keepdim.
#include <limits>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;
using ir::Reducer;

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

std::vector<int64_t> dims_arg(const LoweringContext& ctx, size_t i) {
  const int64_t rank = ctx.type_of(0).rank();
  if (ctx.is_none(i)) return reduction_dims({}, rank);
  if (ctx.args[i].kind == Arg::Kind::kInt) return reduction_dims({ctx.integer(i)}, rank);
  return reduction_dims(ctx.ints(i), rank);
}

int64_t count(const Type& t, const std::vector<int64_t>& dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= t.dims[static_cast<size_t>(d)];
  return n;
}

Value sum_in(LoweringContext& ctx, const std::vector<int64_t>& dims, DType accumulate) {
  Graph& g = ctx.graph;
  Value x = g.convert(ctx.tensor(0), accumulate);
  return g.reduce(x, g.constant_int(0, accumulate), dims, Reducer::kAdd);
}

// Lowest (for max) or highest (for min) value of the type: the reduction's identity.
Value extreme(Graph& g, DType dtype, bool lowest) {
  if (is_floating(dtype)) {
    const double inf = std::numeric_limits<double>::infinity();
    return g.constant(lowest ? -inf : inf, dtype);
  }
  if (dtype == DType::kBool) return g.constant_int(lowest ? 0 : 1, dtype);
  int64_t value = 0;
  switch (dtype) {
    case DType::kI8: value = lowest ? -128 : 127; break;
    case DType::kI16: value = lowest ? -32768 : 32767; break;
    case DType::kI32: value = lowest ? std::numeric_limits<int32_t>::min() : std::numeric_limits<int32_t>::max(); break;
    case DType::kI64: value = lowest ? std::numeric_limits<int64_t>::min() : std::numeric_limits<int64_t>::max(); break;
    case DType::kU8: value = lowest ? 0 : 255; break;
    default: value = lowest ? 0 : -1; break;  // unsigned 32/64: all ones
  }
  return g.constant_int(value, dtype);
}

Value extremum(LoweringContext& ctx, const std::vector<int64_t>& dims, bool is_max) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const DType dtype = g.type(x).dtype;
  return g.reduce(x, extreme(g, dtype, is_max), dims, is_max ? Reducer::kMax : Reducer::kMin);
}

// Index of the first extremum along `dim` (NaN counts as the extremum, as in PyTorch).
Value arg_extremum(LoweringContext& ctx, int64_t dim, bool is_max) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type& t = g.type(x);
  Value best = extremum(ctx, {dim}, is_max);
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < t.rank(); ++i) {
    if (i != dim) kept.push_back(i);
  }
  Value best_full = g.broadcast_in_dim(best, t.dims, kept);
  Value hit = g.compare(x, best_full, Comparison::kEQ);
  if (is_floating(t.dtype)) hit = g.binary("or", hit, g.compare(x, x, Comparison::kNE));
  Value positions = g.iota(Type{DType::kI64, t.dims}, dim);
  Value sentinel = g.constant_int(std::numeric_limits<int64_t>::max(), DType::kI64, t.dims);
  Value candidates = g.select(hit, positions, sentinel);
  return g.reduce(candidates, g.constant_int(std::numeric_limits<int64_t>::max(), DType::kI64), {dim}, Reducer::kMin);
}

// sum.dim_IntList(self, dim?, keepdim, dtype?) and sum(self, dtype?)
std::vector<Value> lower_sum_dims(LoweringContext& ctx) {
  Value s = sum_in(ctx, dims_arg(ctx, 1), accumulation_dtype(out(ctx).dtype));
  return {ctx.graph.reshape(ctx.graph.convert(s, out(ctx).dtype), out(ctx).dims)};
}

std::vector<Value> lower_sum(LoweringContext& ctx) {
  Value s = sum_in(ctx, reduction_dims({}, ctx.type_of(0).rank()), accumulation_dtype(out(ctx).dtype));
  return {ctx.graph.reshape(ctx.graph.convert(s, out(ctx).dtype), out(ctx).dims)};
}

Value mean_over(LoweringContext& ctx, const std::vector<int64_t>& dims) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value s = sum_in(ctx, dims, accumulate);
  Value n = g.constant(static_cast<double>(count(ctx.type_of(0), dims)), accumulate, g.type(s).dims);
  return g.reshape(g.convert(g.binary("divide", s, n), out(ctx).dtype), out(ctx).dims);
}

// mean.dim(self, dim?, keepdim, dtype?) and mean(self, dtype?)
std::vector<Value> lower_mean_dims(LoweringContext& ctx) { return {mean_over(ctx, dims_arg(ctx, 1))}; }
std::vector<Value> lower_mean(LoweringContext& ctx) {
  return {mean_over(ctx, reduction_dims({}, ctx.type_of(0).rank()))};
}

std::vector<Value> full_extremum(LoweringContext& ctx, bool is_max) {
  Value v = extremum(ctx, reduction_dims({}, ctx.type_of(0).rank()), is_max);
  return {ctx.graph.reshape(v, out(ctx).dims)};
}
std::vector<Value> lower_max(LoweringContext& ctx) { return full_extremum(ctx, true); }
std::vector<Value> lower_min(LoweringContext& ctx) { return full_extremum(ctx, false); }

// amax(self, dim[], keepdim)
std::vector<Value> lower_amax(LoweringContext& ctx) {
  return {ctx.graph.reshape(extremum(ctx, dims_arg(ctx, 1), true), out(ctx).dims)};
}
std::vector<Value> lower_amin(LoweringContext& ctx) {
  return {ctx.graph.reshape(extremum(ctx, dims_arg(ctx, 1), false), out(ctx).dims)};
}

// max.dim(self, dim, keepdim) -> (values, indices)
std::vector<Value> dim_extremum(LoweringContext& ctx, bool is_max) {
  Graph& g = ctx.graph;
  const std::vector<int64_t> dims = dims_arg(ctx, 1);
  if (dims.empty()) {  // 0-d input: the value itself, index 0
    return {g.reshape(ctx.tensor(0), out(ctx, 0).dims), g.constant_int(0, DType::kI64, out(ctx, 1).dims)};
  }
  Value indices = arg_extremum(ctx, dims[0], is_max);
  // Values via the index keeps NaN semantics identical to the index choice.
  Value values = extremum(ctx, dims, is_max);
  if (is_floating(ctx.type_of(0).dtype)) {
    // A NaN anywhere in the row makes the row's value NaN.
    Value x = ctx.tensor(0);
    Value has_nan = g.reduce(g.compare(x, x, Comparison::kNE), g.constant_int(0, DType::kBool), dims, Reducer::kOr);
    Value nan = g.constant(std::numeric_limits<double>::quiet_NaN(), g.type(values).dtype, g.type(values).dims);
    values = g.select(has_nan, nan, values);
  }
  return {g.reshape(values, out(ctx, 0).dims), g.reshape(indices, out(ctx, 1).dims)};
}
std::vector<Value> lower_max_dim(LoweringContext& ctx) { return dim_extremum(ctx, true); }
std::vector<Value> lower_min_dim(LoweringContext& ctx) { return dim_extremum(ctx, false); }

// argmax(self, dim?, keepdim): with dim None, over the flattened input.
std::vector<Value> arg_op(LoweringContext& ctx, bool is_max) {
  Graph& g = ctx.graph;
  const Type& t = ctx.type_of(0);
  if (t.rank() == 0) return {g.constant_int(0, DType::kI64, out(ctx).dims)};
  if (ctx.is_none(1)) {
    LoweringContext flat{g, ctx.args, ctx.outputs, ctx.common_dtype, ctx.rng_state};
    flat.args[0].tensor = g.reshape(ctx.tensor(0), {t.numel()});
    return {g.reshape(arg_extremum(flat, 0, is_max), out(ctx).dims)};
  }
  return {g.reshape(arg_extremum(ctx, dims_arg(ctx, 1)[0], is_max), out(ctx).dims)};
}
std::vector<Value> lower_argmax(LoweringContext& ctx) { return arg_op(ctx, true); }
std::vector<Value> lower_argmin(LoweringContext& ctx) { return arg_op(ctx, false); }

}  // namespace

void add_reduction_rules(std::vector<Rule>& table) {
  table.push_back({"aten::amax", &lower_amax});
  table.push_back({"aten::amin", &lower_amin});
  table.push_back({"aten::argmax", &lower_argmax});
  table.push_back({"aten::argmin", &lower_argmin});
  table.push_back({"aten::max", &lower_max});
  table.push_back({"aten::max.dim", &lower_max_dim});
  table.push_back({"aten::mean", &lower_mean});
  table.push_back({"aten::mean.dim", &lower_mean_dims});
  table.push_back({"aten::min", &lower_min});
  table.push_back({"aten::min.dim", &lower_min_dim});
  table.push_back({"aten::sum", &lower_sum});
  table.push_back({"aten::sum.dim_IntList", &lower_sum_dims});
}

}  // namespace torchtpu::lowering
