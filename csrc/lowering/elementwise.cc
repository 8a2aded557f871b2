// Elementwise arithmetic, comparisons, activations and their backward ops.
//
// Arithmetic computes in the output dtype's "opmath" type (float32 for 16-bit floats), as PyTorch does,
// and rounds once at the end. Comparisons compute in PyTorch's promoted type of the inputs.
#include <cmath>
#include <limits>
#include <stdexcept>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;

const Type& out(const LoweringContext& ctx) { return ctx.outputs.at(0); }

DType opmath(const LoweringContext& ctx) { return accumulation_dtype(out(ctx).dtype); }

// The result in the output's type. An out= or in-place result wider than the computation (bfloat16 operands
// written into a float32 tensor) takes the common dtype's rounding first, as CPU computes in that dtype.
Value finish(LoweringContext& ctx, Value v) {
  const DType common = ctx.common_dtype, result = out(ctx).dtype;
  if (is_floating(common) && is_floating(result) && element_size(common) < element_size(result)) {
    v = ctx.graph.convert(v, common);
  }
  return cast_to(ctx.graph, v, out(ctx));
}

Value operand(LoweringContext& ctx, size_t i) { return cast_to(ctx.graph, ctx.tensor(i), Type{opmath(ctx), out(ctx).dims}); }

Value scalar_like(LoweringContext& ctx, double value) {
  return ctx.graph.constant(value, opmath(ctx), out(ctx).dims);
}

// Scalar argument i in the opmath type, broadcast to the output: a runtime operand, so one program serves
// every value (a learning rate, a momentum, a clamp bound).
Value scalar_arg(LoweringContext& ctx, size_t i) { return ctx.scalar(i, opmath(ctx), out(ctx).dims); }

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
  // alpha is an operand like any scalar (SGD passes -lr here), so it is applied even when it is 1.
  if (!ctx.is_none(2)) other = g.binary("multiply", other, scalar_arg(ctx, 2));
  return {finish(ctx, g.binary(name, operand(ctx, 0), other))};
}

std::vector<Value> lower_add(LoweringContext& ctx) { return add_or_sub(ctx, "add"); }
std::vector<Value> lower_sub(LoweringContext& ctx) {
  check_subtraction_operands(ctx);
  return add_or_sub(ctx, "subtract");
}
std::vector<Value> lower_mul(LoweringContext& ctx) { return binary_op(ctx, "multiply"); }
// maximum or minimum with NaN from either side, as PyTorch and StableHLO define them: XLA's CPU compiler
// (fast min/max) returns the first operand where only the second is NaN, so a NaN clamp bound was dropped.
Value nan_propagating(Graph& g, const char* name, Value a, Value b) {
  Value result = g.binary(name, a, b);
  if (!is_floating(g.type(result).dtype)) return result;
  return g.select(g.compare(b, b, Comparison::kNE), b, result);
}

std::vector<Value> lower_maximum(LoweringContext& ctx) {
  return {finish(ctx, nan_propagating(ctx.graph, "maximum", operand(ctx, 0), operand(ctx, 1)))};
}
std::vector<Value> lower_minimum(LoweringContext& ctx) {
  return {finish(ctx, nan_propagating(ctx.graph, "minimum", operand(ctx, 0), operand(ctx, 1)))};
}

std::vector<Value> lower_div(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value q = g.binary("divide", operand(ctx, 0), operand(ctx, 1));
  return {finish(ctx, q)};
}

// Floating floor division as CPU and CUDA compute it (Python's algorithm): from fmod, so an infinite
// dividend gives NaN as `inf // 2` does, and a quotient within 0.5 of an integer rounds to it.
Value floor_divide_floats(Graph& g, Value a, Value b) {
  const Type& t = g.type(a);
  auto c = [&](double v) { return g.constant(v, t.dtype, t.dims); };
  Value mod = g.binary("remainder", a, b);
  Value div = g.binary("divide", g.binary("subtract", a, mod), b);
  Value signs_differ = g.compare(g.compare(b, c(0), Comparison::kLT), g.compare(mod, c(0), Comparison::kLT),
                                 Comparison::kNE);
  Value step_down = g.binary("and", g.compare(mod, c(0), Comparison::kNE), signs_differ);
  div = g.select(step_down, g.binary("subtract", div, c(1)), div);
  Value floored = g.unary("floor", div);
  Value round_up = g.compare(g.binary("subtract", div, floored), c(0.5), Comparison::kGT);
  floored = g.select(round_up, g.binary("add", floored, c(1)), floored);
  Value quotient = g.binary("divide", a, b);
  Value signed_zero = g.select(sign_bit_set(g, quotient), c(-0.0), c(0.0));
  Value result = g.select(g.compare(div, c(0), Comparison::kNE), floored, signed_zero);
  return g.select(g.compare(b, c(0), Comparison::kEQ), quotient, result);
}

