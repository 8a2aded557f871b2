// Softmax, log-softmax and the activation functions of torch.nn (gelu, silu, hardtanh, leaky_relu, elu,
// hardswish, hardsigmoid, mish, threshold, hard/softshrink, glu, prelu, rrelu), with their
// backward ops.
//
// Everything computes in the output's "opmath" type (float32 for 16-bit floats) and rounds once, as
// PyTorch's CPU kernels do; softmax reductions therefore accumulate in float32 for bf16/f16.
#include <algorithm>
#include <cmath>
#include <limits>

#include "lowering/nn.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;
using ir::Reducer;

const Type& out(const LoweringContext& ctx) { return ctx.outputs.at(0); }

DType opmath(const LoweringContext& ctx) { return accumulation_dtype(out(ctx).dtype); }

// Argument i converted to the opmath type and broadcast to the output shape.
Value operand(LoweringContext& ctx, size_t i) {
  return cast_to(ctx.graph, ctx.tensor(i), Type{opmath(ctx), out(ctx).dims});
}

Value scalar_like(LoweringContext& ctx, double value) { return ctx.graph.constant(value, opmath(ctx), out(ctx).dims); }
// Scalar argument i in the opmath type, broadcast to the output; a runtime operand (see elementwise.cc).
Value scalar_arg(LoweringContext& ctx, size_t i) { return ctx.scalar(i, opmath(ctx), out(ctx).dims); }

Value finish(LoweringContext& ctx, Value v) { return ctx.graph.convert(v, out(ctx).dtype); }

// ---- softmax ----------------------------------------------------------------------------------------

// The softmax dim, wrapped; a 0-d input is treated as shape [1] (PyTorch allows dim 0 / -1 there).
int64_t softmax_dim(const LoweringContext& ctx, size_t dim_arg) {
  const int64_t rank = std::max<int64_t>(out(ctx).rank(), 1);
  const int64_t dim = ctx.integer(dim_arg);
  return dim < 0 ? dim + rank : dim;
}

// Argument i in opmath, reshaped to at least 1-d so a 0-d input has a dim to reduce over.
Value softmax_operand(LoweringContext& ctx, size_t i) {
  Graph& g = ctx.graph;
  Value x = g.convert(ctx.tensor(i), opmath(ctx));
  return g.type(x).rank() == 0 ? g.reshape(x, {1}) : x;
}

Value softmax_result(LoweringContext& ctx, Value v) { return ctx.graph.reshape(finish(ctx, v), out(ctx).dims); }

// x - max(x): exp of it cannot overflow, the standard numerically stable form.
Value shifted(Graph& g, Value x, int64_t dim) {
  const double inf = std::numeric_limits<double>::infinity();
  const Type t = g.type(x);
  Value m = g.broadcast_in_dim(g.reduce(x, g.constant(-inf, t.dtype), {dim}, Reducer::kMax), t.dims,
                               kept_dims(t.rank(), {dim}));
  return g.binary("subtract", x, m);
}

// _softmax(self, dim, half_to_float); the output dtype (float32 when half_to_float) comes from the meta kernel.
std::vector<Value> lower_softmax(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const int64_t dim = softmax_dim(ctx, 1);
  Value e = g.unary("exponential", shifted(g, softmax_operand(ctx, 0), dim));
  return {softmax_result(ctx, g.binary("divide", e, reduce_keep(g, e, {dim}, Reducer::kAdd)))};
}

// _log_softmax(self, dim, half_to_float): (x - max) - log(sum(exp(x - max))).
std::vector<Value> lower_log_softmax(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const int64_t dim = softmax_dim(ctx, 1);
  Value s = shifted(g, softmax_operand(ctx, 0), dim);
  Value log_sum = g.unary("log", reduce_keep(g, g.unary("exponential", s), {dim}, Reducer::kAdd));
  return {softmax_result(ctx, g.binary("subtract", s, log_sum))};
}

// _softmax_backward_data(grad_output, output, dim, input_dtype): y * (grad - sum(grad * y)).
std::vector<Value> lower_softmax_backward_data(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const int64_t dim = softmax_dim(ctx, 2);
  Value grad = softmax_operand(ctx, 0);
  Value y = softmax_operand(ctx, 1);
  Value dot = reduce_keep(g, g.binary("multiply", grad, y), {dim}, Reducer::kAdd);
  return {softmax_result(ctx, g.binary("multiply", y, g.binary("subtract", grad, dot)))};
}

