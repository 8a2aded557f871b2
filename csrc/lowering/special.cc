// Special functions and the less common elementwise math: polygamma and its relatives, Bessel-type functions,
// orthogonal polynomials, error-function relatives, and small ops such as fmax, nextafter or frexp.
//
// Everything computes in the output's "opmath" type (float32 for 16-bit floats) and rounds once, as PyTorch
// does. The approximations are series, reflection formulas and asymptotic expansions whose term counts are
// chosen for float64 accuracy, so float64 inputs get float64 results; the references are cited where used.
#include <cmath>
#include <limits>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;

constexpr double kPi = 3.14159265358979323846;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Elementwise arithmetic on values of one type, with constants of that type: keeps the formulas readable.
struct Math {
  Graph& g;
  DType dtype;
  std::vector<int64_t> dims;

  Value c(double v) const { return g.constant(v, dtype, dims); }
  Value add(Value a, Value b) const { return g.binary("add", a, b); }
  Value sub(Value a, Value b) const { return g.binary("subtract", a, b); }
  Value mul(Value a, Value b) const { return g.binary("multiply", a, b); }
  Value div(Value a, Value b) const { return g.binary("divide", a, b); }
  Value max(Value a, Value b) const { return g.binary("maximum", a, b); }
  Value min(Value a, Value b) const { return g.binary("minimum", a, b); }
  Value neg(Value a) const { return g.unary("negate", a); }
  Value abs(Value a) const { return g.unary("abs", a); }
  Value exp(Value a) const { return g.unary("exponential", a); }
  Value expm1(Value a) const { return g.unary("exponential_minus_one", a); }
  Value log(Value a) const { return g.unary("log", a); }
  Value log1p(Value a) const { return g.unary("log_plus_one", a); }
  Value sqrt(Value a) const { return g.unary("sqrt", a); }
  Value sin(Value a) const { return g.unary("sine", a); }
  Value cos(Value a) const { return g.unary("cosine", a); }
  Value floor(Value a) const { return g.unary("floor", a); }
  Value round(Value a) const { return g.unary("round_nearest_even", a); }
  Value lt(Value a, Value b) const { return g.compare(a, b, Comparison::kLT); }
  Value le(Value a, Value b) const { return g.compare(a, b, Comparison::kLE); }
  Value gt(Value a, Value b) const { return g.compare(a, b, Comparison::kGT); }
  Value ge(Value a, Value b) const { return g.compare(a, b, Comparison::kGE); }
  Value eq(Value a, Value b) const { return g.compare(a, b, Comparison::kEQ); }
  Value ne(Value a, Value b) const { return g.compare(a, b, Comparison::kNE); }
  Value both(Value p, Value q) const { return g.binary("and", p, q); }
  Value either(Value p, Value q) const { return g.binary("or", p, q); }
  Value isnan(Value a) const { return ne(a, a); }
  Value select(Value p, Value a, Value b) const { return g.select(p, a, b); }
  // c0 + c1 x + c2 x^2 + ..., by Horner's rule.
  Value polynomial(Value x, const std::vector<double>& coefficients) const {
    Value r = c(coefficients.back());
    for (size_t i = coefficients.size() - 1; i-- > 0;) r = add(mul(r, x), c(coefficients[i]));
    return r;
  }
};

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }
DType opmath(const LoweringContext& ctx) { return accumulation_dtype(out(ctx).dtype); }
Math math(LoweringContext& ctx) { return Math{ctx.graph, opmath(ctx), out(ctx).dims}; }
// Argument i in the output's opmath type and shape.
Value operand(LoweringContext& ctx, size_t i) {
  return cast_to(ctx.graph, ctx.tensor(i), Type{opmath(ctx), out(ctx).dims});
}
Value finish(LoweringContext& ctx, Value v, size_t i = 0) { return cast_to(ctx.graph, v, out(ctx, i)); }

// The signed integer type as wide as a floating type, for work on its bits.
DType same_width_int(DType dtype) {
  switch (dtype) {
    case DType::kF64: return DType::kI64;
    case DType::kF32: return DType::kI32;
    default: return DType::kI16;  // bfloat16, float16
  }
}

// ---- Small elementwise ops --------------------------------------------------------------------------

// rsub.Tensor(self, other, alpha): other - alpha * self.
std::vector<Value> lower_rsub(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = operand(ctx, 0);
  if (!ctx.is_none(2) && ctx.real(2) != 1.0) self = g.binary("multiply", self, scalar_constant(ctx, 2, opmath(ctx), out(ctx).dims));
  return {finish(ctx, g.binary("subtract", operand(ctx, 1), self))};
}

// angle of a real number: pi for negatives, 0 otherwise, NaN kept.
std::vector<Value> lower_angle(LoweringContext& ctx) {
  Math m = math(ctx);
  Value x = operand(ctx, 0);
  return {finish(ctx, m.select(m.isnan(x), x, m.select(m.lt(x, m.c(0)), m.c(kPi), m.c(0))))};
}

// floor_divide: for floats, PyTorch's formula that rounds (a - fmod(a, b)) / b to the nearest integer
// after the floor correction, so that results are exact integers even where a / b rounds up; integers
// truncate and step down where the signs differ.
std::vector<Value> lower_floor_divide(LoweringContext& ctx) {
  Math m = math(ctx);
  Value a = operand(ctx, 0);
  Value b = operand(ctx, 1);
  Value zero = m.c(0);
  Value mod = m.g.binary("remainder", a, b);
  Value signs_differ = m.ne(m.lt(b, zero), m.lt(mod, zero));
  Value step_down = m.both(m.ne(mod, zero), signs_differ);
  if (!is_floating(opmath(ctx))) {
    Value q = m.div(a, b);
    return {finish(ctx, m.select(step_down, m.sub(q, m.c(1)), q))};
  }
  Value quotient = m.div(a, b);
  Value div = m.div(m.sub(a, mod), b);
  div = m.select(step_down, m.sub(div, m.c(1)), div);
  Value floored = m.floor(div);
  floored = m.select(m.gt(m.sub(div, floored), m.c(0.5)), m.add(floored, m.c(1)), floored);
  // A zero quotient takes the sign of a / b; division by zero gives a / b itself (inf or NaN).
  Value result = m.select(m.eq(div, zero), m.select(m.lt(quotient, zero), m.c(-0.0), m.c(0.0)), floored);
  return {finish(ctx, m.select(m.eq(b, zero), quotient, result))};
}

// fmax/fmin: like maximum/minimum, but a NaN loses to a number.
std::vector<Value> nan_ignoring(LoweringContext& ctx, bool largest) {
  Math m = math(ctx);
  Value a = operand(ctx, 0);
  Value b = operand(ctx, 1);
  Value r = largest ? m.max(a, b) : m.min(a, b);
  if (is_floating(opmath(ctx))) r = m.select(m.isnan(a), b, m.select(m.isnan(b), a, r));
  return {finish(ctx, r)};
}
std::vector<Value> lower_fmax(LoweringContext& ctx) { return nan_ignoring(ctx, true); }
std::vector<Value> lower_fmin(LoweringContext& ctx) { return nan_ignoring(ctx, false); }

// heaviside(self, values): values where self == 0, else 1 for positive and 0 for negative (and NaN).
std::vector<Value> lower_heaviside(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  Value x = cast_to(g, ctx.tensor(0), t);
  Value zero = g.constant_int(0, t.dtype, t.dims);
  Value step = g.convert(g.compare(x, zero, Comparison::kGT), t.dtype);
  return {g.select(g.compare(x, zero, Comparison::kEQ), cast_to(g, ctx.tensor(1), t), step)};
}

// signbit: the sign bit itself for floats (so -0.0 and -NaN count), x < 0 for signed integers.
std::vector<Value> lower_signbit(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type& t = g.type(x);
  if (t.dtype == DType::kBool || is_unsigned(t.dtype)) return {g.constant_int(0, DType::kBool, out(ctx).dims)};
  if (is_floating(t.dtype)) x = g.bitcast_convert(x, Type{same_width_int(t.dtype), t.dims});
  const DType int_type = g.type(x).dtype;
  return {g.compare(x, g.constant_int(0, int_type, t.dims), Comparison::kLT)};
}

// Layout of an IEEE binary format, for work on its bits.
struct FloatFormat {
  int mantissa_bits;
  int64_t exponent_mask;  // the biased exponent field, shifted down
  int64_t bias;
};
FloatFormat float_format(DType dtype) {
  if (dtype == DType::kF64) return {52, 0x7ff, 1023};
  return {23, 0xff, 127};  // float32, which 16-bit floats compute in
}

