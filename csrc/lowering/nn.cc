// Losses and other neural-network ops.
#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

// at::Reduction: 0 none, 1 mean, 2 sum.
constexpr int64_t kReductionNone = 0;
constexpr int64_t kReductionMean = 1;

const Type& out(const LoweringContext& ctx) { return ctx.outputs.at(0); }

// mse_loss(self, target, reduction)
std::vector<Value> lower_mse_loss(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& in = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  const Type compute{accumulate, in.dims};
  Value diff = g.binary("subtract", cast_to(g, ctx.tensor(0), compute), cast_to(g, ctx.tensor(1), compute));
  Value squared = g.binary("multiply", diff, diff);
  const int64_t reduction = ctx.integer(2);
  if (reduction == kReductionNone) return {g.convert(squared, out(ctx).dtype)};
  Value total = g.reduce(squared, g.constant_int(0, accumulate), reduction_dims({}, in.rank()), ir::Reducer::kAdd);
  if (reduction == kReductionMean) total = g.binary("divide", total, g.constant(static_cast<double>(in.numel()), accumulate));
  return {g.convert(total, out(ctx).dtype)};
}

// mse_loss_backward(grad_output, self, target, reduction): 2 * (self - target) * grad [/ numel]
std::vector<Value> lower_mse_loss_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  const Type compute{accumulate, out(ctx).dims};
  Value diff = g.binary("subtract", cast_to(g, ctx.tensor(1), compute), cast_to(g, ctx.tensor(2), compute));
  double scale = 2.0;
  if (ctx.integer(3) == kReductionMean) scale /= static_cast<double>(out(ctx).numel());
  Value grad = cast_to(g, ctx.tensor(0), compute);
  Value result = g.binary("multiply", g.binary("multiply", diff, grad), g.constant(scale, accumulate, compute.dims));
  return {g.convert(result, out(ctx).dtype)};
}

}  // namespace

void add_nn_rules(std::vector<Rule>& table) {
  table.push_back({"aten::mse_loss", &lower_mse_loss});
  table.push_back({"aten::mse_loss_backward", &lower_mse_loss_backward});
}

}  // namespace torchtpu::lowering