// div.Tensor_mode: rounding_mode None / "trunc" / "floor".
std::vector<Value> lower_div_mode(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value a = operand(ctx, 0);
  Value b = operand(ctx, 1);
  Value q = g.binary("divide", a, b);
  if (ctx.is_none(2)) return {finish(ctx, q)};
  if (!is_floating(opmath(ctx))) {
    check_integer_divisor(ctx, b);
    // Integer division truncates; floor mode steps down where the remainder's sign differs from b's.
    if (ctx.text(2) == "floor") {
      Value zero = scalar_like(ctx, 0);
      Value r = g.binary("remainder", a, b);
      Value signs_differ = g.compare(g.compare(r, zero, Comparison::kLT), g.compare(b, zero, Comparison::kLT),
                                     Comparison::kNE);
      Value adjust = g.binary("and", g.compare(r, zero, Comparison::kNE), signs_differ);
      q = g.select(adjust, g.binary("subtract", q, scalar_like(ctx, 1)), q);
    }
    return {finish(ctx, q)};
  }
  if (ctx.text(2) == "trunc") {
    Value zero = scalar_like(ctx, 0);
    q = g.select(g.compare(q, zero, Comparison::kLT), g.unary("ceil", q), g.unary("floor", q));
  } else if (ctx.text(2) == "floor") {
    q = floor_divide_floats(g, a, b);
  }
  return {finish(ctx, q)};
}

// CPU refuses a negative scalar exponent of an integer power (its value is compiled in, so the rule sees it);
// a tensor of exponents may hold negative ones (CPU gives 0 or +-1 for them, as XLA does).
bool integer_power(const LoweringContext& ctx) {
  const DType dtype = out(ctx).dtype;
  return !is_floating(dtype) && !is_complex(dtype) && dtype != DType::kBool;
}

std::vector<Value> lower_pow_tensor_scalar(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value base = operand(ctx, 0);
  const double exponent = ctx.real(1);
  if (integer_power(ctx) && exponent < 0) {
    throw std::invalid_argument("Integers to negative integer powers are not allowed.");
  }
  if (exponent == 2.0) return {finish(ctx, g.binary("multiply", base, base))};
  if (exponent == 1.0) return {finish(ctx, base)};
  // A bool to a bool power stays bool (aten/op_build.cc shaped_on_cpu); XLA has no bool power.
  if (out(ctx).dtype == DType::kBool) return {g.constant_int(1, DType::kBool, out(ctx).dims)};
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
  Value b = ctx.scalar(1, compute.dtype, compute.dims);
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
std::vector<Value> lower_abs(LoweringContext& ctx) {
  const DType dtype = out(ctx).dtype;
  if (is_complex(ctx.type_of(0).dtype)) return {finish(ctx, magnitude(ctx.graph, ctx.tensor(0)))};
  if (dtype == DType::kBool || is_unsigned(dtype)) return {finish(ctx, ctx.tensor(0))};
  return unary_op(ctx, "abs");
}
std::vector<Value> lower_exp(LoweringContext& ctx) { return unary_op(ctx, "exponential"); }
std::vector<Value> lower_log(LoweringContext& ctx) { return unary_op(ctx, "log"); }
std::vector<Value> lower_sqrt(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  Value root = g.unary("sqrt", x);
  if (!is_complex(g.type(x).dtype)) return {finish(ctx, root)};
  // The principal root's imaginary part has the sign of x's, -0.0 included: sqrt(-4-0i) is -2i, on the
  // other side of the branch cut from sqrt(-4+0i). XLA's formula ignores the sign of a zero.
  Value im = g.unary("abs", g.imag(root));
  return {finish(ctx, g.complex(g.real(root), g.select(sign_bit_set(g, g.imag(x)), g.unary("negate", im), im)))};
}
std::vector<Value> lower_rsqrt(LoweringContext& ctx) { return unary_op(ctx, "rsqrt"); }
std::vector<Value> lower_tanh(LoweringContext& ctx) { return unary_op(ctx, "tanh"); }
std::vector<Value> lower_sigmoid(LoweringContext& ctx) { return unary_op(ctx, "logistic"); }
std::vector<Value> lower_sin(LoweringContext& ctx) { return unary_op(ctx, "sine"); }
std::vector<Value> lower_cos(LoweringContext& ctx) { return unary_op(ctx, "cosine"); }

std::vector<Value> lower_reciprocal(LoweringContext& ctx) {
  return {finish(ctx, ctx.graph.binary("divide", scalar_like(ctx, 1), operand(ctx, 0)))};
}

std::vector<Value> lower_relu(LoweringContext& ctx) {
  // CPU's relu refuses bool before its kernel; the meta kernel does not.
  if (ctx.type_of(0).dtype == DType::kBool) throw std::invalid_argument("Boolean inputs not supported for relu");
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
  if (!ctx.is_none(1)) x = nan_propagating(g, "maximum", x, scalar_arg(ctx, 1));
  if (!ctx.is_none(2)) x = nan_propagating(g, "minimum", x, scalar_arg(ctx, 2));
  return {finish(ctx, x)};
}

std::vector<Value> lower_clamp_min(LoweringContext& ctx) {
  return {finish(ctx, nan_propagating(ctx.graph, "maximum", operand(ctx, 0), scalar_arg(ctx, 1)))};
}

std::vector<Value> lower_clamp_max(LoweringContext& ctx) {
  return {finish(ctx, nan_propagating(ctx.graph, "minimum", operand(ctx, 0), scalar_arg(ctx, 1)))};
}

// threshold_backward(grad_output, self, threshold): grad where self > threshold, else 0.
std::vector<Value> lower_threshold_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value grad = operand(ctx, 0);
  Value self = operand(ctx, 1);
  Value keep = g.compare(self, scalar_arg(ctx, 2), Comparison::kGT);
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
  return {ctx.scalar(1, out(ctx).dtype, out(ctx).dims)};
}

