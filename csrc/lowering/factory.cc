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

// linspace.out(start, end, steps, out): PyTorch's symmetric formula (the first half counts up from start,
// the second half down from end), computed in float64 and rounded once.
std::vector<Value> lower_linspace(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = ctx.outputs.at(0);
  const int64_t steps = ctx.integer(2);
  const double start = ctx.real(0);
  const double end = ctx.real(1);
  const double step = steps > 1 ? (end - start) / static_cast<double>(steps - 1) : 0.0;
  Value index = g.iota(Type{DType::kF64, t.dims}, 0);
  auto constant = [&](double v) { return g.constant(v, DType::kF64, t.dims); };
  Value up = g.binary("add", constant(start), g.binary("multiply", index, constant(step)));
  Value down = g.binary("subtract", constant(end),
                        g.binary("multiply", g.binary("subtract", constant(static_cast<double>(steps - 1)), index), constant(step)));
  // A single step is just `start`, as PyTorch special-cases it.
  const int64_t halfway = std::max<int64_t>(steps / 2, 1);
  Value first_half = g.compare(index, constant(static_cast<double>(halfway)), ir::Comparison::kLT);
  return {g.convert(g.select(first_half, up, down), t.dtype)};
}

}  // namespace

void add_factory_rules(std::vector<Rule>& table) {
  table.push_back({"aten::arange.start_out", &lower_arange});
  table.push_back({"aten::linspace.out", &lower_linspace});
}

}  // namespace torchtpu::lowering
