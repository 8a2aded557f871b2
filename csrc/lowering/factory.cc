// Factories that compute their values on device.
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

}  // namespace

void add_factory_rules(std::vector<Rule>& table) {
  table.push_back({"aten::arange.start_out", &lower_arange});
}

}  // namespace torchtpu::lowering