std::vector<Value> lower_fill_tensor(LoweringContext& ctx) { return {cast_to(ctx.graph, ctx.tensor(1), out(ctx))}; }

std::vector<Value> lower_zero(LoweringContext& ctx) {
  return {ctx.graph.constant_int(0, out(ctx).dtype, out(ctx).dims)};
}

// copy(self, src, non_blocking): src converted and broadcast to self.
std::vector<Value> lower_copy(LoweringContext& ctx) { return {cast_to(ctx.graph, ctx.tensor(1), out(ctx))}; }

std::vector<Value> lower_clone(LoweringContext& ctx) { return {cast_to(ctx.graph, ctx.tensor(0), out(ctx))}; }


// ---- More unary math -------------------------------------------------------------------------------

// floor/ceil/round/trunc leave integers unchanged, as PyTorch does.
std::vector<Value> rounding_op(LoweringContext& ctx, const char* name) {
  if (!is_floating(out(ctx).dtype)) return {finish(ctx, ctx.tensor(0))};
  return unary_op(ctx, name);
}
std::vector<Value> lower_floor(LoweringContext& ctx) { return rounding_op(ctx, "floor"); }
std::vector<Value> lower_ceil(LoweringContext& ctx) { return rounding_op(ctx, "ceil"); }
std::vector<Value> lower_round(LoweringContext& ctx) { return rounding_op(ctx, "round_nearest_even"); }

Value truncate(Graph& g, Value x) {
  Value zero = g.constant(0, g.type(x).dtype, g.type(x).dims);
  return g.select(g.compare(x, zero, Comparison::kLT), g.unary("ceil", x), g.unary("floor", x));
}

std::vector<Value> lower_trunc(LoweringContext& ctx) {
  if (!is_floating(out(ctx).dtype)) return {finish(ctx, ctx.tensor(0))};
  return {finish(ctx, truncate(ctx.graph, operand(ctx, 0)))};
}

std::vector<Value> lower_frac(LoweringContext& ctx) {
  Value x = operand(ctx, 0);
  return {finish(ctx, ctx.graph.binary("subtract", x, truncate(ctx.graph, x)))};
}

// round.decimals(self, decimals): round half to even at 10^-decimals. Unlike round(), CPU's kernel takes
// floating tensors only (the caller asks CPU for its error).
std::vector<Value> lower_round_decimals(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  if (!is_floating(out(ctx).dtype)) throw std::invalid_argument("round with decimals takes floating tensors");
  const double scale = std::pow(10.0, static_cast<double>(ctx.integer(1)));
  Value scaled = g.binary("multiply", operand(ctx, 0), scalar_like(ctx, scale));
  return {finish(ctx, g.binary("divide", g.unary("round_nearest_even", scaled), scalar_like(ctx, scale)))};
}

std::vector<Value> lower_sign(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType dtype = out(ctx).dtype;
  if (dtype == DType::kBool) return {finish(ctx, ctx.tensor(0))};
  if (is_unsigned(dtype)) {
    return {finish(ctx, g.convert(g.compare(operand(ctx, 0), scalar_like(ctx, 0), Comparison::kGT), dtype))};
  }
  if (is_floating(dtype)) {  // CPU's sign of NaN is 0 (it computes (0 < x) - (x < 0)); StableHLO's is NaN
    Value x = operand(ctx, 0);
    return {finish(ctx, g.select(g.compare(x, x, Comparison::kNE), scalar_like(ctx, 0), g.unary("sign", x)))};
  }
  return unary_op(ctx, "sign");
}