// frexp(self) -> (mantissa, exponent): self = mantissa * 2^exponent with |mantissa| in [0.5, 1); zeros,
// infinities and NaN give themselves and exponent 0, as C's frexp does. Works on the bits, so subnormals
// are exact whatever the compiled code's denormal mode.
std::vector<Value> lower_frexp(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType compute = opmath(ctx);
  const std::vector<int64_t>& dims = out(ctx).dims;
  const FloatFormat f = float_format(compute);
  const DType bits_type = same_width_int(compute);
  auto k = [&](int64_t v) { return g.constant_int(v, bits_type, dims); };
  auto shr = [&](Value v, int64_t n) { return g.binary("shift_right_logical", v, k(n)); };
  auto shl = [&](Value v, int64_t n) { return g.binary("shift_left", v, k(n)); };
  Value x = cast_to(g, ctx.tensor(0), Type{compute, dims});
  Value bits = g.bitcast_convert(x, Type{bits_type, dims});
  const int width = compute == DType::kF64 ? 64 : 32;
  const int64_t mantissa_mask = (int64_t{1} << f.mantissa_bits) - 1;
  Value field = g.binary("and", shr(bits, f.mantissa_bits), k(f.exponent_mask));
  Value mantissa_field = g.binary("and", bits, k(mantissa_mask));
  Value sign = g.binary("and", bits, k(std::numeric_limits<int64_t>::min() >> (64 - width)));
  // Normal numbers: the exponent field is replaced by the bias - 1, which puts the value in [0.5, 1).
  Value half_exponent = shl(k(f.bias - 1), f.mantissa_bits);
  Value normal_bits = g.binary("or", g.binary("or", sign, half_exponent), mantissa_field);
  Value normal_exponent = g.binary("subtract", field, k(f.bias - 1));
  // Subnormals: value = m * 2^(1 - bias - mantissa_bits); with the top set bit of m at position p, the
  // mantissa is m shifted up by (mantissa_bits - p), with its leading bit dropped, and the exponent is
  // p + 2 - bias - mantissa_bits.
  Value top = g.binary("subtract", k(width - 1), g.unary("count_leading_zeros", mantissa_field));
  Value shifted = g.binary("shift_left", mantissa_field, g.binary("subtract", k(f.mantissa_bits), top));
  Value sub_bits = g.binary("or", g.binary("or", sign, half_exponent), g.binary("and", shifted, k(mantissa_mask)));
  Value sub_exponent = g.binary("add", top, k(2 - f.bias - f.mantissa_bits));
  Value is_subnormal = g.binary("and", g.compare(field, k(0), Comparison::kEQ),
                                g.compare(mantissa_field, k(0), Comparison::kNE));
  Value passes_through = g.binary("or", g.compare(field, k(f.exponent_mask), Comparison::kEQ),
                                  g.compare(g.binary("or", field, mantissa_field), k(0), Comparison::kEQ));
  Value mantissa_bits = g.select(is_subnormal, sub_bits, normal_bits);
  Value exponent = g.select(is_subnormal, sub_exponent, normal_exponent);
  mantissa_bits = g.select(passes_through, bits, mantissa_bits);
  exponent = g.select(passes_through, k(0), exponent);
  Value mantissa = g.bitcast_convert(mantissa_bits, Type{compute, dims});
  return {finish(ctx, mantissa, 0), g.convert(exponent, out(ctx, 1).dtype)};
}

// nextafter(self, other): the next representable value after self towards other, in self's own type.
// Works on the bits (an integer step of the bit pattern moves one ulp in magnitude), with the order
// comparisons done on sign-magnitude integers, so subnormals are exact whatever the denormal mode.
std::vector<Value> lower_nextafter(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const DType int_type = same_width_int(t.dtype);
  auto k = [&](int64_t v) { return g.constant_int(v, int_type, t.dims); };
  Value a = g.bitcast_convert(cast_to(g, ctx.tensor(0), t), Type{int_type, t.dims});
  Value b = g.bitcast_convert(cast_to(g, ctx.tensor(1), t), Type{int_type, t.dims});
  const int width = t.dtype == DType::kF64 ? 64 : (t.dtype == DType::kF32 ? 32 : 16);
  const int64_t magnitude_mask = width == 64 ? std::numeric_limits<int64_t>::max() : (int64_t{1} << (width - 1)) - 1;
  const int64_t sign_bit = -magnitude_mask - 1;
  const int64_t infinity_bits = t.dtype == DType::kF64 ? 0x7ff0000000000000 : (t.dtype == DType::kF32 ? 0x7f800000
                                : (t.dtype == DType::kF16 ? 0x7c00 : 0x7f80));
  Value a_mag = g.binary("and", a, k(magnitude_mask));
  Value b_mag = g.binary("and", b, k(magnitude_mask));
  auto ordered = [&](Value bits, Value mag) {
    return g.select(g.compare(bits, k(0), Comparison::kLT), g.unary("negate", mag), mag);
  };
  Value a_ord = ordered(a, a_mag);
  Value b_ord = ordered(b, b_mag);
  Value any_nan = g.binary("or", g.compare(a_mag, k(infinity_bits), Comparison::kGT),
                           g.compare(b_mag, k(infinity_bits), Comparison::kGT));
  Value up = g.compare(a_ord, b_ord, Comparison::kLT);
  Value positive = g.compare(a_ord, k(0), Comparison::kGT);
  Value stepped = g.select(g.compare(up, positive, Comparison::kEQ), g.binary("add", a, k(1)),
                           g.binary("subtract", a, k(1)));
  Value from_zero = g.binary("or", g.binary("and", b, k(sign_bit)), k(1));  // the smallest subnormal, b's sign
  Value r = g.select(g.compare(a_mag, k(0), Comparison::kEQ), from_zero, stepped);
  r = g.select(g.compare(a_ord, b_ord, Comparison::kEQ), b, r);
  Value nan_bits = k(infinity_bits | (int64_t{1} << (t.dtype == DType::kF64 ? 51 : (t.dtype == DType::kF32 ? 22 : (t.dtype == DType::kF16 ? 9 : 6)))));
  r = g.select(any_nan, nan_bits, r);
  return {g.bitcast_convert(r, t)};
}

// logaddexp2(a, b) = max + log2(1 + 2^-|a - b|).
std::vector<Value> lower_logaddexp2(LoweringContext& ctx) {
  Math m = math(ctx);
  Value a = operand(ctx, 0);
  Value b = operand(ctx, 1);
  const double ln2 = std::log(2.0);
  Value gap = m.mul(m.neg(m.abs(m.sub(a, b))), m.c(ln2));
  Value r = m.add(m.max(a, b), m.div(m.log1p(m.exp(gap)), m.c(ln2)));
  // Equal infinities make the gap NaN; the answer is that infinity.
  Value equal_infinities = m.both(m.eq(a, b), m.eq(m.abs(a), m.c(kInf)));
  return {finish(ctx, m.select(equal_infinities, a, r))};
}

// softplus(self, beta, threshold): log1p(exp(beta x)) / beta, and x itself where beta x > threshold.
std::vector<Value> lower_softplus(LoweringContext& ctx) {
  Math m = math(ctx);
  Value x = operand(ctx, 0);
  Value beta = m.c(ctx.real(1));
  Value scaled = m.mul(x, beta);
  Value smooth = m.div(m.log1p(m.exp(scaled)), beta);
  return {finish(ctx, m.select(m.gt(scaled, m.c(ctx.real(2))), x, smooth))};
}

// softplus_backward(grad_output, self, beta, threshold): grad * sigmoid(beta x), grad past the threshold.
std::vector<Value> lower_softplus_backward(LoweringContext& ctx) {
  Math m = math(ctx);
  Value grad = operand(ctx, 0);
  Value scaled = m.mul(operand(ctx, 1), m.c(ctx.real(2)));
  Value z = m.exp(scaled);
  Value smooth = m.div(m.mul(grad, z), m.add(z, m.c(1)));
  return {finish(ctx, m.select(m.gt(scaled, m.c(ctx.real(3))), grad, smooth))};
}

// logit(self, eps?): log(x / (1 - x)), with x first clamped to [eps, 1 - eps] when eps is given.
std::vector<Value> lower_logit(LoweringContext& ctx) {
  Math m = math(ctx);
  Value x = operand(ctx, 0);
  if (!ctx.is_none(1)) {
    const double eps = ctx.real(1);
    x = m.select(m.lt(x, m.c(eps)), m.c(eps), m.select(m.gt(x, m.c(1 - eps)), m.c(1 - eps), x));
  }
  return {finish(ctx, m.log(m.div(x, m.sub(m.c(1), x))))};
}

// logit_backward(grad_output, self, eps?): grad / (x (1 - x)) inside the domain; outside it NaN without
// eps and 0 with eps (the clamp's flat part).
std::vector<Value> lower_logit_backward(LoweringContext& ctx) {
  Math m = math(ctx);
  Value grad = operand(ctx, 0);
  Value x = operand(ctx, 1);
  const bool has_eps = !ctx.is_none(2);
  const double low = has_eps ? ctx.real(2) : 0.0;
  Value outside = m.either(m.lt(x, m.c(low)), m.gt(x, m.c(1 - low)));
  Value inside = m.div(grad, m.mul(x, m.sub(m.c(1), x)));
  return {finish(ctx, m.select(outside, m.c(has_eps ? 0.0 : kNaN), inside))};
}

// sinc(x) = sin(pi x) / (pi x), 1 at 0.
std::vector<Value> lower_sinc(LoweringContext& ctx) {
  Math m = math(ctx);
  Value x = operand(ctx, 0);
  Value px = m.mul(x, m.c(kPi));
  return {finish(ctx, m.select(m.eq(x, m.c(0)), m.c(1), m.div(m.sin(px), px)))};
}

std::vector<Value> lower_erfc(LoweringContext& ctx) {
  Value x = operand(ctx, 0);
  return {finish(ctx, ctx.graph.chlo("erfc", {x}, ctx.graph.type(x)))};
}

// entr(x) = -x log x for x > 0, 0 at 0, -inf for negatives, NaN kept.
std::vector<Value> lower_entr(LoweringContext& ctx) {
  Math m = math(ctx);
  Value x = operand(ctx, 0);
  Value r = m.neg(m.mul(x, m.log(x)));
  r = m.select(m.eq(x, m.c(0)), m.c(0), r);
  r = m.select(m.lt(x, m.c(0)), m.c(-kInf), r);
  return {finish(ctx, m.select(m.isnan(x), x, r))};
}

// xlog1py(x, y) = x log1p(y), 0 where x == 0 unless y is NaN.
std::vector<Value> lower_xlog1py(LoweringContext& ctx) {
  Math m = math(ctx);
  Value x = operand(ctx, 0);
  Value y = operand(ctx, 1);
  Value r = m.select(m.eq(x, m.c(0)), m.c(0), m.mul(x, m.log1p(y)));
  return {finish(ctx, m.select(m.isnan(y), y, r))};
}

