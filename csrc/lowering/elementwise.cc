// Elementwise arithmetic, comparisons, activations and their backward ops.
//
// Arithmetic computes in the output dtype's "opmath" type (float32 for 16-bit floats), as PyTorch does,
// and rounds once at the end. Comparisons compute in PyTorch's promoted type of the inputs.
#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;

const Type& out(const LoweringContext& ctx) { return ctx.outputs.at(0); }

DType opmath(const LoweringContext& ctx) { return accumulation_dtype(out(ctx).dtype); }

Value finish(LoweringContext& ctx, Value v) { return cast_to(ctx.graph, v, out(ctx)); }

Value operand(LoweringContext& ctx, size_t i) { return cast_to(ctx.graph, ctx.tensor(i), Type{opmath(ctx), out(ctx).dims}); }

Value scalar_like(LoweringContext& ctx, double value) {
  return ctx.graph.constant(value, opmath(ctx), out(ctx).dims);
}

std::vector<Value> binary_op(LoweringContext& ctx, const char* name) {
  return {finish(ctx, ctx.graph.binary(name, operand(ctx, 0), operand(ctx, 1)))};
}

std::vector<Value> unary_op(LoweringContext& ctx, const char* name) {
  return {finish(ctx, ctx.graph.unary(name, operand(ctx, 0)))};
}

// add/sub with alpha: self ± alpha * other.
std::vector<Value> add_or_sub(LoweringContext& ctx, const char* name) {
  Graph& g = ctx.graph;
  Value other = operand(ctx, 1);
  if (!ctx.is_none(2) && ctx.real(2) != 1.0) other = g.binary("multiply", other, scalar_like(ctx, ctx.real(2)));
  return {finish(ctx, g.binary(name, operand(ctx, 0), other))};
}

std::vector<Value> lower_add(LoweringContext& ctx) { return add_or_sub(ctx, "add"); }
std::vector<Value> lower_sub(LoweringContext& ctx) { return add_or_sub(ctx, "subtract"); }
std::vector<Value> lower_mul(LoweringContext& ctx) { return binary_op(ctx, "multiply"); }
std::vector<Value> lower_maximum(LoweringContext& ctx) { return binary_op(ctx, "maximum"); }
std::vector<Value> lower_minimum(LoweringContext& ctx) { return binary_op(ctx, "minimum"); }

std::vector<Value> lower_div(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value q = g.binary("divide", operand(ctx, 0), operand(ctx, 1));
  return {finish(ctx, q)};
}

// div.Tensor_mode: rounding_mode None / "trunc" / "floor".
std::vector<Value> lower_div_mode(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value a = operand(ctx, 0);
  Value b = operand(ctx, 1);
  Value q = g.binary("divide", a, b);
  if (ctx.is_none(2) || !is_floating(opmath(ctx))) return {finish(ctx, q)};
  if (ctx.text(2) == "trunc") {
    Value zero = scalar_like(ctx, 0);
    q = g.select(g.compare(q, zero, Comparison::kLT), g.unary("ceil", q), g.unary("floor", q));
  } else if (ctx.text(2) == "floor") {
    q = g.unary("floor", q);
  }
  return {finish(ctx, q)};
}

std::vector<Value> lower_pow_tensor_scalar(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value base = operand(ctx, 0);
  const double exponent = ctx.real(1);
  if (exponent == 2.0) return {finish(ctx, g.binary("multiply", base, base))};
  if (exponent == 1.0) return {finish(ctx, base)};
  return {finish(ctx, g.binary("power", base, scalar_like(ctx, exponent)))};
}

std::vector<Value> lower_pow_tensor_tensor(LoweringContext& ctx) { return binary_op(ctx, "power"); }

std::vector<Value> compare_op(LoweringContext& ctx, Comparison direction) {
  Graph& g = ctx.graph;
  const Type compute{ctx.common_dtype, out(ctx).dims};
  Value a = cast_to(g, ctx.tensor(0), compute);
  Value b = cast_to(g, ctx.tensor(1), compute);
  return {g.compare(a, b, direction)};
}

std::vector<Value> lower_eq(LoweringContext& ctx) { return compare_op(ctx, Comparison::kEQ); }
std::vector<Value> lower_ne(LoweringContext& ctx) { return compare_op(ctx, Comparison::kNE); }
std::vector<Value> lower_lt(LoweringContext& ctx) { return compare_op(ctx, Comparison::kLT); }
std::vector<Value> lower_le(LoweringContext& ctx) { return compare_op(ctx, Comparison::kLE); }
std::vector<Value> lower_gt(LoweringContext& ctx) { return compare_op(ctx, Comparison::kGT); }
std::vector<Value> lower_ge(LoweringContext& ctx) { return compare_op(ctx, Comparison::kGE); }