std::vector<Value> chlo_unary(LoweringContext& ctx, const char* name) {
  Value x = operand(ctx, 0);
  return {finish(ctx, ctx.graph.chlo(name, {x}, ctx.graph.type(x)))};
}
std::vector<Value> lower_acos(LoweringContext& ctx) { return chlo_unary(ctx, "acos"); }
std::vector<Value> lower_acosh(LoweringContext& ctx) { return chlo_unary(ctx, "acosh"); }
std::vector<Value> lower_asin(LoweringContext& ctx) { return chlo_unary(ctx, "asin"); }
std::vector<Value> lower_asinh(LoweringContext& ctx) { return chlo_unary(ctx, "asinh"); }
std::vector<Value> lower_atan(LoweringContext& ctx) { return chlo_unary(ctx, "atan"); }
std::vector<Value> lower_atanh(LoweringContext& ctx) { return chlo_unary(ctx, "atanh"); }
std::vector<Value> lower_cosh(LoweringContext& ctx) { return chlo_unary(ctx, "cosh"); }
std::vector<Value> lower_sinh(LoweringContext& ctx) { return chlo_unary(ctx, "sinh"); }
std::vector<Value> lower_tan(LoweringContext& ctx) { return chlo_unary(ctx, "tan"); }
std::vector<Value> lower_erf(LoweringContext& ctx) { return {finish(ctx, erf(ctx.graph, operand(ctx, 0)))}; }
std::vector<Value> lower_erfinv(LoweringContext& ctx) { return chlo_unary(ctx, "erf_inv"); }
std::vector<Value> lower_lgamma(LoweringContext& ctx) { return chlo_unary(ctx, "lgamma"); }
std::vector<Value> lower_expm1(LoweringContext& ctx) { return unary_op(ctx, "exponential_minus_one"); }
std::vector<Value> lower_log1p(LoweringContext& ctx) { return unary_op(ctx, "log_plus_one"); }

std::vector<Value> log_base(LoweringContext& ctx, double base) {
  Graph& g = ctx.graph;
  Value ln = g.unary("log", operand(ctx, 0));
  const Type& t = g.type(ln);
  if (is_complex(t.dtype)) {
    // Each part over the real ln(base): a complex division by ln(base) + 0i turns log(0) = -inf + 0i and
    // log(inf) into a NaN imaginary part, where CPU keeps 0.
    Value divisor = g.constant(std::log(base), complex_part(t.dtype), t.dims);
    return {finish(ctx, g.complex(g.binary("divide", g.real(ln), divisor), g.binary("divide", g.imag(ln), divisor)))};
  }
  return {finish(ctx, g.binary("divide", ln, scalar_like(ctx, std::log(base))))};
}
std::vector<Value> lower_log2(LoweringContext& ctx) { return log_base(ctx, 2.0); }
std::vector<Value> lower_log10(LoweringContext& ctx) { return log_base(ctx, 10.0); }

std::vector<Value> lower_exp2(LoweringContext& ctx) {
  return {finish(ctx, ctx.graph.binary("power", scalar_like(ctx, 2.0), operand(ctx, 0)))};
}

// pow.Scalar(Scalar self, Tensor exponent)
std::vector<Value> lower_pow_scalar(LoweringContext& ctx) {
  return {finish(ctx, ctx.graph.binary("power", scalar_arg(ctx, 0), operand(ctx, 1)))};
}

std::vector<Value> lower_isnan(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  if (is_complex(g.type(x).dtype)) {  // either part NaN
    Value re = g.real(x), im = g.imag(x);
    return {g.binary("or", g.compare(re, re, Comparison::kNE), g.compare(im, im, Comparison::kNE))};
  }
  if (!is_floating(g.type(x).dtype)) return {g.constant_int(0, DType::kBool, out(ctx).dims)};
  return {g.compare(x, x, Comparison::kNE)};
}

std::vector<Value> lower_isinf(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type& t = g.type(x);
  if (is_complex(t.dtype)) {  // either part infinite
    Value inf = g.constant(std::numeric_limits<double>::infinity(), complex_part(t.dtype), t.dims);
    return {g.binary("or", g.compare(g.unary("abs", g.real(x)), inf, Comparison::kEQ),
                     g.compare(g.unary("abs", g.imag(x)), inf, Comparison::kEQ))};
  }
  if (!is_floating(t.dtype)) return {g.constant_int(0, DType::kBool, out(ctx).dims)};
  Value inf = g.constant(std::numeric_limits<double>::infinity(), t.dtype, t.dims);
  return {g.compare(g.unary("abs", x), inf, Comparison::kEQ)};
}

// isposinf / isneginf: compare against the infinity of the input's type (integers are never infinite).
std::vector<Value> infinity_test(LoweringContext& ctx, double infinity) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type& t = g.type(x);
  if (!is_floating(t.dtype)) return {g.constant_int(0, DType::kBool, out(ctx).dims)};
  return {g.compare(x, g.constant(infinity, t.dtype, t.dims), Comparison::kEQ)};
}
std::vector<Value> lower_isposinf(LoweringContext& ctx) {
  return infinity_test(ctx, std::numeric_limits<double>::infinity());
}
std::vector<Value> lower_isneginf(LoweringContext& ctx) {
  return infinity_test(ctx, -std::numeric_limits<double>::infinity());
}