// _logcumsumexp(self, dim): an inclusive scan whose combiner is logaddexp, as a reduce_window spanning the
// whole dim, padded on the low side with -inf (the combiner's identity).
std::vector<Value> lower_logcumsumexp(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType compute = opmath(ctx);
  Value x = g.convert(ctx.tensor(0), compute);
  const Type t = g.type(x);
  if (t.rank() == 0 || t.numel() == 0) return {finish(ctx, x)};
  const int64_t dim = wrap_dim(ctx.integer(1), t.rank());
  const int64_t n = t.dims[static_cast<size_t>(dim)];
  std::vector<int64_t> window(t.dims.size(), 1), strides(t.dims.size(), 1);
  window[static_cast<size_t>(dim)] = n;
  std::string padding = "dense<[";
  for (int64_t i = 0; i < t.rank(); ++i) {
    padding += std::string(i ? ", " : "") + "[" + std::to_string(i == dim ? n - 1 : 0) + ", 0]";
  }
  padding += "]> : tensor<" + std::to_string(t.rank()) + "x2xi64>";
  const std::string combiner = g.region({Type{compute, {}}, Type{compute, {}}}, [&](const std::vector<Value>& s) {
    Math m{g, compute, {}};
    Value gap = m.neg(m.abs(m.sub(s[0], s[1])));
    Value r = m.add(m.max(s[0], s[1]), m.log1p(m.exp(gap)));
    Value equal_infinities = m.both(m.eq(s[0], s[1]), m.eq(m.abs(s[0]), m.c(kInf)));  // the gap is NaN
    return std::vector<Value>{m.select(equal_infinities, s[0], r)};
  });
  const std::string attributes = "window_dimensions = " + ir::dense_i64_array(window) +
                                 ", window_strides = " + ir::dense_i64_array(strides) + ", padding = " + padding;
  Value scan = g.op_multi("stablehlo.reduce_window", {x, g.constant(-kInf, compute)}, {t}, attributes, combiner)[0];
  return {finish(ctx, scan)};
}

// ---- Polygamma ----------------------------------------------------------------------------------------

// Bernoulli numbers B_2, B_4, ..., B_24 (Abramowitz & Stegun, Table 23.2).
const std::vector<double> kBernoulli = {1.0 / 6,        -1.0 / 30,         1.0 / 42,          -1.0 / 30,
                                        5.0 / 66,       -691.0 / 2730,     7.0 / 6,           -3617.0 / 510,
                                        43867.0 / 798,  -174611.0 / 330,   854513.0 / 138,    -236364091.0 / 2730};

double factorial(int64_t n) {
  double f = 1;
  for (int64_t i = 2; i <= n; ++i) f *= static_cast<double>(i);
  return f;
}

// psi^(n)(y) for large y by its asymptotic expansion (A&S 6.3.18 for n = 0, 6.4.11 for n >= 1). At
// y >= 10 + n the twelve Bernoulli terms leave an error below float64's rounding.
Value polygamma_asymptotic(const Math& m, int64_t n, Value y) {
  Value t = m.div(m.c(1), y);
  Value t2 = m.mul(t, t);
  std::vector<double> coefficients;
  if (n == 0) {
    for (size_t k = 1; k <= kBernoulli.size(); ++k) coefficients.push_back(kBernoulli[k - 1] / (2.0 * static_cast<double>(k)));
    Value series = m.mul(t2, m.polynomial(t2, coefficients));
    return m.sub(m.sub(m.log(y), m.mul(m.c(0.5), t)), series);
  }
  // Relative to the leading term (n-1)!/y^n, the k-th term is B_2k * C(2k + n - 1, 2k) / y^2k.
  double binomial = 1;
  for (size_t k = 1; k <= kBernoulli.size(); ++k) {
    const double j = 2.0 * static_cast<double>(k);
    const double nn = static_cast<double>(n);
    binomial *= (j + nn - 2) * (j + nn - 1) / ((j - 1) * j);
    coefficients.push_back(kBernoulli[k - 1] * binomial);
  }
  Value series = m.add(m.add(m.c(1), m.mul(m.c(0.5 * static_cast<double>(n)), t)), m.mul(t2, m.polynomial(t2, coefficients)));
  Value leading = m.mul(m.c((n % 2 ? 1.0 : -1.0) * factorial(n - 1)), m.g.binary("power", t, m.c(static_cast<double>(n))));
  return m.mul(leading, series);
}

// d^n/dx^n cot(pi x) = pi^n P_n(cot(pi x)), with P_0(c) = c and P_{k+1} = -(1 + c^2) P_k'. Coefficients of
// P_n, lowest power first.
std::vector<double> cot_derivative_polynomial(int64_t n) {
  std::vector<double> p = {0, 1};
  for (int64_t k = 0; k < n; ++k) {
    std::vector<double> derivative(p.size() > 1 ? p.size() - 1 : 1, 0.0);
    for (size_t i = 1; i < p.size(); ++i) derivative[i - 1] = static_cast<double>(i) * p[i];
    std::vector<double> next(derivative.size() + 2, 0.0);
    for (size_t i = 0; i < derivative.size(); ++i) {
      next[i] -= derivative[i];
      next[i + 2] -= derivative[i];
    }
    p = next;
  }
  return p;
}

// psi^(n)(x), the n-th derivative of digamma, with CPU PyTorch's conventions at the poles (x a non-positive
// integer): digamma gives -inf at +0, +inf at -0 and NaN at negative integers; n >= 1 gives +inf for odd n
// and -inf for even n. Negative x reflect (A&S 6.4.7: psi^(n)(x) = (-1)^n psi^(n)(1 - x) - pi d^n/dx^n
// cot(pi x)); then the recurrence psi^(n)(y) = psi^(n)(y + 1) + (-1)^(n+1) n! / y^(n+1) moves y up to
// where the asymptotic expansion is accurate.
Value polygamma(const Math& m, int64_t n, Value x) {
  Graph& g = m.g;
  Value zero = m.c(0);
  Value reflect = m.lt(x, zero);
  Value y = m.select(reflect, m.sub(m.c(1), x), x);
  const double threshold = 10.0 + static_cast<double>(n);
  const double term_scale = (n % 2 ? 1.0 : -1.0) * factorial(n);
  auto state = g.while_loop(
      {g.constant_int(0, DType::kI64), y, zero},
      [&](const std::vector<Value>& s) {
        return std::vector<Value>{
            g.compare(s[0], g.constant_int(static_cast<int64_t>(threshold), DType::kI64), Comparison::kLT)};
      },
      [&](const std::vector<Value>& s) {
        Value below = m.lt(s[1], m.c(threshold));
        Value term = n == 0 ? m.div(m.c(-1), s[1])
                            : m.mul(m.c(term_scale), g.binary("power", s[1], m.c(-static_cast<double>(n + 1))));
        return std::vector<Value>{g.binary("add", s[0], g.constant_int(1, DType::kI64)),
                                  m.select(below, m.add(s[1], m.c(1)), s[1]),
                                  m.select(below, m.add(s[2], term), s[2])};
      });
  Value positive = m.add(state[2], polygamma_asymptotic(m, n, state[1]));
  // cot(pi x) from r, x's distance to the nearest integer (exact), so the arguments stay small. Past
  // |r| = 1/4, cos(pi r) is taken as sin(pi (1/2 - |r|)), whose argument is exact too: at half-integers
  // the cotangent is then exactly 0.
  Value r = m.sub(x, m.round(x));
  Value abs_r = m.abs(r);
  Value cos_pi_r = m.select(m.le(abs_r, m.c(0.25)), m.cos(m.mul(m.c(kPi), r)), m.sin(m.mul(m.c(kPi), m.sub(m.c(0.5), abs_r))));
  Value cot = m.div(cos_pi_r, m.sin(m.mul(m.c(kPi), r)));
  Value cot_term = m.mul(m.c(std::pow(kPi, static_cast<double>(n + 1))), m.polynomial(cot, cot_derivative_polynomial(n)));
  if (n == 1) {
    // CPU's trigamma reflects with pi^2 / sin^2(pi x), pi x rounded in the input's precision, which for
    // float32 moves the result by up to ~1e-4 relative (at |x| ~ 10) from the exact value; matching CPU
    // takes the same rounding.
    Value sin_pi_x = m.sin(m.mul(m.c(kPi), x));
    cot_term = m.neg(m.div(m.c(kPi * kPi), m.mul(sin_pi_x, sin_pi_x)));
  }
  Value reflected = m.sub(n % 2 ? m.neg(positive) : positive, cot_term);
  Value result = m.select(reflect, reflected, positive);
  Value pole = m.both(m.le(x, zero), m.eq(x, m.floor(x)));
  Value pole_value = n == 0 ? m.select(m.eq(x, zero), m.div(m.c(-1), x), m.c(kNaN)) : m.c(n % 2 ? kInf : -kInf);
  result = m.select(pole, pole_value, result);
  // CPU's conventions at the infinities the formulas above do not reach: its trigamma gives NaN at -inf,
  // its higher orders (through the Hurwitz zeta function) NaN at +inf.
  if (n == 1) result = m.select(m.eq(x, m.c(-kInf)), m.c(kNaN), result);
  if (n >= 2) result = m.select(m.eq(x, m.c(kInf)), m.c(kNaN), result);
  return result;
}

// polygamma(n, self)
std::vector<Value> lower_polygamma(LoweringContext& ctx) {
  return {finish(ctx, polygamma(math(ctx), ctx.integer(0), operand(ctx, 1)))};
}

std::vector<Value> lower_digamma(LoweringContext& ctx) { return {finish(ctx, polygamma(math(ctx), 0, operand(ctx, 0)))}; }

// ---- Orthogonal polynomials ----------------------------------------------------------------------------

// A polynomial family evaluated by its three-term recurrence: P_0 = 1, P_1 = first(x), and for j = 1, 2, ...
// P_{j+1} = step(j, x, P_{j-1}, P_j). CPU PyTorch's special cases (n < 0, the interval ends, the
// trigonometric forms it uses for large n) are applied by each op after the recurrence.
struct Recurrence {
  Value (*first)(const Math& m, Value x);
  Value (*step)(const Math& m, Value j, Value x, Value p, Value q);
};

struct PolynomialArgs {
  Math m;
  Value x;        // opmath type
  Value n;        // int64, truncated as CPU's static_cast does
  Value n_real;   // n in the opmath type
};

