// Less common elementwise ops: rsub, angle, floor_divide, fmax/fmin, heaviside, signbit, frexp, nextafter,
// logaddexp2, softplus, logit, sinc, erfc, entr, xlog1py, and the logcumsumexp scan.
//
// They compute in the output's "opmath" type (float32 for 16-bit floats) and round once, as PyTorch does.
#include <stdexcept>

#include "lowering/special_math.h"

namespace torchtpu::lowering::special {
namespace {

// ---- Small elementwise ops --------------------------------------------------------------------------

// rsub.Tensor(self, other, alpha): other - alpha * self.
std::vector<Value> lower_rsub(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  check_subtraction_operands(ctx);
  Value self = operand(ctx, 0);
  if (!ctx.is_none(2)) self = g.binary("multiply", self, ctx.scalar(2, opmath(ctx), out(ctx).dims));
  return {finish(ctx, g.binary("subtract", operand(ctx, 1), self))};
}

// angle of a real number: pi for negatives, 0 otherwise, NaN kept.
std::vector<Value> lower_angle(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  if (is_complex(ctx.type_of(0).dtype)) {
    Value x = ctx.tensor(0);
    return {cast_to(g, g.binary("atan2", g.imag(x), g.real(x)), ctx.outputs.at(0))};
  }
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
    check_integer_divisor(ctx, b);
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
  // CPU does not promote here (its meta kernel, unlike PyTorch's Python one, checks).
  if (ctx.type_of(0).dtype != ctx.type_of(1).dtype) {
    throw std::invalid_argument("heaviside is not yet implemented for tensors with different dtypes.");
  }
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

// Complex values scan in CPU's order, one element after another, in a while loop over `dim`: logaddexp
// keeps the larger term's imaginary part, so the scan's imaginary parts leave (-pi, pi], and a tree-shaped
// scan would land 2 pi away from CPU's on long rows.
Value complex_logcumsumexp(Graph& g, Value x, int64_t dim) {
  const int64_t rank = g.type(x).rank();
  std::vector<int64_t> to_front{dim};
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) to_front.push_back(d);
  }
  Value rows = g.transpose(x, to_front);
  std::vector<int64_t> row_dims = g.type(rows).dims;
  const int64_t length = row_dims[0];
  row_dims[0] = 1;
  auto index = [&](int64_t i) { return g.constant_int(i, DType::kI64, {}); };
  auto row_start = [&](Value i) {
    std::vector<Value> start(static_cast<size_t>(rank), index(0));
    start[0] = i;
    return start;
  };
  auto cond = [&](const std::vector<Value>& s) {
    return std::vector<Value>{g.compare(s[0], index(length), Comparison::kLT)};
  };
  auto body = [&](const std::vector<Value>& s) {
    Value total = complex_logaddexp(g, g.dynamic_slice(rows, row_start(s[0]), row_dims), s[1]);
    return std::vector<Value>{g.binary("add", s[0], index(1)), total,
                              g.dynamic_update_slice(s[2], total, row_start(s[0]))};
  };
  // CPU starts from -inf + 0i and keeps the running value where a term ties it at an infinite real part.
  const DType part = complex_part(g.type(x).dtype);
  Value start = g.complex(g.constant(-kInf, part, row_dims), g.constant(0, part, row_dims));
  return g.transpose(g.while_loop({index(0), start, rows}, cond, body)[2], inverse_permutation(to_front));
}

// _logcumsumexp(self, dim): an inclusive scan whose combiner is logaddexp, as a reduce_window spanning the
// whole dim, padded on the low side with -inf (the combiner's identity); complex values as above.
std::vector<Value> lower_logcumsumexp(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType compute = opmath(ctx);
  Value x = g.convert(ctx.tensor(0), compute);
  const Type t = g.type(x);
  if (t.rank() == 0 || t.numel() == 0) return {finish(ctx, x)};
  const int64_t dim = wrap_dim(ctx.integer(1), t.rank());
  if (is_complex(compute)) return {finish(ctx, complex_logcumsumexp(g, x, dim))};
  const std::string combiner = g.region({Type{compute, {}}, Type{compute, {}}}, [&](const std::vector<Value>& s) {
    Math m{g, compute, {}};
    Value gap = m.neg(m.abs(m.sub(s[0], s[1])));
    Value r = m.add(m.max(s[0], s[1]), m.log1p(m.exp(gap)));
    Value equal_infinities = m.both(m.eq(s[0], s[1]), m.eq(m.abs(s[0]), m.c(kInf)));  // the gap is NaN
    return std::vector<Value>{m.select(equal_infinities, s[0], r)};
  });
  Value scan = inclusive_scan(g, {x}, {g.constant(-kInf, compute)}, dim, combiner)[0];
  return {finish(ctx, scan)};
}

}  // namespace

void add_elementwise_extra_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_logcumsumexp", &lower_logcumsumexp});
  table.push_back({"aten::angle", &lower_angle});
  table.push_back({"aten::erfc", &lower_erfc});
  table.push_back({"aten::floor_divide", &lower_floor_divide});
  table.push_back({"aten::fmax", &lower_fmax});
  table.push_back({"aten::fmin", &lower_fmin});
  table.push_back({"aten::frexp.Tensor", &lower_frexp});
  table.push_back({"aten::heaviside", &lower_heaviside});
  table.push_back({"aten::logaddexp2", &lower_logaddexp2});
  table.push_back({"aten::logit", &lower_logit});
  table.push_back({"aten::logit_backward", &lower_logit_backward});
  table.push_back({"aten::nextafter", &lower_nextafter});
  table.push_back({"aten::rsub.Tensor", &lower_rsub});
  table.push_back({"aten::signbit", &lower_signbit});
  table.push_back({"aten::sinc", &lower_sinc});
  table.push_back({"aten::softplus", &lower_softplus});
  table.push_back({"aten::softplus_backward", &lower_softplus_backward});
  table.push_back({"aten::special_entr", &lower_entr});
  table.push_back({"aten::special_xlog1py", &lower_xlog1py});
}

}  // namespace torchtpu::lowering::special