// nan_to_num(self, nan?, posinf?, neginf?): defaults 0 and the dtype's largest / lowest finite values.
std::vector<Value> lower_nan_to_num(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  if (!is_floating(t.dtype)) return {finish(ctx, ctx.tensor(0))};
  const double largest = largest_finite(t.dtype);
  Value x = g.convert(ctx.tensor(0), t.dtype);
  auto constant = [&](size_t i, double fallback) { return g.constant(ctx.is_none(i) ? fallback : ctx.real(i), t.dtype, t.dims); };
  const double inf = std::numeric_limits<double>::infinity();
  x = g.select(g.compare(x, x, Comparison::kNE), constant(1, 0.0), x);
  x = g.select(g.compare(x, g.constant(inf, t.dtype, t.dims), Comparison::kEQ), constant(2, largest), x);
  x = g.select(g.compare(x, g.constant(-inf, t.dtype, t.dims), Comparison::kEQ), constant(3, -largest), x);
  return {x};
}

// ---- Bitwise and logical -----------------------------------------------------------------------------

std::vector<Value> lower_bitwise_and(LoweringContext& ctx) { return binary_op(ctx, "and"); }
std::vector<Value> lower_bitwise_or(LoweringContext& ctx) { return binary_op(ctx, "or"); }
std::vector<Value> lower_bitwise_xor(LoweringContext& ctx) { return binary_op(ctx, "xor"); }
std::vector<Value> lower_bitwise_not(LoweringContext& ctx) { return unary_op(ctx, "not"); }

// Scalar overloads: argument 1 is a number.
std::vector<Value> bitwise_scalar_op(LoweringContext& ctx, const char* name) {
  Graph& g = ctx.graph;
  Value other = g.constant_int(ctx.integer(1), opmath(ctx), out(ctx).dims);
  return {finish(ctx, g.binary(name, operand(ctx, 0), other))};
}
std::vector<Value> lower_bitwise_and_scalar(LoweringContext& ctx) { return bitwise_scalar_op(ctx, "and"); }
std::vector<Value> lower_bitwise_or_scalar(LoweringContext& ctx) { return bitwise_scalar_op(ctx, "or"); }
std::vector<Value> lower_bitwise_xor_scalar(LoweringContext& ctx) { return bitwise_scalar_op(ctx, "xor"); }

// Shifts (bitwise_left_shift / bitwise_right_shift and the << >> operators; either side may be a number).
// Out-of-range amounts give CPU's results, not the hardware's: a left shift by a negative amount or by the
// width or more gives 0; a right shift by a negative amount or past the last value bit fills with the sign.
Value shift_operand(LoweringContext& ctx, size_t i) {
  const Type& t = out(ctx);
  if (ctx.args[i].kind == Arg::Kind::kTensor) return cast_to(ctx.graph, ctx.tensor(i), t);
  return ctx.scalar(i, t.dtype, t.dims);
}

std::vector<Value> shift(LoweringContext& ctx, bool left) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  if (!is_integral(t.dtype)) {
    throw std::invalid_argument(std::string("\"") + (left ? "lshift" : "rshift") + "_tpu\" not implemented for '" +
                                torch_name(t.dtype) + "'");
  }
  const bool is_signed = !is_unsigned(t.dtype);
  const int64_t width = static_cast<int64_t>(element_size(t.dtype) * 8);
  const int64_t max_shift = left ? width : width - (is_signed ? 1 : 0);
  Value a = shift_operand(ctx, 0), amount = shift_operand(ctx, 1);
  Value out_of_range = g.compare(amount, g.constant_int(max_shift, t.dtype, t.dims), Comparison::kGE);
  if (is_signed) {
    out_of_range = g.binary("or", out_of_range, g.compare(amount, g.constant_int(0, t.dtype, t.dims), Comparison::kLT));
  }
  if (left) return {g.select(out_of_range, g.constant_int(0, t.dtype, t.dims), g.binary("shift_left", a, amount))};
  const char* right = is_signed ? "shift_right_arithmetic" : "shift_right_logical";
  // A right shift past the range: the sign fill of a signed value (a >> (width - 1)), 0 of an unsigned one.
  Value beyond = is_signed ? g.binary(right, a, g.constant_int(max_shift, t.dtype, t.dims)) : g.constant_int(0, t.dtype, t.dims);
  return {g.select(out_of_range, beyond, g.binary(right, a, amount))};
}
std::vector<Value> lower_left_shift(LoweringContext& ctx) { return shift(ctx, true); }
std::vector<Value> lower_right_shift(LoweringContext& ctx) { return shift(ctx, false); }

Value truthy(Graph& g, Value x, const std::vector<int64_t>& dims) {
  Value v = broadcast_to(g, x, dims);
  const DType dtype = g.type(v).dtype;
  if (dtype == DType::kBool) return v;
  return g.compare(v, g.constant_int(0, dtype, dims), Comparison::kNE);
}