// _log_softmax_backward_data(grad_output, output, dim, input_dtype): grad - exp(y) * sum(grad).
std::vector<Value> lower_log_softmax_backward_data(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const int64_t dim = softmax_dim(ctx, 2);
  Value grad = softmax_operand(ctx, 0);
  Value y = softmax_operand(ctx, 1);
  Value total = reduce_keep(g, grad, {dim}, Reducer::kAdd);
  return {softmax_result(ctx, g.binary("subtract", grad, g.binary("multiply", g.unary("exponential", y), total)))};
}

// ---- gelu -------------------------------------------------------------------------------------------

constexpr double kSqrt1_2 = 0.70710678118654752440;    // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;  // 1/sqrt(2*pi)
constexpr double kTanhBeta = 0.79788456080286535588;    // sqrt(2/pi)
constexpr double kTanhKappa = 0.044715;

bool tanh_approximation(const LoweringContext& ctx, size_t i) { return !ctx.is_none(i) && ctx.text(i) == "tanh"; }

// tanh(sqrt(2/pi) * (x + 0.044715 x^3)), the inner term of the tanh approximation.
Value gelu_tanh_inner(LoweringContext& ctx, Value x) {
  Graph& g = ctx.graph;
  Value cube = g.binary("multiply", g.binary("multiply", x, x), x);
  Value inner = g.binary("add", x, g.binary("multiply", scalar_like(ctx, kTanhKappa), cube));
  return g.unary("tanh", g.binary("multiply", scalar_like(ctx, kTanhBeta), inner));
}

// Phi(x) = 0.5 * (1 + erf(x / sqrt(2))).
Value normal_cdf(LoweringContext& ctx, Value x) {
  Graph& g = ctx.graph;
  Value e = erf(g, g.binary("multiply", x, scalar_like(ctx, kSqrt1_2)));
  return g.binary("multiply", scalar_like(ctx, 0.5), g.binary("add", scalar_like(ctx, 1), e));
}

// gelu(self, *, approximate): x * Phi(x), or 0.5 x (1 + tanh(...)).
std::vector<Value> lower_gelu(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  if (tanh_approximation(ctx, 1)) {
    Value half_x = g.binary("multiply", scalar_like(ctx, 0.5), x);
    return {finish(ctx, g.binary("multiply", half_x, g.binary("add", scalar_like(ctx, 1), gelu_tanh_inner(ctx, x))))};
  }
  return {finish(ctx, g.binary("multiply", x, normal_cdf(ctx, x)))};
}

// gelu_backward(grad_output, self, *, approximate), the derivative PyTorch's kernels use.
std::vector<Value> lower_gelu_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value grad = operand(ctx, 0);
  Value x = operand(ctx, 1);
  Value slope;
  if (tanh_approximation(ctx, 2)) {
    // d/dx [0.5 x (1 + t)] = 0.5 (1 + t) + 0.5 x (1 - t^2) * beta (1 + 3 kappa x^2)
    Value t = gelu_tanh_inner(ctx, x);
    Value left = g.binary("multiply", scalar_like(ctx, 0.5), g.binary("add", scalar_like(ctx, 1), t));
    Value sech2 = g.binary("subtract", scalar_like(ctx, 1), g.binary("multiply", t, t));
    Value inner_slope = g.binary("multiply", scalar_like(ctx, kTanhBeta),
                                 g.binary("add", scalar_like(ctx, 1),
                                          g.binary("multiply", scalar_like(ctx, 3 * kTanhKappa), g.binary("multiply", x, x))));
    Value right = g.binary("multiply", g.binary("multiply", scalar_like(ctx, 0.5), x), g.binary("multiply", sech2, inner_slope));
    slope = g.binary("add", left, right);
  } else {
    // Phi(x) + x * phi(x), phi(x) = exp(-x^2 / 2) / sqrt(2 pi)
    Value pdf = g.binary("multiply", scalar_like(ctx, kInvSqrt2Pi),
                         g.unary("exponential", g.binary("multiply", scalar_like(ctx, -0.5), g.binary("multiply", x, x))));
    slope = g.binary("add", normal_cdf(ctx, x), g.binary("multiply", x, pdf));
  }
  return {finish(ctx, g.binary("multiply", grad, slope))};
}

// ---- silu, hardtanh, leaky_relu, elu ----------------------------------------------------------------

std::vector<Value> lower_silu(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  return {finish(ctx, g.binary("multiply", x, g.unary("logistic", x)))};
}