PolynomialArgs polynomial_args(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value n = cast_to(g, ctx.tensor(1), Type{ctx.type_of(1).dtype, out(ctx).dims});
  Value n_int = g.convert(n, DType::kI64);
  return {math(ctx), operand(ctx, 0), n_int, g.convert(n_int, opmath(ctx))};
}

// P_n(x) for every element, looping up to the largest n present.
Value recurrence(const PolynomialArgs& a, const Recurrence& r) {
  const Math& m = a.m;
  Graph& g = m.g;
  const std::vector<int64_t>& dims = m.dims;
  Value largest = g.reduce(a.n, g.constant_int(0, DType::kI64), dim_range(0, static_cast<int64_t>(dims.size())),
                           ir::Reducer::kMax);
  auto state = g.while_loop(
      {g.constant_int(1, DType::kI64), m.c(1), r.first(m, a.x)},
      [&](const std::vector<Value>& s) { return std::vector<Value>{g.compare(s[0], largest, Comparison::kLT)}; },
      [&](const std::vector<Value>& s) {
        Value j = g.broadcast_in_dim(g.convert(s[0], m.dtype), dims, {});
        Value next = r.step(m, j, a.x, s[1], s[2]);
        Value active = g.compare(g.broadcast_in_dim(s[0], dims, {}), a.n, Comparison::kLT);
        return std::vector<Value>{g.binary("add", s[0], g.constant_int(1, DType::kI64)), m.select(active, s[2], s[1]),
                                  m.select(active, next, s[2])};
      });
  return m.select(m.g.compare(a.n, g.constant_int(0, DType::kI64, dims), Comparison::kEQ), m.c(1), state[2]);
}

Value chebyshev_step(const Math& m, Value, Value x, Value p, Value q) { return m.sub(m.mul(m.add(x, x), q), p); }
Value first_t(const Math&, Value x) { return x; }
Value first_u(const Math& m, Value x) { return m.add(x, x); }
Value first_v(const Math& m, Value x) { return m.sub(m.add(x, x), m.c(1)); }
Value first_w(const Math& m, Value x) { return m.add(m.add(x, x), m.c(1)); }

struct PolynomialCases {
  const Math& m;
  const PolynomialArgs& a;
  Value n_even() const {
    Graph& g = m.g;
    Value two = g.constant_int(2, DType::kI64, m.dims);
    return g.compare(g.binary("remainder", a.n, two), g.constant_int(0, DType::kI64, m.dims), Comparison::kEQ);
  }
  Value n_above(int64_t k) const { return m.g.compare(a.n, m.g.constant_int(k, DType::kI64, m.dims), Comparison::kGT); }
  Value n_negative() const { return m.g.compare(a.n, m.g.constant_int(0, DType::kI64, m.dims), Comparison::kLT); }
  Value sign_by_parity(Value v) const { return m.select(n_even(), v, m.neg(v)); }
  Value acos(Value x) const { return m.g.chlo("acos", {x}, m.g.type(x)); }
};

enum class Chebyshev { kT, kU, kV, kW };

// Chebyshev polynomials of the four kinds at y (y = x, or 2x - 1 for the shifted ones): the recurrence, the
// trigonometric forms (A&S 22.3.15-16; V and W from Mason & Handscomb, "Chebyshev Polynomials", 1.2.3) where
// CPU uses them (|y| < 1 and n above a threshold), and the values at the interval ends. `at_one` and
// `at_minus_one` say where y is exactly 1 and -1, tested on x as CPU does.
Value chebyshev(const PolynomialArgs& a, Chebyshev kind, Value y, Value at_one, Value at_minus_one,
                int64_t trig_threshold) {
  const Math& m = a.m;
  PolynomialCases cases{m, a};
  PolynomialArgs shifted = a;
  shifted.x = y;
  static const Recurrence kRecurrences[] = {{&first_t, &chebyshev_step}, {&first_u, &chebyshev_step},
                                            {&first_v, &chebyshev_step}, {&first_w, &chebyshev_step}};
  Value r = recurrence(shifted, kRecurrences[static_cast<int>(kind)]);
  Value theta = cases.acos(y);
  Value n = a.n_real;
  Value n1 = m.add(n, m.c(1));
  Value two_n1 = m.add(m.add(n, n), m.c(1));
  Value trig, one_value, minus_one_value;
  switch (kind) {
    case Chebyshev::kT:
      trig = m.cos(m.mul(n, theta));
      one_value = m.c(1);
      minus_one_value = cases.sign_by_parity(m.c(1));
      break;
    case Chebyshev::kU: {
      Value sin_theta = m.sin(theta);
      trig = m.select(m.ne(sin_theta, m.c(0)), m.div(m.sin(m.mul(n1, theta)), sin_theta),
                      m.div(m.mul(n1, m.cos(m.mul(n1, theta))), y));
      one_value = n1;
      minus_one_value = cases.sign_by_parity(n1);
      break;
    }
    case Chebyshev::kV: {
      Value half = m.mul(theta, m.c(0.5));
      trig = m.select(m.ne(m.sin(half), m.c(1)), m.div(m.cos(m.mul(m.add(n, m.c(0.5)), theta)), m.cos(half)),
                      cases.sign_by_parity(two_n1));
      one_value = m.c(1);
      minus_one_value = cases.sign_by_parity(two_n1);
      break;
    }
    case Chebyshev::kW: {
      Value half = m.mul(theta, m.c(0.5));
      trig = m.select(m.ne(m.cos(half), m.c(1)), m.div(m.sin(m.mul(m.add(n, m.c(0.5)), theta)), m.sin(half)),
                      m.select(m.gt(y, m.c(0)), two_n1, cases.sign_by_parity(m.c(1))));
      one_value = two_n1;
      minus_one_value = cases.sign_by_parity(m.c(1));
      break;
    }
  }
  r = m.select(m.both(cases.n_above(trig_threshold), m.lt(m.abs(y), m.c(1))), trig, r);
  r = m.select(at_minus_one, minus_one_value, r);
  r = m.select(at_one, one_value, r);
  return m.select(cases.n_negative(), m.c(0), r);
}

std::vector<Value> chebyshev_op(LoweringContext& ctx, Chebyshev kind, int64_t trig_threshold) {
  PolynomialArgs a = polynomial_args(ctx);
  const Math& m = a.m;
  return {finish(ctx, chebyshev(a, kind, a.x, m.eq(a.x, m.c(1)), m.eq(a.x, m.c(-1)), trig_threshold))};
}
std::vector<Value> lower_chebyshev_t(LoweringContext& ctx) { return chebyshev_op(ctx, Chebyshev::kT, 6); }
std::vector<Value> lower_chebyshev_u(LoweringContext& ctx) { return chebyshev_op(ctx, Chebyshev::kU, 8); }
std::vector<Value> lower_chebyshev_v(LoweringContext& ctx) { return chebyshev_op(ctx, Chebyshev::kV, 8); }
std::vector<Value> lower_chebyshev_w(LoweringContext& ctx) { return chebyshev_op(ctx, Chebyshev::kW, 8); }

// The shifted polynomials are the plain ones at 2x - 1.
std::vector<Value> shifted_chebyshev_op(LoweringContext& ctx, Chebyshev kind, int64_t trig_threshold) {
  PolynomialArgs a = polynomial_args(ctx);
  const Math& m = a.m;
  Value y = m.sub(m.add(a.x, a.x), m.c(1));
  return {finish(ctx, chebyshev(a, kind, y, m.eq(a.x, m.c(1)), m.eq(a.x, m.c(0)), trig_threshold))};
}
std::vector<Value> lower_shifted_chebyshev_t(LoweringContext& ctx) { return shifted_chebyshev_op(ctx, Chebyshev::kT, 6); }
std::vector<Value> lower_shifted_chebyshev_u(LoweringContext& ctx) { return shifted_chebyshev_op(ctx, Chebyshev::kU, 6); }
std::vector<Value> lower_shifted_chebyshev_v(LoweringContext& ctx) { return shifted_chebyshev_op(ctx, Chebyshev::kV, 6); }
std::vector<Value> lower_shifted_chebyshev_w(LoweringContext& ctx) { return shifted_chebyshev_op(ctx, Chebyshev::kW, 4); }

// Physicists' Hermite: H_{j+1} = 2x H_j - 2j H_{j-1}; probabilists': He_{j+1} = x He_j - j He_{j-1}.
Value hermite_h_step(const Math& m, Value j, Value x, Value p, Value q) {
  return m.sub(m.mul(m.add(x, x), q), m.mul(m.add(j, j), p));
}
Value hermite_he_step(const Math& m, Value j, Value x, Value p, Value q) { return m.sub(m.mul(x, q), m.mul(j, p)); }
// Laguerre: (j + 1) L_{j+1} = (2j + 1 - x) L_j - j L_{j-1}.
Value first_laguerre(const Math& m, Value x) { return m.sub(m.c(1), x); }
Value laguerre_step(const Math& m, Value j, Value x, Value p, Value q) {
  Value a = m.add(m.add(j, j), m.sub(m.c(1), x));
  return m.div(m.sub(m.mul(a, q), m.mul(j, p)), m.add(j, m.c(1)));
}
// Legendre: (j + 1) P_{j+1} = (2j + 1) x P_j - j P_{j-1}.
Value legendre_step(const Math& m, Value j, Value x, Value p, Value q) {
  Value a = m.add(m.add(j, j), m.c(1));
  return m.div(m.sub(m.mul(m.mul(a, x), q), m.mul(j, p)), m.add(j, m.c(1)));
}

std::vector<Value> lower_hermite_h(LoweringContext& ctx) {
  PolynomialArgs a = polynomial_args(ctx);
  PolynomialCases cases{a.m, a};
  Value r = recurrence(a, {&first_u, &hermite_h_step});
  return {finish(ctx, a.m.select(cases.n_negative(), a.m.c(0), r))};
}