std::vector<Value> logical_op(LoweringContext& ctx, const char* name) {
  Graph& g = ctx.graph;
  Value r = g.binary(name, truthy(g, ctx.tensor(0), out(ctx).dims), truthy(g, ctx.tensor(1), out(ctx).dims));
  return {g.convert(r, out(ctx).dtype)};
}
std::vector<Value> lower_logical_and(LoweringContext& ctx) { return logical_op(ctx, "and"); }
std::vector<Value> lower_logical_or(LoweringContext& ctx) { return logical_op(ctx, "or"); }
std::vector<Value> lower_logical_xor(LoweringContext& ctx) { return logical_op(ctx, "xor"); }

// ---- Binary math -------------------------------------------------------------------------------------

// fmod(self, other): C semantics (the result takes the dividend's sign), which is StableHLO's remainder.
// `other` is a tensor or a Scalar.
std::vector<Value> fmod(LoweringContext& ctx, Value other) {
  check_integer_divisor(ctx, other);
  return {finish(ctx, ctx.graph.binary("remainder", operand(ctx, 0), other))};
}
std::vector<Value> lower_fmod(LoweringContext& ctx) { return fmod(ctx, operand(ctx, 1)); }
std::vector<Value> lower_fmod_scalar(LoweringContext& ctx) { return fmod(ctx, scalar_arg(ctx, 1)); }

// remainder: Python semantics (the result takes the divisor's sign).
Value python_remainder(Graph& g, Value a, Value b) {
  const Type& t = g.type(a);
  Value zero = g.constant(0, t.dtype, t.dims);
  Value r = g.binary("remainder", a, b);
  Value signs_differ = g.compare(g.compare(r, zero, Comparison::kLT), g.compare(b, zero, Comparison::kLT),
                                 Comparison::kNE);
  Value adjust = g.binary("and", g.compare(r, zero, Comparison::kNE), signs_differ);
  return g.select(adjust, g.binary("add", r, b), r);
}
// remainder(self, other), `other` a tensor or a Scalar.
std::vector<Value> remainder(LoweringContext& ctx, Value other) {
  check_integer_divisor(ctx, other);
  return {finish(ctx, python_remainder(ctx.graph, operand(ctx, 0), other))};
}
std::vector<Value> lower_remainder(LoweringContext& ctx) { return remainder(ctx, operand(ctx, 1)); }
std::vector<Value> lower_remainder_scalar(LoweringContext& ctx) { return remainder(ctx, scalar_arg(ctx, 1)); }
// remainder.Scalar_Tensor(Scalar self, Tensor other): `2 % x`.
std::vector<Value> lower_remainder_scalar_tensor(LoweringContext& ctx) {
  Value other = operand(ctx, 1);
  check_integer_divisor(ctx, other);
  return {finish(ctx, python_remainder(ctx.graph, scalar_arg(ctx, 0), other))};
}

std::vector<Value> lower_atan2(LoweringContext& ctx) { return binary_op(ctx, "atan2"); }

// hypot(a, b) = m * sqrt(1 + (n / m)^2) with m = max(|a|, |b|), n = min: squaring a and b themselves overflows
// past 1.8e19 and underflows below 1e-19 in float32. As C's hypot, an infinite side gives inf even beside NaN.
std::vector<Value> lower_hypot(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value a = g.unary("abs", operand(ctx, 0));
  Value b = g.unary("abs", operand(ctx, 1));
  const Type t = g.type(a);
  Value larger = g.binary("maximum", a, b);
  Value smaller = g.binary("minimum", a, b);
  Value ratio = g.binary("divide", smaller, larger);
  Value scaled = g.binary("multiply", larger,
                          g.unary("sqrt", g.binary("add", g.constant(1.0, t.dtype, t.dims), g.binary("multiply", ratio, ratio))));
  const double inf = std::numeric_limits<double>::infinity();
  Value infinite = g.constant(inf, t.dtype, t.dims);
  Value any_nan = g.binary("or", g.compare(a, a, Comparison::kNE), g.compare(b, b, Comparison::kNE));
  Value result = g.select(g.compare(larger, g.constant(0.0, t.dtype, t.dims), Comparison::kEQ),
                          g.constant(0.0, t.dtype, t.dims), scaled);
  result = g.select(any_nan, g.constant(std::numeric_limits<double>::quiet_NaN(), t.dtype, t.dims), result);
  Value any_inf = g.binary("or", g.compare(a, infinite, Comparison::kEQ), g.compare(b, infinite, Comparison::kEQ));
  return {finish(ctx, g.select(any_inf, infinite, result))};
}

// copysign(a, b): |a| with b's sign bit (so -0.0 counts as negative, as in C).
std::vector<Value> lower_copysign(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value magnitude = g.unary("abs", operand(ctx, 0));
  return {finish(ctx, g.select(sign_bit_set(g, operand(ctx, 1)), g.unary("negate", magnitude), magnitude))};
}