// Comparisons against a Scalar: the scalar is argument 1 as a number, not a tensor.
std::vector<Value> compare_scalar_op(LoweringContext& ctx, Comparison direction) {
  Graph& g = ctx.graph;
  const Type compute{ctx.common_dtype, out(ctx).dims};
  Value a = cast_to(g, ctx.tensor(0), compute);
  Value b = g.constant(ctx.real(1), compute.dtype, compute.dims);
  return {g.compare(a, b, direction)};
}

std::vector<Value> lower_eq_scalar(LoweringContext& ctx) { return compare_scalar_op(ctx, Comparison::kEQ); }
std::vector<Value> lower_ne_scalar(LoweringContext& ctx) { return compare_scalar_op(ctx, Comparison::kNE); }
std::vector<Value> lower_lt_scalar(LoweringContext& ctx) { return compare_scalar_op(ctx, Comparison::kLT); }
std::vector<Value> lower_le_scalar(LoweringContext& ctx) { return compare_scalar_op(ctx, Comparison::kLE); }
std::vector<Value> lower_gt_scalar(LoweringContext& ctx) { return compare_scalar_op(ctx, Comparison::kGT); }
std::vector<Value> lower_ge_scalar(LoweringContext& ctx) { return compare_scalar_op(ctx, Comparison::kGE); }

std::vector<Value> lower_where(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value condition = cast_to(g, ctx.tensor(0), Type{DType::kBool, out(ctx).dims});
  return {g.select(condition, cast_to(g, ctx.tensor(1), out(ctx)), cast_to(g, ctx.tensor(2), out(ctx)))};
}

std::vector<Value> lower_neg(LoweringContext& ctx) { return unary_op(ctx, "negate"); }
std::vector<Value> lower_abs(LoweringContext& ctx) { return unary_op(ctx, "abs"); }
std::vector<Value> lower_exp(LoweringContext& ctx) { return unary_op(ctx, "exponential"); }
std::vector<Value> lower_log(LoweringContext& ctx) { return unary_op(ctx, "log"); }
std::vector<Value> lower_sqrt(LoweringContext& ctx) { return unary_op(ctx, "sqrt"); }
std::vector<Value> lower_rsqrt(LoweringContext& ctx) { return unary_op(ctx, "rsqrt"); }
std::vector<Value> lower_tanh(LoweringContext& ctx) { return unary_op(ctx, "tanh"); }
std::vector<Value> lower_sigmoid(LoweringContext& ctx) { return unary_op(ctx, "logistic"); }
std::vector<Value> lower_sin(LoweringContext& ctx) { return unary_op(ctx, "sine"); }
std::vector<Value> lower_cos(LoweringContext& ctx) { return unary_op(ctx, "cosine"); }

std::vector<Value> lower_reciprocal(LoweringContext& ctx) {
  return {finish(ctx, ctx.graph.binary("divide", scalar_like(ctx, 1), operand(ctx, 0)))};
}

std::vector<Value> lower_relu(LoweringContext& ctx) {
  return {finish(ctx, ctx.graph.binary("maximum", operand(ctx, 0), scalar_like(ctx, 0)))};
}

std::vector<Value> lower_logical_not(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  Value zero = g.constant_int(0, g.type(x).dtype, g.type(x).dims);
  return {cast_to(g, g.compare(x, zero, Comparison::kEQ), out(ctx))};
}

// clamp(self, Scalar? min, Scalar? max)
std::vector<Value> lower_clamp(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  if (!ctx.is_none(1)) x = g.binary("maximum", x, scalar_like(ctx, ctx.real(1)));
  if (!ctx.is_none(2)) x = g.binary("minimum", x, scalar_like(ctx, ctx.real(2)));
  return {finish(ctx, x)};
}

std::vector<Value> lower_clamp_min(LoweringContext& ctx) {
  return {finish(ctx, ctx.graph.binary("maximum", operand(ctx, 0), scalar_like(ctx, ctx.real(1))))};
}

std::vector<Value> lower_clamp_max(LoweringContext& ctx) {
  return {finish(ctx, ctx.graph.binary("minimum", operand(ctx, 0), scalar_like(ctx, ctx.real(1))))};
}

// threshold_backward(grad_output, self, threshold): grad where self > threshold, else 0.
std::vector<Value> lower_threshold_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value grad = operand(ctx, 0);
  Value self = operand(ctx, 1);
  Value keep = g.compare(self, scalar_like(ctx, ctx.real(2)), Comparison::kGT);
  return {finish(ctx, g.select(keep, grad, scalar_like(ctx, 0)))};
}

