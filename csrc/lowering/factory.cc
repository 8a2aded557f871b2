// Factories that compute their values on device.
#include <algorithm>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

// arange.start_out(start, end, step, out): start + i * step, computed in float64 (or int64) and rounded.
std::vector<Value> lower_arange(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = ctx.outputs.at(0);
  const DType compute = is_floating(t.dtype) ? DType::kF64 : DType::kI64;
  Value index = g.iota(Type{compute, t.dims}, 0);
  Value start = g.constant(ctx.real(0), compute, t.dims);
  Value step = g.constant(ctx.real(2), compute, t.dims);
  if (compute == DType::kI64) {
    start = g.constant_int(ctx.integer(0), compute, t.dims);
    step = g.constant_int(ctx.integer(2), compute, t.dims);
  }
  return {g.convert(g.binary("add", start, g.binary("multiply", index, step)), t.dtype)};
}

// linspace.out(start, end, steps, out): the symmetric ramp, rounded once.
std::vector<Value> lower_linspace(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = ctx.outputs.at(0);
  Value ramp = symmetric_ramp(g, t.dims, g.constant(ctx.real(0), DType::kF64), g.constant(ctx.real(1), DType::kF64),
                              ctx.integer(2));
  return {g.convert(ramp, t.dtype)};
}

// logspace.out(start, end, steps, base, out): base ** ramp in float64, rounded once. Like PyTorch, the ends
// are first rounded to the output dtype (truncated for integers) unless there is a single step.
std::vector<Value> lower_logspace(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = ctx.outputs.at(0);
  const int64_t steps = ctx.integer(2);
  auto end_point = [&](size_t i) {
    Value exact = g.constant(ctx.real(i), DType::kF64);
    if (steps == 1) return exact;
    if (!is_floating(t.dtype)) return g.constant(static_cast<double>(ctx.integer(i)), DType::kF64);
    return g.convert(g.convert(exact, t.dtype), DType::kF64);
  };
  Value ramp = symmetric_ramp(g, t.dims, end_point(0), end_point(1), steps);
  Value power = g.binary("power", g.constant(ctx.real(3), DType::kF64, t.dims), ramp);
  return {g.convert(power, t.dtype)};
}

// _efficientzerotensor(size, dtype, ...): autograd's zero gradient. CPU marks it with the ZeroTensor key to
// skip work; on tpu it is an ordinary tensor of zeros.
std::vector<Value> lower_efficient_zero_tensor(LoweringContext& ctx) {
  const Type& t = ctx.outputs.at(0);
  return {ctx.graph.constant(0.0, t.dtype, t.dims)};
}

}  // namespace

void add_factory_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_efficientzerotensor", &lower_efficient_zero_tensor});
  table.push_back({"aten::arange.start_out", &lower_arange, false, false, /*scalars_shape_output=*/true});
  table.push_back({"aten::linspace.out", &lower_linspace});
  table.push_back({"aten::logspace.out", &lower_logspace});
}

}  // namespace torchtpu::lowering