std::vector<Value> lower_xlogy(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  Value y = operand(ctx, 1);
  Value product = g.binary("multiply", x, g.unary("log", y));
  Value x_zero = g.binary("and", g.compare(x, scalar_like(ctx, 0), Comparison::kEQ),
                          g.compare(y, y, Comparison::kEQ));  // a NaN y still gives NaN
  return {finish(ctx, g.select(x_zero, scalar_like(ctx, 0), product))};
}

// logaddexp(a, b) = max + log1p(exp(-|a - b|)), stable for large magnitudes.
std::vector<Value> lower_logaddexp(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value a = operand(ctx, 0);
  Value b = operand(ctx, 1);
  if (is_complex(g.type(a).dtype)) return {finish(ctx, complex_logaddexp(g, a, b))};
  Value largest = g.binary("maximum", a, b);
  Value gap = g.unary("negate", g.unary("abs", g.binary("subtract", a, b)));
  Value result = g.binary("add", largest, g.unary("log_plus_one", g.unary("exponential", gap)));
  // Equal infinities: the gap is NaN, the answer is that infinity. (Equal finite values must not take this
  // branch: logaddexp(a, a) = a + log 2.)
  Value infinity = scalar_like(ctx, std::numeric_limits<double>::infinity());
  Value equal_infinities = g.binary("and", g.compare(a, b, Comparison::kEQ),
                                    g.compare(g.unary("abs", a), infinity, Comparison::kEQ));
  return {finish(ctx, g.select(equal_infinities, a, result))};
}

// clamp.Tensor(self, Tensor? min, Tensor? max)
std::vector<Value> lower_clamp_tensor(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = operand(ctx, 0);
  if (!ctx.is_none(1)) x = nan_propagating(g, "maximum", x, operand(ctx, 1));
  if (!ctx.is_none(2)) x = nan_propagating(g, "minimum", x, operand(ctx, 2));
  return {finish(ctx, x)};
}

// ---- Fused arithmetic used by optimizers ---------------------------------------------------------------

// lerp(self, end, weight): PyTorch's two-sided formula, exact at weight 0 and 1. CPU's kernels take floating
// and complex tensors only (the caller asks CPU for its error).
Value lerp(LoweringContext& ctx, Value weight) {
  if (!is_floating(ctx.outputs.at(0).dtype) && !is_complex(ctx.outputs.at(0).dtype)) {
    throw std::invalid_argument("lerp takes floating and complex tensors");
  }
  Graph& g = ctx.graph;
  Value start = operand(ctx, 0);
  Value end = operand(ctx, 1);
  Value diff = g.binary("subtract", end, start);
  Value low = g.binary("add", start, g.binary("multiply", weight, diff));
  Value high = g.binary("subtract", end, g.binary("multiply", diff, g.binary("subtract", scalar_like(ctx, 1), weight)));
  // |weight| < 0.5 (the magnitude of a complex weight, as CPU's kernel).
  Value size = magnitude(g, weight);
  Value small = g.compare(size, g.constant(0.5, g.type(size).dtype, g.type(size).dims), Comparison::kLT);
  return finish(ctx, g.select(small, low, high));
}
std::vector<Value> lower_lerp_scalar(LoweringContext& ctx) { return {lerp(ctx, scalar_arg(ctx, 2))}; }
std::vector<Value> lower_lerp_tensor(LoweringContext& ctx) { return {lerp(ctx, operand(ctx, 2))}; }

// addcmul(self, tensor1, tensor2, value): self + value * tensor1 * tensor2
std::vector<Value> lower_addcmul(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value term = g.binary("multiply", g.binary("multiply", operand(ctx, 1), operand(ctx, 2)), scalar_arg(ctx, 3));
  return {finish(ctx, g.binary("add", operand(ctx, 0), term))};
}

// addcdiv(self, tensor1, tensor2, value): self + value * tensor1 / tensor2
std::vector<Value> lower_addcdiv(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  // CPU refuses an integer quotient (its meaning changed from truncating to true division); the meta kernel
  // does not check.
  const auto integral = [&](size_t i) {
    const DType dtype = ctx.type_of(i).dtype;
    return !is_floating(dtype) && !is_complex(dtype);
  };
  if (integral(1) && integral(2)) {
    throw std::invalid_argument(
        "Integer division with addcdiv is no longer supported, and in a future  release addcdiv will perform a true "
        "division of tensor1 and tensor2. The historic addcdiv behavior can be implemented as (input + value * "
        "torch.trunc(tensor1 / tensor2)).to(input.dtype) for integer inputs and as (input + value * tensor1 / tensor2) "
        "for float inputs. The future addcdiv behavior is just the latter implementation: (input + value * tensor1 / "
        "tensor2), for all dtypes.");
  }
  Value term = g.binary("multiply", g.binary("divide", operand(ctx, 1), operand(ctx, 2)), scalar_arg(ctx, 3));
  return {finish(ctx, g.binary("add", operand(ctx, 0), term))};
}

}  // namespace