std::vector<Value> lower_hermite_he(LoweringContext& ctx) {
  PolynomialArgs a = polynomial_args(ctx);
  PolynomialCases cases{a.m, a};
  Value r = recurrence(a, {&first_t, &hermite_he_step});
  return {finish(ctx, a.m.select(cases.n_negative(), a.m.c(0), r))};
}

std::vector<Value> lower_laguerre_l(LoweringContext& ctx) {
  PolynomialArgs a = polynomial_args(ctx);
  const Math& m = a.m;
  PolynomialCases cases{m, a};
  Value r = recurrence(a, {&first_laguerre, &laguerre_step});
  r = m.select(m.eq(a.x, m.c(0)), m.c(1), r);
  return {finish(ctx, m.select(cases.n_negative(), m.c(0), r))};
}

std::vector<Value> lower_legendre_p(LoweringContext& ctx) {
  PolynomialArgs a = polynomial_args(ctx);
  const Math& m = a.m;
  PolynomialCases cases{m, a};
  Value r = recurrence(a, {&first_t, &legendre_step});
  r = m.select(m.eq(a.x, m.c(-1)), cases.sign_by_parity(m.c(1)), r);
  r = m.select(m.eq(a.x, m.c(1)), m.c(1), r);
  return {finish(ctx, m.select(cases.n_negative(), m.c(0), r))};
}

// ---- Error-function relatives ---------------------------------------------------------------------------

Value erfc(const Math& m, Value x) { return m.g.chlo("erfc", {x}, m.g.type(x)); }
Value erf(const Math& m, Value x) { return m.g.chlo("erf", {x}, m.g.type(x)); }

// exp(x^2) without the rounding of x^2: x = high + low with `high` keeping half the mantissa, so high^2 is
// exact and x^2 = high^2 + low (x + high) splits into an exact part and a small one.
Value exp_of_square(const Math& m, Value x) {
  Graph& g = m.g;
  const bool wide = m.dtype == DType::kF64;
  const DType bits_type = wide ? DType::kI64 : DType::kI32;
  const int64_t low_bits = wide ? 27 : 12;
  Value bits = g.bitcast_convert(x, Type{bits_type, m.dims});
  Value mask = g.constant_int(~((int64_t{1} << low_bits) - 1), bits_type, m.dims);
  Value high = g.bitcast_convert(g.binary("and", bits, mask), Type{m.dtype, m.dims});
  Value low = m.sub(x, high);
  return m.mul(m.exp(m.mul(high, high)), m.exp(m.mul(low, m.add(x, high))));
}

// erfcx(x) = exp(x^2) erfc(x). Below 9 directly (with an exact square); from 9 on, where erfc underflows in
// float32, by the asymptotic series 1/(x sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2x^2)^k (A&S 7.1.23), whose
// 20 terms leave an error below 1e-20 there.
Value erfcx(const Math& m, Value x) {
  std::vector<double> coefficients = {1.0};
  double double_factorial = 1;
  for (int k = 1; k <= 20; ++k) {
    double_factorial *= 2.0 * k - 1;
    coefficients.push_back((k % 2 ? -1.0 : 1.0) * double_factorial);
  }
  Value u = m.div(m.c(0.5), m.mul(x, x));
  Value asymptotic = m.div(m.polynomial(u, coefficients), m.mul(x, m.c(std::sqrt(kPi))));
  Value direct = m.select(m.eq(x, m.c(-kInf)), m.c(kInf), m.mul(exp_of_square(m, x), erfc(m, x)));
  return m.select(m.ge(x, m.c(9)), asymptotic, direct);
}

std::vector<Value> lower_erfcx(LoweringContext& ctx) { return {finish(ctx, erfcx(math(ctx), operand(ctx, 0)))}; }

// log Phi(x) for the standard normal CDF Phi, through erfcx, valid for every x that is not large positive:
// log(erfcx(-x / sqrt 2) / 2) - x^2 / 2.
Value log_ndtr_through_erfcx(const Math& m, Value x) {
  Value e = erfcx(m, m.mul(x, m.c(-1 / std::sqrt(2.0))));
  return m.sub(m.log(m.mul(e, m.c(0.5))), m.mul(m.mul(x, x), m.c(0.5)));
}

// log_ndtr(x): through erfcx below -1 (where Phi underflows), log1p(-erfc(x / sqrt 2) / 2) above.
std::vector<Value> lower_log_ndtr(LoweringContext& ctx) {
  Math m = math(ctx);
  Value x = operand(ctx, 0);
  Value upper = m.log1p(m.mul(erfc(m, m.mul(x, m.c(1 / std::sqrt(2.0)))), m.c(-0.5)));
  return {finish(ctx, m.select(m.lt(x, m.c(-1)), log_ndtr_through_erfcx(m, x), upper))};
}

// ndtri(p), the inverse of Phi. With q = min(p, 1 - p) (exact), the lower-tail root x <= 0 of Phi(x) = q
// is found by Newton's method from a first guess, and mirrored for p > 1/2:
// - q > 1/4: guess sqrt(2) erfinv(2p - 1), refined on erf(x / sqrt 2) = 2p - 1 (2p - 1 is exact there, so
//   results near p = 1/2 keep their relative accuracy);
// - q <= 1/4: guess from A&S 26.2.23 (error < 4.5e-4), refined on log Phi(x) = log q, whose slope
//   phi/Phi = 1 / (sqrt(pi/2) erfcx(-x / sqrt 2)) stays representable far into the tail.
std::vector<Value> lower_ndtri(LoweringContext& ctx) {
  Math m = math(ctx);
  Value p = operand(ctx, 0);
  Value upper_half = m.gt(p, m.c(0.5));
  Value q = m.select(upper_half, m.sub(m.c(1), p), p);
  // Central region, in terms of the upper-half value directly: erf(x / sqrt 2) = 2p - 1.
  Value target = m.sub(m.add(p, p), m.c(1));
  Value central = m.mul(m.g.chlo("erf_inv", {target}, m.g.type(target)), m.c(std::sqrt(2.0)));
  for (int i = 0; i < 2; ++i) {
    Value residual = m.sub(erf(m, m.mul(central, m.c(1 / std::sqrt(2.0)))), target);
    Value slope = m.mul(m.c(std::sqrt(2 / kPi)), m.exp(m.mul(m.mul(central, central), m.c(-0.5))));
    central = m.sub(central, m.div(residual, slope));
  }
  // Tail region.
  Value t = m.sqrt(m.mul(m.c(-2), m.log(q)));
  Value numerator = m.polynomial(t, {2.515517, 0.802853, 0.010328});
  Value denominator = m.polynomial(t, {1.0, 1.432788, 0.189269, 0.001308});
  Value tail = m.neg(m.sub(t, m.div(numerator, denominator)));
  Value log_q = m.log(q);
  for (int i = 0; i < 4; ++i) {
    Value residual = m.sub(log_ndtr_through_erfcx(m, tail), log_q);
    Value inverse_slope = m.mul(m.c(std::sqrt(kPi / 2)), erfcx(m, m.mul(tail, m.c(-1 / std::sqrt(2.0)))));
    tail = m.sub(tail, m.mul(residual, inverse_slope));
  }
  tail = m.select(upper_half, m.neg(tail), tail);
  Value r = m.select(m.gt(q, m.c(0.25)), central, tail);
  r = m.select(m.eq(p, m.c(0)), m.c(-kInf), r);
  r = m.select(m.eq(p, m.c(1)), m.c(kInf), r);
  r = m.select(m.eq(p, m.c(0.5)), m.c(0), r);
  return {finish(ctx, m.select(m.either(m.lt(p, m.c(0)), m.gt(p, m.c(1))), m.c(kNaN), r))};
}

// ---- Modified Bessel functions I and K of orders 0 and 1 ---------------------------------------------

constexpr double kEulerGamma = 0.57721566490153286061;

// Hankel's asymptotic coefficients a_k(nu) = prod_{j=1..k} (4 nu^2 - (2j - 1)^2) / (k! 8^k) (A&S 9.7.1-2),
// k = 0..count-1, with (-1)^k folded in when `alternate`.
std::vector<double> hankel_coefficients(int nu, int count, bool alternate) {
  std::vector<double> a = {1.0};
  for (int k = 1; k < count; ++k) {
    const double odd = 2.0 * k - 1;
    a.push_back(a.back() * (4.0 * nu * nu - odd * odd) / (8.0 * k) * (alternate ? -1.0 : 1.0));
  }
  return a;
}

// sum_k (a^2/4)^k / (k! (k + nu)!) times (a/2)^nu: the power series of I_nu (A&S 9.6.10); 40 terms reach
// float64 precision up to a = 20. Nested by the ratio of successive terms, z / (k (k + nu)), so that no
// coefficient underflows in float32.
Value bessel_i_series(const Math& m, int nu, Value a) {
  Value z = m.mul(m.mul(a, a), m.c(0.25));
  Value series = m.c(1);
  for (int k = 40; k >= 1; --k) series = m.add(m.c(1), m.mul(series, m.mul(z, m.c(1.0 / (k * (k + nu))))));
  if (nu == 0) return series;
  return m.mul(series, m.mul(a, m.c(0.5)));
}

// The large-argument threshold: past 20 the 25-term Hankel expansions of I and K are below float64's
// rounding (their smallest term is about e^-2x).
constexpr double kHankelThreshold = 20;

// I_nu(a) for a = |x|, or e^-a I_nu(a) when `scaled`: the power series up to 20, Hankel's expansion
// e^a / sqrt(2 pi a) sum_k (-1)^k a_k / a^k (A&S 9.7.1) beyond.
Value bessel_i(const Math& m, int nu, Value a, bool scaled) {
  Value series = bessel_i_series(m, nu, a);
  if (scaled) series = m.mul(series, m.exp(m.neg(a)));
  Value front = m.div(m.polynomial(m.div(m.c(1), a), hankel_coefficients(nu, 25, true)), m.sqrt(m.mul(a, m.c(2 * kPi))));
  Value asymptotic = front;
  if (!scaled) {
    // e^(a/2) twice, so the product overflows only where I itself does.
    Value half = m.exp(m.mul(a, m.c(0.5)));
    // CPU gives NaN at infinity (its e^a / sqrt(a) is inf / inf); so does this.
    asymptotic = m.select(m.eq(a, m.c(kInf)), m.c(kNaN), m.mul(m.mul(half, front), half));
  }
  return m.select(m.le(a, m.c(kHankelThreshold)), series, asymptotic);
}