// silu_backward(grad_output, self): grad * s * (1 + x (1 - s)), s = sigmoid(x).
std::vector<Value> lower_silu_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 1);
  Value s = g.unary("logistic", x);
  Value slope = g.binary("multiply", s,
                         g.binary("add", scalar_like(ctx, 1), g.binary("multiply", x, g.binary("subtract", scalar_like(ctx, 1), s))));
  return {finish(ctx, g.binary("multiply", operand(ctx, 0), slope))};
}

// log_sigmoid_forward(self) -> (output, buffer): min(x, 0) - log1p(exp(-|x|)), stable for large |x|. The
// buffer is CPU's scratch for its backward; ours recomputes from self, so it is left as zeros.
std::vector<Value> lower_log_sigmoid_forward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  Value tail = g.unary("log_plus_one", g.unary("exponential", g.unary("negate", g.unary("abs", x))));
  Value y = g.binary("subtract", g.binary("minimum", x, scalar_like(ctx, 0)), tail);
  const Type buffer = ctx.outputs.at(1);
  return {finish(ctx, y), g.constant(0.0, buffer.dtype, buffer.dims)};
}

// log_sigmoid_backward(grad_output, self, buffer): grad * sigmoid(-x)
std::vector<Value> lower_log_sigmoid_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value slope = g.unary("logistic", g.unary("negate", operand(ctx, 1)));
  return {finish(ctx, g.binary("multiply", operand(ctx, 0), slope))};
}

// hardtanh(self, min_val, max_val): clamp; minimum/maximum propagate NaN as torch.clamp does.
std::vector<Value> lower_hardtanh(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = g.binary("maximum", operand(ctx, 0), scalar_arg(ctx, 1));
  return {finish(ctx, g.binary("minimum", x, scalar_arg(ctx, 2)))};
}

// hardtanh_backward(grad_output, self, min_val, max_val): grad strictly inside (min, max), else 0.
std::vector<Value> lower_hardtanh_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 1);
  Value inside = g.binary("and", g.compare(x, scalar_arg(ctx, 2), Comparison::kGT),
                          g.compare(x, scalar_arg(ctx, 3), Comparison::kLT));
  return {finish(ctx, g.select(inside, operand(ctx, 0), scalar_like(ctx, 0)))};
}

// leaky_relu(self, negative_slope)
std::vector<Value> lower_leaky_relu(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  Value positive = g.compare(x, scalar_like(ctx, 0), Comparison::kGT);
  return {finish(ctx, g.select(positive, x, g.binary("multiply", x, scalar_arg(ctx, 1))))};
}

// leaky_relu_backward(grad_output, self, negative_slope, self_is_result): self and result share signs.
std::vector<Value> lower_leaky_relu_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value grad = operand(ctx, 0);
  Value positive = g.compare(operand(ctx, 1), scalar_like(ctx, 0), Comparison::kGT);
  return {finish(ctx, g.select(positive, grad, g.binary("multiply", grad, scalar_arg(ctx, 2))))};
}

// elu(self, alpha, scale, input_scale): x > 0 ? scale x : alpha scale (exp(input_scale x) - 1).
std::vector<Value> lower_elu(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  const double alpha = ctx.real(1), scale = ctx.real(2), input_scale = ctx.real(3);
  Value negative = g.binary("multiply", scalar_like(ctx, alpha * scale),
                            g.unary("exponential_minus_one", g.binary("multiply", x, scalar_like(ctx, input_scale))));
  Value positive = g.binary("multiply", x, scalar_like(ctx, scale));
  return {finish(ctx, g.select(g.compare(x, scalar_like(ctx, 0), Comparison::kGT), positive, negative))};
}

// elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result), as PyTorch's kernel.
std::vector<Value> lower_elu_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value grad = operand(ctx, 0);
  const double alpha = ctx.real(1), scale = ctx.real(2), input_scale = ctx.real(3);
  Value v = operand(ctx, 5);
  Value negative_slope;
  if (ctx.boolean(4)) {
    // From the result y = alpha scale (exp(s x) - 1): dy/dx = s (y + alpha scale).
    negative_slope = g.binary("multiply", scalar_like(ctx, input_scale), g.binary("add", v, scalar_like(ctx, alpha * scale)));
  } else {
    negative_slope = g.binary("multiply", scalar_like(ctx, input_scale * alpha * scale),
                              g.unary("exponential", g.binary("multiply", v, scalar_like(ctx, input_scale))));
  }
  Value non_positive = g.compare(v, scalar_like(ctx, 0), Comparison::kLE);
  Value slope = g.select(non_positive, negative_slope, scalar_like(ctx, scale));
  return {finish(ctx, g.binary("multiply", grad, slope))};
}