void add_elementwise_rules(std::vector<Rule>& table) {
  table.push_back({"aten::abs", &lower_abs});
  table.push_back({"aten::acos", &lower_acos});
  table.push_back({"aten::acosh", &lower_acosh});
  table.push_back({"aten::addcdiv", &lower_addcdiv});
  table.push_back({"aten::addcmul", &lower_addcmul});
  table.push_back({"aten::asin", &lower_asin});
  table.push_back({"aten::asinh", &lower_asinh});
  table.push_back({"aten::atan", &lower_atan});
  table.push_back({"aten::atan2", &lower_atan2});
  table.push_back({"aten::atanh", &lower_atanh});
  table.push_back({"aten::bitwise_and.Scalar", &lower_bitwise_and_scalar});
  table.push_back({"aten::bitwise_and.Tensor", &lower_bitwise_and});
  table.push_back({"aten::bitwise_not", &lower_bitwise_not});
  table.push_back({"aten::bitwise_or.Scalar", &lower_bitwise_or_scalar});
  table.push_back({"aten::bitwise_or.Tensor", &lower_bitwise_or});
  table.push_back({"aten::bitwise_xor.Scalar", &lower_bitwise_xor_scalar});
  table.push_back({"aten::bitwise_xor.Tensor", &lower_bitwise_xor});
  for (const char* name : {"aten::bitwise_left_shift.Tensor", "aten::bitwise_left_shift.Tensor_Scalar",
                           "aten::bitwise_left_shift.Scalar_Tensor", "aten::__lshift__.Tensor", "aten::__lshift__.Scalar"}) {
    table.push_back({name, &lower_left_shift});
  }
  for (const char* name : {"aten::bitwise_right_shift.Tensor", "aten::bitwise_right_shift.Tensor_Scalar",
                           "aten::bitwise_right_shift.Scalar_Tensor", "aten::__rshift__.Tensor", "aten::__rshift__.Scalar"}) {
    table.push_back({name, &lower_right_shift});
  }
  table.push_back({"aten::ceil", &lower_ceil});
  table.push_back({"aten::clamp.Tensor", &lower_clamp_tensor});
  table.push_back({"aten::copysign.Tensor", &lower_copysign});
  table.push_back({"aten::cosh", &lower_cosh});
  table.push_back({"aten::erf", &lower_erf});
  table.push_back({"aten::erfinv", &lower_erfinv});
  table.push_back({"aten::exp2", &lower_exp2});
  table.push_back({"aten::expm1", &lower_expm1});
  table.push_back({"aten::floor", &lower_floor});
  table.push_back({"aten::fmod.Scalar", &lower_fmod_scalar});
  table.push_back({"aten::fmod.Tensor", &lower_fmod});
  table.push_back({"aten::frac", &lower_frac});
  table.push_back({"aten::hypot", &lower_hypot});
  table.push_back({"aten::isinf", &lower_isinf});
  table.push_back({"aten::isnan", &lower_isnan});
  table.push_back({"aten::isneginf", &lower_isneginf});
  table.push_back({"aten::isposinf", &lower_isposinf});
  table.push_back({"aten::lerp.Scalar", &lower_lerp_scalar});
  table.push_back({"aten::lerp.Tensor", &lower_lerp_tensor});
  table.push_back({"aten::lgamma", &lower_lgamma});
  table.push_back({"aten::log10", &lower_log10});
  table.push_back({"aten::log1p", &lower_log1p});
  table.push_back({"aten::log2", &lower_log2});
  table.push_back({"aten::logaddexp", &lower_logaddexp});
  table.push_back({"aten::logical_and", &lower_logical_and});
  table.push_back({"aten::logical_or", &lower_logical_or});
  table.push_back({"aten::logical_xor", &lower_logical_xor});
  table.push_back({"aten::nan_to_num", &lower_nan_to_num});
  table.push_back({"aten::pow.Scalar", &lower_pow_scalar});
  table.push_back({"aten::remainder.Scalar", &lower_remainder_scalar});
  table.push_back({"aten::remainder.Scalar_Tensor", &lower_remainder_scalar_tensor});
  table.push_back({"aten::remainder.Tensor", &lower_remainder});
  table.push_back({"aten::round", &lower_round});
  table.push_back({"aten::round.decimals", &lower_round_decimals});
  table.push_back({"aten::sgn", &lower_sign});  // for real dtypes sgn is sign
  table.push_back({"aten::sign", &lower_sign});
  table.push_back({"aten::sinh", &lower_sinh});
  table.push_back({"aten::tan", &lower_tan});
  table.push_back({"aten::trunc", &lower_trunc});
  table.push_back({"aten::xlogy.Tensor", &lower_xlogy});
  table.push_back({"aten::add.Tensor", &lower_add});
  table.push_back({"aten::clamp", &lower_clamp});
  table.push_back({"aten::clamp_max", &lower_clamp_max});
  table.push_back({"aten::clamp_max.Tensor", &lower_minimum});  // clamp by a tensor bound is minimum/maximum
  table.push_back({"aten::clamp_min.Tensor", &lower_maximum});
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