// I_nu(x) of a signed x: I_0 is even, I_1 odd.
Value bessel_i_signed(const Math& m, int nu, Value x, bool scaled) {
  Value r = bessel_i(m, nu, m.abs(x), scaled);
  return nu == 1 ? m.select(m.lt(x, m.c(0)), m.neg(r), r) : r;
}

// K_nu(x), or e^x K_nu(x) when `scaled`, for nu in {0, 1}:
// - x <= 1: the series A&S 9.6.13 (nu = 0) and 9.6.11 (nu = 1) around the logarithmic singularity;
// - 1 < x <= 20: the trapezoidal rule on e^x K_nu(x) = int_0^inf exp(-x (cosh t - 1)) cosh(nu t) dt
//   (A&S 9.6.24), whose integrand decays double-exponentially: step 1/8 up to t = 5 is exact to
//   float64 rounding there;
// - x > 20: Hankel's expansion sqrt(pi / 2x) e^-x sum_k a_k / x^k (A&S 9.7.2).
// K is infinite at 0 and NaN for negative x.
Value bessel_k(const Math& m, int nu, Value x, bool scaled) {
  Value z = m.mul(m.mul(x, x), m.c(0.25));
  Value log_half_x = m.log(m.mul(x, m.c(0.5)));
  std::vector<double> coefficients;
  double harmonic = 0;  // H_k
  for (int k = 0; k <= 20; ++k) {
    if (k > 0) harmonic += 1.0 / k;
    const double psi_sum = nu == 0 ? harmonic : 2 * (harmonic - kEulerGamma) + 1.0 / (k + 1);  // psi(k+1) + psi(k+2)
    coefficients.push_back(psi_sum / (factorial(k) * factorial(k + nu)));
  }
  Value sum = m.polynomial(z, coefficients);
  Value series = nu == 0 ? m.add(m.mul(m.neg(m.add(log_half_x, m.c(kEulerGamma))), bessel_i_series(m, 0, x)), sum)
                         : m.sub(m.add(m.div(m.c(1), x), m.mul(log_half_x, bessel_i_series(m, 1, x))),
                                 m.mul(m.mul(x, m.c(0.25)), sum));
  if (scaled) series = m.mul(series, m.exp(x));

  const double step = 0.125;
  Value integral = m.c(0);
  for (int j = 0; j <= 40; ++j) {
    const double t = step * j;
    const double weight = (j == 0 ? step / 2 : step) * std::cosh(nu * t);
    integral = m.add(integral, m.mul(m.c(weight), m.exp(m.mul(x, m.c(-(std::cosh(t) - 1))))));
  }
  Value asymptotic = m.mul(m.polynomial(m.div(m.c(1), x), hankel_coefficients(nu, 25, false)),
                           m.sqrt(m.div(m.c(kPi / 2), x)));
  if (!scaled) {
    Value decay = m.exp(m.neg(x));
    integral = m.mul(integral, decay);
    asymptotic = m.mul(asymptotic, decay);
  }
  Value r = m.select(m.le(x, m.c(1)), series, m.select(m.le(x, m.c(kHankelThreshold)), integral, asymptotic));
  r = m.select(m.eq(x, m.c(0)), m.c(kInf), r);
  return m.select(m.lt(x, m.c(0)), m.c(kNaN), r);
}

std::vector<Value> lower_i0(LoweringContext& ctx) { return {finish(ctx, bessel_i_signed(math(ctx), 0, operand(ctx, 0), false))}; }
std::vector<Value> lower_i0e(LoweringContext& ctx) { return {finish(ctx, bessel_i_signed(math(ctx), 0, operand(ctx, 0), true))}; }
std::vector<Value> lower_i1(LoweringContext& ctx) { return {finish(ctx, bessel_i_signed(math(ctx), 1, operand(ctx, 0), false))}; }
std::vector<Value> lower_i1e(LoweringContext& ctx) { return {finish(ctx, bessel_i_signed(math(ctx), 1, operand(ctx, 0), true))}; }
std::vector<Value> lower_k0(LoweringContext& ctx) { return {finish(ctx, bessel_k(math(ctx), 0, operand(ctx, 0), false))}; }
std::vector<Value> lower_k1(LoweringContext& ctx) { return {finish(ctx, bessel_k(math(ctx), 1, operand(ctx, 0), false))}; }
std::vector<Value> lower_k0e(LoweringContext& ctx) { return {finish(ctx, bessel_k(math(ctx), 0, operand(ctx, 0), true))}; }
std::vector<Value> lower_k1e(LoweringContext& ctx) { return {finish(ctx, bessel_k(math(ctx), 1, operand(ctx, 0), true))}; }

// ---- Bessel functions J and Y of orders 0 and 1 ----------------------------------------------------------

struct BesselJY {
  Value j0, j1, y0, y1;
};

// Small arguments, a <= 2: the power series A&S 9.1.10 (J) and 9.1.13 / 9.1.11 (Y0 / Y1), nested by term
// ratios; 20 terms reach float64 precision.
BesselJY bessel_jy_series(const Math& m, Value a) {
  Value minus_z = m.mul(m.mul(a, a), m.c(-0.25));
  Value half_a = m.mul(a, m.c(0.5));
  Value j0 = m.c(1), j1 = m.c(1);
  for (int k = 20; k >= 1; --k) {
    j0 = m.add(m.c(1), m.mul(j0, m.mul(minus_z, m.c(1.0 / (k * k)))));
    j1 = m.add(m.c(1), m.mul(j1, m.mul(minus_z, m.c(1.0 / (k * (k + 1.0))))));
  }
  j1 = m.mul(j1, half_a);
  // Sums with harmonic-number weights, as polynomials in -z (their coefficients stay above float32's range
  // limit for the terms that matter at z <= 1).
  std::vector<double> y0_terms = {0.0}, y1_terms;
  double harmonic = 0;
  for (int k = 0; k <= 20; ++k) {
    if (k > 0) {
      harmonic += 1.0 / k;
      y0_terms.push_back(-harmonic / (factorial(k) * factorial(k)));
    }
    y1_terms.push_back((2 * (harmonic - kEulerGamma) + 1.0 / (k + 1)) / (factorial(k) * factorial(k + 1)));
  }
  Value log_term = m.add(m.log(half_a), m.c(kEulerGamma));
  Value y0 = m.mul(m.c(2 / kPi), m.add(m.mul(log_term, j0), m.polynomial(minus_z, y0_terms)));
  Value y1 = m.sub(m.add(m.div(m.c(-2 / kPi), a), m.mul(m.mul(m.c(2 / kPi), m.log(half_a)), j1)),
                   m.mul(m.mul(half_a, m.c(1 / kPi)), m.polynomial(minus_z, y1_terms)));
  return {j0, j1, y0, y1};
}

// Moderate arguments, 2 < a <= 25: Miller's backward recurrence J_{k-1} = (2k/a) J_k - J_{k+1} from
// k = 70, where J_k(25) is below 1e-23, normalised by J_0 + 2 sum J_2k = 1 (A&S 9.1.46); Y from the
// Neumann series over the same J_k (A&S 9.1.88-89). Every value is bounded by 1, so nothing cancels.
BesselJY bessel_jy_recurrence(const Math& m, Value a) {
  const int top = 70;
  Value two_over_a = m.div(m.c(2), a);
  Value next = m.c(0), current = m.c(1);      // J_{k+1}, J_k up to a common factor
  Value norm = m.c(2);                         // J_0 + 2 sum J_2k (J_70 counted)
  Value y0_sum = m.c(1.0 / 35);                // sum_k (-1)^k J_2k / k, k = 35 first
  Value y1_sum = m.c(0);                       // sum_k (-1)^k (2k + 1) / (k (k + 1)) J_2k+1
  for (int k = top; k >= 1; --k) {
    Value previous = m.sub(m.mul(m.mul(two_over_a, m.c(k)), current), next);
    next = current;
    current = previous;
    const int i = k - 1;  // the index just computed
    if (i % 2 == 0 && i > 0) {
      const int half = i / 2;
      norm = m.add(norm, m.mul(m.c(2), current));
      y0_sum = m.add(y0_sum, m.mul(m.c((half % 2 ? -1.0 : 1.0) / half), current));
    } else if (i % 2 == 1 && i > 1) {
      const int half = (i - 1) / 2;
      y1_sum = m.add(y1_sum, m.mul(m.c((half % 2 ? -1.0 : 1.0) * (2.0 * half + 1) / (half * (half + 1.0))), current));
    }
    if (i % 4 == 0) {
      // Values grow by at most 35x per step; rescaling every four steps keeps them within float32.
      Value scale = m.select(m.gt(m.abs(current), m.c(1e15)), m.c(1e-15), m.c(1));
      next = m.mul(next, scale);
      current = m.mul(current, scale);
      norm = m.mul(norm, scale);
      y0_sum = m.mul(y0_sum, scale);
      y1_sum = m.mul(y1_sum, scale);
    }
  }
  norm = m.add(norm, current);  // J_0
  Value j0 = m.div(current, norm);
  Value j1 = m.div(next, norm);
  Value log_term = m.add(m.log(m.mul(a, m.c(0.5))), m.c(kEulerGamma));
  Value y0 = m.sub(m.mul(m.mul(m.c(2 / kPi), log_term), j0), m.mul(m.c(4 / kPi), m.div(y0_sum, norm)));
  Value y1 = m.sub(m.sub(m.mul(m.mul(m.c(2 / kPi), m.sub(log_term, m.c(1))), j1), m.mul(m.div(m.c(2 / kPi), a), j0)),
                   m.mul(m.c(2 / kPi), m.div(y1_sum, norm)));
  return {j0, j1, y0, y1};
}