// ---- hardswish, hardsigmoid, mish -------------------------------------------------------------------

// relu6(x + 3) / 6, the gate of hardswish and hardsigmoid itself.
Value hard_gate(LoweringContext& ctx, Value x) {
  Graph& g = ctx.graph;
  Value shifted_x = g.binary("add", x, scalar_like(ctx, 3));
  Value clamped = g.binary("minimum", g.binary("maximum", shifted_x, scalar_like(ctx, 0)), scalar_like(ctx, 6));
  return g.binary("divide", clamped, scalar_like(ctx, 6));
}

std::vector<Value> lower_hardswish(LoweringContext& ctx) {
  require_floating(ctx, 0, "hardswish");
  Value x = operand(ctx, 0);
  return {finish(ctx, ctx.graph.binary("multiply", x, hard_gate(ctx, x)))};
}

// hardswish_backward(grad_output, self): 0 up to -3, x / 3 + 1/2 strictly inside (-3, 3), 1 from 3 on
// (CPU's and CUDA's kernels give the boundaries the outer slopes).
std::vector<Value> lower_hardswish_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value grad = operand(ctx, 0);
  Value x = operand(ctx, 1);
  Value middle = g.binary("multiply", grad, g.binary("add", g.binary("divide", x, scalar_like(ctx, 3)), scalar_like(ctx, 0.5)));
  Value upper = g.select(g.compare(x, scalar_like(ctx, 3), Comparison::kLT), middle, grad);
  return {finish(ctx, g.select(g.compare(x, scalar_like(ctx, -3), Comparison::kLE), scalar_like(ctx, 0), upper))};
}

std::vector<Value> lower_hardsigmoid(LoweringContext& ctx) {
  require_floating(ctx, 0, "hardsigmoid");
  return {finish(ctx, hard_gate(ctx, operand(ctx, 0)))};
}

// hardsigmoid_backward(grad_output, self): grad / 6 strictly inside (-3, 3), else 0.
std::vector<Value> lower_hardsigmoid_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 1);
  Value inside = g.binary("and", g.compare(x, scalar_like(ctx, -3), Comparison::kGT),
                          g.compare(x, scalar_like(ctx, 3), Comparison::kLT));
  Value scaled = g.binary("divide", operand(ctx, 0), scalar_like(ctx, 6));
  return {finish(ctx, g.select(inside, scaled, scalar_like(ctx, 0)))};
}

// tanh(softplus(x)) with softplus = log1p(exp(x)), as PyTorch's kernel writes it (exp overflowing to inf
// still gives tanh(inf) = 1).
Value tanh_softplus(LoweringContext& ctx, Value x) {
  Graph& g = ctx.graph;
  return g.unary("tanh", g.unary("log_plus_one", g.unary("exponential", x)));
}

std::vector<Value> lower_mish(LoweringContext& ctx) {
  Value x = operand(ctx, 0);
  return {finish(ctx, ctx.graph.binary("multiply", x, tanh_softplus(ctx, x)))};
}

// mish_backward(grad_output, self): grad * (t + x * sigmoid(x) * (1 - t^2)), t = tanh(softplus(x)).
std::vector<Value> lower_mish_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 1);
  Value t = tanh_softplus(ctx, x);
  Value sech2 = g.binary("subtract", scalar_like(ctx, 1), g.binary("multiply", t, t));
  Value slope = g.binary("add", t, g.binary("multiply", g.binary("multiply", x, g.unary("logistic", x)), sech2));
  return {finish(ctx, g.binary("multiply", operand(ctx, 0), slope))};
}

// ---- threshold, shrinkage ---------------------------------------------------------------------------

// threshold(self, threshold, value): x <= threshold ? value : x, compared in the input's own type (the
// CPU kernel converts both scalars to it first), so NaN passes through.
std::vector<Value> lower_threshold(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type t = out(ctx);
  Value x = cast_to(g, ctx.tensor(0), t);
  Value below = g.compare(x, ctx.scalar(1, t.dtype, t.dims), Comparison::kLE);
  return {g.select(below, ctx.scalar(2, t.dtype, t.dims), x)};
}