// tanh_backward(grad_output, output): grad * (1 - output^2)
std::vector<Value> lower_tanh_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value y = operand(ctx, 1);
  Value one_minus = g.binary("subtract", scalar_like(ctx, 1), g.binary("multiply", y, y));
  return {finish(ctx, g.binary("multiply", operand(ctx, 0), one_minus))};
}

// sigmoid_backward(grad_output, output): grad * output * (1 - output)
std::vector<Value> lower_sigmoid_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value y = operand(ctx, 1);
  Value slope = g.binary("multiply", y, g.binary("subtract", scalar_like(ctx, 1), y));
  return {finish(ctx, g.binary("multiply", operand(ctx, 0), slope))};
}

std::vector<Value> lower_fill_scalar(LoweringContext& ctx) {
  return {ctx.graph.constant(ctx.real(1), out(ctx).dtype, out(ctx).dims)};
}

std::vector<Value> lower_fill_tensor(LoweringContext& ctx) { return {cast_to(ctx.graph, ctx.tensor(1), out(ctx))}; }

std::vector<Value> lower_zero(LoweringContext& ctx) {
  return {ctx.graph.constant_int(0, out(ctx).dtype, out(ctx).dims)};
}

// copy(self, src, non_blocking): src converted and broadcast to self.
std::vector<Value> lower_copy(LoweringContext& ctx) { return {cast_to(ctx.graph, ctx.tensor(1), out(ctx))}; }

std::vector<Value> lower_clone(LoweringContext& ctx) { return {cast_to(ctx.graph, ctx.tensor(0), out(ctx))}; }

}  // namespace

void add_elementwise_rules(std::vector<Rule>& table) {
  table.push_back({"aten::abs", &lower_abs});
  table.push_back({"aten::add.Tensor", &lower_add});
  table.push_back({"aten::clamp", &lower_clamp});
  table.push_back({"aten::clamp_max", &lower_clamp_max});
  table.push_back({"aten::clamp_min", &lower_clamp_min});
  table.push_back({"aten::clone", &lower_clone});
  table.push_back({"aten::copy", &lower_copy, false, true});
  table.push_back({"aten::cos", &lower_cos});
  table.push_back({"aten::div.Tensor", &lower_div});
  table.push_back({"aten::div.Tensor_mode", &lower_div_mode});
  table.push_back({"aten::eq.Scalar", &lower_eq_scalar});
  table.push_back({"aten::eq.Tensor", &lower_eq});
  table.push_back({"aten::exp", &lower_exp});
  table.push_back({"aten::fill.Scalar", &lower_fill_scalar, false, true});
  table.push_back({"aten::fill.Tensor", &lower_fill_tensor, false, true});
  table.push_back({"aten::ge.Scalar", &lower_ge_scalar});
  table.push_back({"aten::ge.Tensor", &lower_ge});
  table.push_back({"aten::gt.Scalar", &lower_gt_scalar});
  table.push_back({"aten::gt.Tensor", &lower_gt});
  table.push_back({"aten::le.Scalar", &lower_le_scalar});
  table.push_back({"aten::le.Tensor", &lower_le});
  table.push_back({"aten::log", &lower_log});
  table.push_back({"aten::logical_not", &lower_logical_not});
  table.push_back({"aten::lt.Scalar", &lower_lt_scalar});
  table.push_back({"aten::lt.Tensor", &lower_lt});
  table.push_back({"aten::maximum", &lower_maximum});
  table.push_back({"aten::minimum", &lower_minimum});
  table.push_back({"aten::mul.Tensor", &lower_mul});
  table.push_back({"aten::ne.Scalar", &lower_ne_scalar});
  table.push_back({"aten::ne.Tensor", &lower_ne});
  table.push_back({"aten::neg", &lower_neg});
  table.push_back({"aten::pow.Tensor_Scalar", &lower_pow_tensor_scalar});
  table.push_back({"aten::pow.Tensor_Tensor", &lower_pow_tensor_tensor});
  table.push_back({"aten::reciprocal", &lower_reciprocal});
  table.push_back({"aten::relu", &lower_relu});
  table.push_back({"aten::rsqrt", &lower_rsqrt});
  table.push_back({"aten::sigmoid", &lower_sigmoid});
  table.push_back({"aten::sigmoid_backward", &lower_sigmoid_backward});
  table.push_back({"aten::sin", &lower_sin});
  table.push_back({"aten::sqrt", &lower_sqrt});
  table.push_back({"aten::sub.Tensor", &lower_sub});
  table.push_back({"aten::tanh", &lower_tanh});
  table.push_back({"aten::tanh_backward", &lower_tanh_backward});
  table.push_back({"aten::threshold_backward", &lower_threshold_backward});
  table.push_back({"aten::where.self", &lower_where});
  table.push_back({"aten::zero", &lower_zero, false, true});
}

}  // namespace torchtpu::lowering