// Large arguments, a > 25: Hankel's expansions (A&S 9.2.5-10) with 20 terms each in P and Q; the phase
// a - pi/4 - nu pi/2 enters through cos a and sin a, so no rounding of a - pi/4 is amplified.
BesselJY bessel_jy_hankel(const Math& m, Value a) {
  Value u = m.div(m.c(1), m.mul(a, a));
  Value inv_a = m.div(m.c(1), a);
  Value amplitude = m.sqrt(m.div(m.c(2 / kPi), a));
  Value cos_a = m.cos(a), sin_a = m.sin(a);
  const double r = 1 / std::sqrt(2.0);
  BesselJY out;
  for (int nu = 0; nu <= 1; ++nu) {
    std::vector<double> a_k = hankel_coefficients(nu, 40, false), p_terms, q_terms;
    for (int k = 0; k < 20; ++k) {
      p_terms.push_back((k % 2 ? -1.0 : 1.0) * a_k[2 * k]);
      q_terms.push_back((k % 2 ? -1.0 : 1.0) * a_k[2 * k + 1]);
    }
    Value p = m.polynomial(u, p_terms);
    Value q = m.mul(m.polynomial(u, q_terms), inv_a);
    // cos and sin of chi = a - pi/4 - nu pi/2.
    Value cos_chi = nu == 0 ? m.mul(m.add(cos_a, sin_a), m.c(r)) : m.mul(m.sub(sin_a, cos_a), m.c(r));
    Value sin_chi = nu == 0 ? m.mul(m.sub(sin_a, cos_a), m.c(r)) : m.mul(m.neg(m.add(sin_a, cos_a)), m.c(r));
    Value j = m.mul(amplitude, m.sub(m.mul(p, cos_chi), m.mul(q, sin_chi)));
    Value y = m.mul(amplitude, m.add(m.mul(p, sin_chi), m.mul(q, cos_chi)));
    (nu == 0 ? out.j0 : out.j1) = j;
    (nu == 0 ? out.y0 : out.y1) = y;
  }
  return out;
}

enum class BesselKind { kJ0, kJ1, kY0, kY1 };

// J_0 and J_1 at any x (J_0 even, J_1 odd); Y_0 and Y_1 for x > 0, -inf at 0 and NaN below, as CPU.
Value bessel_jy(const Math& m, BesselKind kind, Value x) {
  Value a = m.abs(x);
  BesselJY small = bessel_jy_series(m, a), middle = bessel_jy_recurrence(m, a), large = bessel_jy_hankel(m, a);
  auto pick = [&](Value BesselJY::*member) {
    return m.select(m.le(a, m.c(2)), small.*member, m.select(m.le(a, m.c(25)), middle.*member, large.*member));
  };
  switch (kind) {
    case BesselKind::kJ0: return pick(&BesselJY::j0);
    case BesselKind::kJ1: {
      Value r = pick(&BesselJY::j1);
      r = m.select(m.lt(x, m.c(0)), m.neg(r), r);
      return m.select(m.eq(x, m.c(0)), x, r);  // J_1(-0) = -0
    }
    default: {
      Value r = pick(kind == BesselKind::kY0 ? &BesselJY::y0 : &BesselJY::y1);
      r = m.select(m.eq(x, m.c(0)), m.c(-kInf), r);
      return m.select(m.lt(x, m.c(0)), m.c(kNaN), r);
    }
  }
}

std::vector<Value> lower_bessel_j0(LoweringContext& ctx) { return {finish(ctx, bessel_jy(math(ctx), BesselKind::kJ0, operand(ctx, 0)))}; }
std::vector<Value> lower_bessel_j1(LoweringContext& ctx) { return {finish(ctx, bessel_jy(math(ctx), BesselKind::kJ1, operand(ctx, 0)))}; }
std::vector<Value> lower_bessel_y0(LoweringContext& ctx) { return {finish(ctx, bessel_jy(math(ctx), BesselKind::kY0, operand(ctx, 0)))}; }
std::vector<Value> lower_bessel_y1(LoweringContext& ctx) { return {finish(ctx, bessel_jy(math(ctx), BesselKind::kY1, operand(ctx, 0)))}; }

// spherical_bessel_j0(x) = sin(x) / x, by its Taylor series below |x| = 1/2 (as CPU), where 8 terms reach
// float64 precision.
std::vector<Value> lower_spherical_bessel_j0(LoweringContext& ctx) {
  Math m = math(ctx);
  Value x = operand(ctx, 0);
  std::vector<double> coefficients;
  for (int k = 0; k < 8; ++k) coefficients.push_back((k % 2 ? -1.0 : 1.0) / factorial(2 * k + 1));
  Value series = m.polynomial(m.mul(x, x), coefficients);
  Value r = m.select(m.lt(m.abs(x), m.c(0.5)), series, m.div(m.sin(x), x));
  return {finish(ctx, m.select(m.eq(m.abs(x), m.c(kInf)), m.c(0), r))};  // the limit, where sin(x)/x is NaN
}

// ---- Hurwitz zeta ---------------------------------------------------------------------------------------

// zeta(x, q) = sum_k (q + k)^-x, with CPU's conventions: inf at x == 1, NaN for x < 1, inf at
// non-positive integer q, NaN for other q <= 0 unless x is an integer. The first terms are summed
// directly until q + N > 9 (at least nine of them, as CPU), the rest by the Euler-Maclaurin formula at
// a = q + N with twelve Bernoulli terms (A&S 23.1.30):
//   a^-x / 2 + a^(1-x) / (x - 1) + sum_j B_2j / (2j)! x (x+1) ... (x+2j-2) a^(-x-2j+1).
Value hurwitz_zeta(const Math& m, Value x, Value q) {
  Graph& g = m.g;
  Value zero = m.c(0);
  Value q_integer = m.eq(q, m.floor(q));
  Value pole = m.both(m.le(q, zero), q_integer);
  Value undefined = m.either(m.lt(x, m.c(1)), m.both(m.le(q, zero), m.ne(x, m.floor(x))));
  Value skip = m.either(m.either(pole, undefined), m.eq(x, m.c(1)));
  auto power = [&](Value base) { return g.binary("power", base, m.neg(x)); };
  // Elements with a closed-form answer start where no direct term is needed, so the loop ends for them.
  Value a = m.select(skip, m.c(10), q);
  Value sum = m.c(0);
  for (int k = 0; k < 9; ++k) {
    sum = m.add(sum, power(a));
    a = m.add(a, m.c(1));
  }
  auto state = g.while_loop(
      {a, sum},
      [&](const std::vector<Value>& s) {
        Value pending = g.convert(m.le(s[0], m.c(9)), DType::kI32);
        Value any = g.reduce(pending, g.constant_int(0, DType::kI32), dim_range(0, static_cast<int64_t>(m.dims.size())),
                             ir::Reducer::kMax);
        return std::vector<Value>{g.compare(any, g.constant_int(0, DType::kI32), Comparison::kGT)};
      },
      [&](const std::vector<Value>& s) {
        Value pending = m.le(s[0], m.c(9));
        return std::vector<Value>{m.select(pending, m.add(s[0], m.c(1)), s[0]),
                                  m.select(pending, m.add(s[1], power(s[0])), s[1])};
      });
  a = state[0];
  sum = state[1];
  Value b = power(a);
  Value inv_a = m.div(m.c(1), a);
  Value inv_a2 = m.mul(inv_a, inv_a);
  Value rising = m.mul(x, inv_a);  // x (x+1) ... (x+2j-2) a^-(2j-1)
  Value corrections = m.c(0);
  for (size_t j = 1; j <= kBernoulli.size(); ++j) {
    corrections = m.add(corrections, m.mul(m.c(kBernoulli[j - 1] / factorial(static_cast<int64_t>(2 * j))), rising));
    const double next = 2.0 * static_cast<double>(j);
    rising = m.mul(m.mul(rising, inv_a2), m.mul(m.add(x, m.c(next - 1)), m.add(x, m.c(next))));
  }
  Value tail = m.mul(b, m.add(m.add(m.div(a, m.sub(x, m.c(1))), m.c(0.5)), corrections));
  Value r = m.add(sum, tail);
  r = m.select(undefined, m.c(kNaN), r);
  r = m.select(pole, m.c(kInf), r);
  r = m.select(m.lt(x, m.c(1)), m.c(kNaN), r);
  return m.select(m.eq(x, m.c(1)), m.c(kInf), r);
}

std::vector<Value> lower_zeta(LoweringContext& ctx) {
  return {finish(ctx, hurwitz_zeta(math(ctx), operand(ctx, 0), operand(ctx, 1)))};
}

// ---- Regularized incomplete gamma functions ----------------------------------------------------------

// True where any element of the boolean `mask` is (the condition of the convergence loops below).
Value any_of(const Math& m, Value mask) {
  Graph& g = m.g;
  Value as_int = g.convert(mask, DType::kI32);
  Value largest = g.reduce(as_int, g.constant_int(0, DType::kI32), dim_range(0, static_cast<int64_t>(m.dims.size())),
                           ir::Reducer::kMax);
  return g.compare(largest, g.constant_int(0, DType::kI32), Comparison::kGT);
}