// |x| <= lambd (false for NaN): where hardshrink and softshrink give 0, and their gradients vanish.
Value in_dead_zone(LoweringContext& ctx, Value x, double lambd) {
  Graph& g = ctx.graph;
  return g.binary("and", g.compare(x, scalar_like(ctx, -lambd), Comparison::kGE),
                  g.compare(x, scalar_like(ctx, lambd), Comparison::kLE));
}

// hardshrink(self, lambd)
std::vector<Value> lower_hardshrink(LoweringContext& ctx) {
  require_floating(ctx, 0, "hardshrink");
  Value x = operand(ctx, 0);
  return {finish(ctx, ctx.graph.select(in_dead_zone(ctx, x, ctx.real(1)), scalar_like(ctx, 0), x))};
}

// softshrink(self, lambd): x - lambd above, x + lambd below, 0 between; NaN stays NaN.
std::vector<Value> lower_softshrink(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  const double lambd = ctx.real(1);
  Value shrunk = g.select(g.compare(x, scalar_like(ctx, lambd), Comparison::kGT),
                          g.binary("subtract", x, scalar_like(ctx, lambd)), g.binary("add", x, scalar_like(ctx, lambd)));
  return {finish(ctx, g.select(in_dead_zone(ctx, x, lambd), scalar_like(ctx, 0), shrunk))};
}

// hardshrink_backward(grad_out, self, lambd) and softshrink_backward: grad outside the dead zone.
std::vector<Value> lower_shrink_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  return {finish(ctx, g.select(in_dead_zone(ctx, operand(ctx, 1), ctx.real(2)), scalar_like(ctx, 0), operand(ctx, 0)))};
}

// ---- glu, prelu, rrelu ------------------------------------------------------------------------------

struct Halves {
  Value first;   // a, in opmath
  Value second;  // b, in opmath
  int64_t dim;
};

// Splits argument i (in opmath) into its two halves along the wrapped `dim`.
Halves split_halves(LoweringContext& ctx, size_t i, int64_t dim) {
  Graph& g = ctx.graph;
  Value x = g.convert(ctx.tensor(i), opmath(ctx));
  const Type t = g.type(x);
  dim = wrap_dim(dim, t.rank());
  std::vector<int64_t> start(t.dims.size(), 0), limit = t.dims, unit(t.dims.size(), 1);
  const int64_t half = t.dims[static_cast<size_t>(dim)] / 2;
  limit[static_cast<size_t>(dim)] = half;
  Value first = g.slice(x, start, limit, unit);
  start[static_cast<size_t>(dim)] = half;
  limit[static_cast<size_t>(dim)] = 2 * half;
  return {first, g.slice(x, start, limit, unit), dim};
}

// glu(self, dim): a * sigmoid(b) for the halves a, b of self along dim.
std::vector<Value> lower_glu(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Halves h = split_halves(ctx, 0, ctx.integer(1));
  return {finish(ctx, g.binary("multiply", h.first, g.unary("logistic", h.second)))};
}

// glu_backward(grad_output, self, dim): [grad * s, grad * a * s * (1 - s)] with s = sigmoid(b).
std::vector<Value> lower_glu_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Halves h = split_halves(ctx, 1, ctx.integer(2));
  Value grad = g.convert(ctx.tensor(0), opmath(ctx));
  Value s = g.unary("logistic", h.second);
  Value grad_first = g.binary("multiply", grad, s);
  Value s_slope = g.binary("multiply", s, g.binary("subtract", like(g, s, 1), s));
  Value grad_second = g.binary("multiply", g.binary("multiply", grad, h.first), s_slope);
  return {finish(ctx, g.concatenate({grad_first, grad_second}, h.dim))};
}

// _prelu_kernel(self, weight): weight already has a shape that broadcasts against self.
std::vector<Value> lower_prelu_kernel(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  require_floating(ctx, 0, "prelu");
  Value x = operand(ctx, 0);
  Value positive = g.compare(x, scalar_like(ctx, 0), Comparison::kGT);
  return {finish(ctx, g.select(positive, x, g.binary("multiply", operand(ctx, 1), x)))};
}

// _prelu_kernel_backward(grad_output, self, weight) -> (grad_self, grad_weight), both of self's shape
// (autograd sums grad_weight down to the weight's shape).
std::vector<Value> lower_prelu_kernel_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value grad = operand(ctx, 0);
  Value x = operand(ctx, 1);
  Value positive = g.compare(x, scalar_like(ctx, 0), Comparison::kGT);
  Value grad_self = g.select(positive, grad, g.binary("multiply", operand(ctx, 2), grad));
  Value grad_weight = g.select(positive, scalar_like(ctx, 0), g.binary("multiply", x, grad));
  return {finish(ctx, grad_self), g.convert(grad_weight, ctx.outputs.at(1).dtype)};
}

