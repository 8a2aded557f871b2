// Matrix products: mm, addmm, bmm, addmv, dot. dot_general with HIGHEST precision and accumulation in float32 for
// 16-bit inputs, rounded once to the output dtype.
#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx) { return ctx.outputs.at(0); }

Value matmul_2d(LoweringContext& ctx, Value a, Value b) {
  Graph& g = ctx.graph;
  const DType dtype = out(ctx).dtype;
  a = g.convert(a, dtype);
  b = g.convert(b, dtype);
  return g.dot_general(a, b, {}, {}, {1}, {0}, accumulation_dtype(dtype));
}

std::vector<Value> lower_mm(LoweringContext& ctx) {
  Value product = matmul_2d(ctx, ctx.tensor(0), ctx.tensor(1));
  return {ctx.graph.convert(product, out(ctx).dtype)};
}

// addmm(self, mat1, mat2, beta, alpha): beta * self + alpha * (mat1 @ mat2)
std::vector<Value> lower_addmm(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  Value product = matmul_2d(ctx, ctx.tensor(1), ctx.tensor(2));
  const double beta = ctx.real(3);
  const double alpha = ctx.real(4);
  if (alpha != 1.0) product = g.binary("multiply", product, g.constant(alpha, accumulate, out(ctx).dims));
  if (beta != 0.0) {
    Value bias = cast_to(g, ctx.tensor(0), Type{accumulate, out(ctx).dims});
    if (beta != 1.0) bias = g.binary("multiply", bias, g.constant(beta, accumulate, out(ctx).dims));
    product = g.binary("add", product, bias);
  }
  return {g.convert(product, out(ctx).dtype)};
}

std::vector<Value> lower_bmm(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType dtype = out(ctx).dtype;
  Value a = g.convert(ctx.tensor(0), dtype);
  Value b = g.convert(ctx.tensor(1), dtype);
  Value product = g.dot_general(a, b, {0}, {0}, {2}, {1}, accumulation_dtype(dtype));
  return {g.convert(product, dtype)};
}

// dot(self, tensor): a 1-d contraction.
std::vector<Value> lower_dot(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType dtype = out(ctx).dtype;
  Value product = g.dot_general(g.convert(ctx.tensor(0), dtype), g.convert(ctx.tensor(1), dtype), {}, {}, {0}, {0},
                                accumulation_dtype(dtype));
  return {g.convert(product, dtype)};
}

// addmv(self, mat, vec, beta, alpha): beta * self + alpha * (mat @ vec)
std::vector<Value> lower_addmv(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType dtype = out(ctx).dtype;
  const DType accumulate = accumulation_dtype(dtype);
  Value product = g.dot_general(g.convert(ctx.tensor(1), dtype), g.convert(ctx.tensor(2), dtype), {}, {}, {1}, {0},
                                accumulate);
  const double beta = ctx.real(3);
  const double alpha = ctx.real(4);
  if (alpha != 1.0) product = g.binary("multiply", product, g.constant(alpha, accumulate, out(ctx).dims));
  if (beta != 0.0) {  // beta == 0 ignores self, NaNs included, as PyTorch does
    Value bias = cast_to(g, ctx.tensor(0), Type{accumulate, out(ctx).dims});
    if (beta != 1.0) bias = g.binary("multiply", bias, g.constant(beta, accumulate, out(ctx).dims));
    product = g.binary("add", product, bias);
  }
  return {g.convert(product, dtype)};
}

}  // namespace

void add_linalg_rules(std::vector<Rule>& table) {
  table.push_back({"aten::addmm", &lower_addmm});
  table.push_back({"aten::addmv", &lower_addmv});
  table.push_back({"aten::bmm", &lower_bmm});
  table.push_back({"aten::dot", &lower_dot});
  table.push_back({"aten::mm", &lower_mm});
}

}  // namespace torchtpu::lowering