// P(a, x) and Q(a, x) = 1 - P. Where x < a + 1, P from its series
//   P = x^a e^-x / Gamma(a + 1) * sum_n x^n / ((a + 1) ... (a + n))            (A&S 6.5.29),
// elsewhere Q from its continued fraction (A&S 6.5.31), evaluated by the modified Lentz method; both
// loops run until every element has converged to the type's precision. CPU's conventions at the
// domain's edges (negative arguments, a = 0, x = 0, infinities) are applied last.
Value incomplete_gamma(const Math& m, Value a, Value x, bool upper) {
  Graph& g = m.g;
  const bool wide = m.dtype == DType::kF64;
  const double eps = wide ? 1.1e-16 : 6e-8;
  const double tiny = wide ? 1e-300 : 1e-30;
  Value finite = m.both(m.lt(m.abs(a), m.c(kInf)), m.lt(m.abs(x), m.c(kInf)));  // false for NaN too
  Value valid = m.both(finite, m.both(m.gt(a, m.c(0)), m.gt(x, m.c(0))));
  Value use_series = m.lt(x, m.add(a, m.c(1)));
  // log(x^a e^-x / Gamma(a)). For a >= 10, Stirling's series for log Gamma(a) (A&S 6.1.40, with eight
  // Bernoulli terms) turns it into a (log1p(t) - t) + log(a) / 2 - log(2 pi) / 2 - correction(a) with
  // t = (x - a) / a, which avoids the cancellation between terms of size a log a.
  Value plain = m.sub(m.sub(m.mul(a, m.log(x)), x), m.g.chlo("lgamma", {a}, m.g.type(a)));
  Value t = m.div(m.sub(x, a), a);
  std::vector<double> stirling;
  for (int k = 1; k <= 8; ++k) stirling.push_back(kBernoulli[static_cast<size_t>(k - 1)] / (2.0 * k * (2.0 * k - 1)));
  Value inv_a = m.div(m.c(1), a);
  Value correction = m.mul(inv_a, m.polynomial(m.mul(inv_a, inv_a), stirling));
  Value stirling_form = m.sub(m.add(m.mul(a, m.sub(m.log1p(t), t)), m.mul(m.c(0.5), m.log(a))),
                              m.add(m.c(0.5 * std::log(2 * kPi)), correction));
  Value log_prefactor = m.select(m.ge(a, m.c(10)), stirling_form, plain);

  // Series: term_n = term_{n-1} x / (a + n), sum starting at 1/a.
  Value series_active = m.both(valid, use_series);
  Value first = m.select(series_active, m.div(m.c(1), a), m.c(0));
  auto series = g.while_loop(
      {a, first, first, series_active},
      [&](const std::vector<Value>& s) { return std::vector<Value>{any_of(m, s[3])}; },
      [&](const std::vector<Value>& s) {
        Value ap = m.add(s[0], m.c(1));
        Value term = m.mul(s[1], m.div(x, ap));
        Value sum = m.add(s[2], term);
        Value still = m.both(s[3], m.gt(m.abs(term), m.mul(m.abs(sum), m.c(eps))));
        return std::vector<Value>{m.select(s[3], ap, s[0]), m.select(s[3], term, s[1]), m.select(s[3], sum, s[2]), still};
      });
  Value p_series = m.mul(series[2], m.exp(log_prefactor));

  // Continued fraction (Lentz): h converges to 1 / (x + 1 - a - 1 (1 - a) / (x + 3 - a - 2 (2 - a) / ...)).
  Value fraction_active = m.both(valid, m.g.unary("not", use_series));
  Value b0 = m.add(m.sub(x, a), m.c(1));
  b0 = m.select(fraction_active, b0, m.c(1));
  Value d0 = m.div(m.c(1), b0);
  auto fraction = g.while_loop(
      {g.constant_int(1, DType::kI64), b0, m.c(1 / tiny), d0, d0, fraction_active},
      [&](const std::vector<Value>& s) { return std::vector<Value>{any_of(m, s[5])}; },
      [&](const std::vector<Value>& s) {
        Value i = g.broadcast_in_dim(g.convert(s[0], m.dtype), m.dims, {});
        Value an = m.neg(m.mul(i, m.sub(i, a)));
        Value b = m.add(s[1], m.c(2));
        Value d = m.add(m.mul(an, s[3]), b);
        d = m.select(m.lt(m.abs(d), m.c(tiny)), m.c(tiny), d);
        Value c = m.add(b, m.div(an, s[2]));
        c = m.select(m.lt(m.abs(c), m.c(tiny)), m.c(tiny), c);
        d = m.div(m.c(1), d);
        Value delta = m.mul(d, c);
        Value h = m.mul(s[4], delta);
        Value still = m.both(s[5], m.ge(m.abs(m.sub(delta, m.c(1))), m.c(eps)));
        Value on = s[5];
        return std::vector<Value>{g.binary("add", s[0], g.constant_int(1, DType::kI64)), m.select(on, b, s[1]),
                                  m.select(on, c, s[2]), m.select(on, d, s[3]), m.select(on, h, s[4]), still};
      });
  Value q_fraction = m.mul(fraction[4], m.exp(log_prefactor));

  Value lower = m.select(use_series, p_series, m.sub(m.c(1), q_fraction));
  Value upper_value = m.select(use_series, m.sub(m.c(1), p_series), q_fraction);
  Value r = upper ? upper_value : lower;
  // Edges, in CPU's order of precedence (the first test that holds wins, so they are applied last first).
  const double at_zero_x = upper ? 1 : 0, at_infinite_x = upper ? 0 : 1;
  r = m.select(m.eq(x, m.c(kInf)), m.c(at_infinite_x), r);
  r = m.select(m.eq(a, m.c(kInf)), m.select(m.eq(x, m.c(kInf)), m.c(kNaN), m.c(at_zero_x)), r);
  r = m.select(m.eq(x, m.c(0)), m.c(at_zero_x), r);
  r = m.select(m.eq(a, m.c(0)), m.select(m.gt(x, m.c(0)), m.c(at_infinite_x), m.c(kNaN)), r);
  return m.select(m.either(m.lt(x, m.c(0)), m.lt(a, m.c(0))), m.c(kNaN), r);
}

std::vector<Value> lower_igamma(LoweringContext& ctx) {
  return {finish(ctx, incomplete_gamma(math(ctx), operand(ctx, 0), operand(ctx, 1), false))};
}
std::vector<Value> lower_igammac(LoweringContext& ctx) {
  return {finish(ctx, incomplete_gamma(math(ctx), operand(ctx, 0), operand(ctx, 1), true))};
}

}  // namespace

void add_special_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_logcumsumexp", &lower_logcumsumexp});
  table.push_back({"aten::angle", &lower_angle});
  table.push_back({"aten::digamma", &lower_digamma});
  table.push_back({"aten::erfc", &lower_erfc});
  table.push_back({"aten::floor_divide", &lower_floor_divide});
  table.push_back({"aten::fmax", &lower_fmax});
  table.push_back({"aten::fmin", &lower_fmin});
  table.push_back({"aten::frexp.Tensor", &lower_frexp});
  table.push_back({"aten::heaviside", &lower_heaviside});
  table.push_back({"aten::i0", &lower_i0});
  table.push_back({"aten::igamma", &lower_igamma});
  table.push_back({"aten::igammac", &lower_igammac});
  table.push_back({"aten::logaddexp2", &lower_logaddexp2});
  table.push_back({"aten::logit", &lower_logit});
  table.push_back({"aten::logit_backward", &lower_logit_backward});
  table.push_back({"aten::nextafter", &lower_nextafter});
  table.push_back({"aten::polygamma", &lower_polygamma});
  table.push_back({"aten::rsub.Tensor", &lower_rsub});
  table.push_back({"aten::signbit", &lower_signbit});
  table.push_back({"aten::sinc", &lower_sinc});
  table.push_back({"aten::softplus", &lower_softplus});
  table.push_back({"aten::softplus_backward", &lower_softplus_backward});
  table.push_back({"aten::special_bessel_j0", &lower_bessel_j0});
  table.push_back({"aten::special_bessel_j1", &lower_bessel_j1});
  table.push_back({"aten::special_bessel_y0", &lower_bessel_y0});
  table.push_back({"aten::special_bessel_y1", &lower_bessel_y1});
  table.push_back({"aten::special_chebyshev_polynomial_t", &lower_chebyshev_t});
  table.push_back({"aten::special_chebyshev_polynomial_u", &lower_chebyshev_u});
  table.push_back({"aten::special_chebyshev_polynomial_v", &lower_chebyshev_v});
  table.push_back({"aten::special_chebyshev_polynomial_w", &lower_chebyshev_w});
  table.push_back({"aten::special_entr", &lower_entr});
  table.push_back({"aten::special_erfcx", &lower_erfcx});
  table.push_back({"aten::special_hermite_polynomial_h", &lower_hermite_h});
  table.push_back({"aten::special_hermite_polynomial_he", &lower_hermite_he});
  table.push_back({"aten::special_i0e", &lower_i0e});
  table.push_back({"aten::special_i1", &lower_i1});
  table.push_back({"aten::special_i1e", &lower_i1e});
  table.push_back({"aten::special_laguerre_polynomial_l", &lower_laguerre_l});
  table.push_back({"aten::special_legendre_polynomial_p", &lower_legendre_p});
  table.push_back({"aten::special_log_ndtr", &lower_log_ndtr});
  table.push_back({"aten::special_modified_bessel_i0", &lower_i0});
  table.push_back({"aten::special_modified_bessel_i1", &lower_i1});
  table.push_back({"aten::special_modified_bessel_k0", &lower_k0});
  table.push_back({"aten::special_modified_bessel_k1", &lower_k1});
  table.push_back({"aten::special_ndtri", &lower_ndtri});
  table.push_back({"aten::special_scaled_modified_bessel_k0", &lower_k0e});
  table.push_back({"aten::special_scaled_modified_bessel_k1", &lower_k1e});
  table.push_back({"aten::special_shifted_chebyshev_polynomial_t", &lower_shifted_chebyshev_t});
  table.push_back({"aten::special_shifted_chebyshev_polynomial_u", &lower_shifted_chebyshev_u});
  table.push_back({"aten::special_shifted_chebyshev_polynomial_v", &lower_shifted_chebyshev_v});
  table.push_back({"aten::special_shifted_chebyshev_polynomial_w", &lower_shifted_chebyshev_w});
  table.push_back({"aten::special_spherical_bessel_j0", &lower_spherical_bessel_j0});
  table.push_back({"aten::special_xlog1py", &lower_xlog1py});
  table.push_back({"aten::special_zeta", &lower_zeta});
}

}  // namespace torchtpu::lowering