// rrelu_with_noise(self, noise!, lower, upper, training, generator) -> (out), then the new noise.
// Training draws a slope uniformly from [lower, upper) for each non-positive element (noise 1 elsewhere)
// and keeps it in `noise` for the backward; evaluation is a leaky relu with the mean slope and leaves
// noise alone.
std::vector<Value> lower_rrelu_with_noise(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  const double lower = ctx.real(2), upper = ctx.real(3);
  Value positive = g.compare(x, scalar_like(ctx, 0), Comparison::kGT);
  if (!ctx.boolean(4)) {
    Value y = g.select(positive, x, g.binary("multiply", x, scalar_like(ctx, (lower + upper) / 2)));
    return {finish(ctx, y), ctx.tensor(1)};
  }
  const Type noise_type = ctx.outputs.at(1);
  Value slope = g.binary("add", g.binary("multiply", unit_uniform(g, ctx.rng_state, out(ctx).dims, opmath(ctx)),
                                         scalar_like(ctx, upper - lower)),
                         scalar_like(ctx, lower));
  Value noise = g.select(positive, scalar_like(ctx, 1), slope);
  return {finish(ctx, g.binary("multiply", x, noise)), cast_to(g, noise, noise_type)};
}

}  // namespace

void add_nn_activation_rules(std::vector<Rule>& table) {
  table.push_back({"aten::log_sigmoid_backward", &lower_log_sigmoid_backward});
  table.push_back({"aten::log_sigmoid_forward", &lower_log_sigmoid_forward});
  table.push_back({"aten::_log_softmax", &lower_log_softmax});
  table.push_back({"aten::_log_softmax_backward_data", &lower_log_softmax_backward_data});
  table.push_back({"aten::_softmax", &lower_softmax});
  table.push_back({"aten::_softmax_backward_data", &lower_softmax_backward_data});
  table.push_back({"aten::elu", &lower_elu});
  table.push_back({"aten::elu_backward", &lower_elu_backward});
  table.push_back({"aten::gelu", &lower_gelu});
  table.push_back({"aten::gelu_backward", &lower_gelu_backward});
  table.push_back({"aten::glu", &lower_glu});
  table.push_back({"aten::glu_backward", &lower_glu_backward});
  table.push_back({"aten::hardshrink", &lower_hardshrink});
  table.push_back({"aten::hardshrink_backward", &lower_shrink_backward});
  table.push_back({"aten::hardsigmoid", &lower_hardsigmoid});
  table.push_back({"aten::hardsigmoid_backward", &lower_hardsigmoid_backward});
  table.push_back({"aten::hardswish", &lower_hardswish});
  table.push_back({"aten::hardswish_backward", &lower_hardswish_backward});
  table.push_back({"aten::mish", &lower_mish});
  table.push_back({"aten::mish_backward", &lower_mish_backward});
  table.push_back({"aten::_prelu_kernel", &lower_prelu_kernel});
  table.push_back({"aten::_prelu_kernel_backward", &lower_prelu_kernel_backward});
  table.push_back({"aten::rrelu_with_noise", &lower_rrelu_with_noise, /*uses_rng=*/true});
  // The in-place overload writes (self, noise), the same values in the same order as the functional
  // one's (result, noise); it needs its own entry because the functional overload is itself mutating.
  table.push_back({"aten::rrelu_with_noise_", &lower_rrelu_with_noise, /*uses_rng=*/true});
  table.push_back({"aten::softshrink", &lower_softshrink});
  table.push_back({"aten::softshrink_backward", &lower_shrink_backward});
  table.push_back({"aten::threshold", &lower_threshold});
  table.push_back({"aten::hardtanh", &lower_hardtanh});
  table.push_back({"aten::hardtanh_backward", &lower_hardtanh_backward});
  table.push_back({"aten::leaky_relu", &lower_leaky_relu});
  table.push_back({"aten::leaky_relu_backward", &lower_leaky_relu_backward});
  table.push_back({"aten::silu", &lower_silu});
  table.push_back({"aten::silu_backward", &lower_silu_backward});
}

}  // namespace torchtpu::lowering
