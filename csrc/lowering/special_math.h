// Shared pieces of the special-function families (special*.cc): the Math helper that keeps formulas
// readable, the opmath conventions, and constants used by several families.
#pragma once

#include <cmath>
#include <limits>
#include <vector>

#include "lowering/helpers.h"

namespace torchtpu::lowering::special {

using ir::Comparison;

constexpr double kPi = 3.14159265358979323846;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kEulerGamma = 0.57721566490153286061;

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

inline const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }
inline DType opmath(const LoweringContext& ctx) { return accumulation_dtype(out(ctx).dtype); }
inline Math math(LoweringContext& ctx) { return Math{ctx.graph, opmath(ctx), out(ctx).dims}; }
// Argument i in the output's opmath type and shape.
inline Value operand(LoweringContext& ctx, size_t i) {
  return cast_to(ctx.graph, ctx.tensor(i), Type{opmath(ctx), out(ctx).dims});
}
inline Value finish(LoweringContext& ctx, Value v, size_t i = 0) { return cast_to(ctx.graph, v, out(ctx, i)); }

// The signed integer type as wide as a floating type, for work on its bits.
inline DType same_width_int(DType dtype) {
  switch (dtype) {
    case DType::kF64: return DType::kI64;
    case DType::kF32: return DType::kI32;
    case DType::kF16:
    case DType::kBF16: return DType::kI16;
    default: return DType::kI8;  // float8
  }
}

// Bernoulli numbers B_2, B_4, ..., B_24 (Abramowitz & Stegun, Table 23.2).
inline const std::vector<double> kBernoulli = {1.0 / 6,        -1.0 / 30,         1.0 / 42,          -1.0 / 30,
                                        5.0 / 66,       -691.0 / 2730,     7.0 / 6,           -3617.0 / 510,
                                        43867.0 / 798,  -174611.0 / 330,   854513.0 / 138,    -236364091.0 / 2730};

inline double factorial(int64_t n) {
  double f = 1;
  for (int64_t i = 2; i <= n; ++i) f *= static_cast<double>(i);
  return f;
}

// True where any element of the boolean `mask` is (the condition of the convergence loops below).
inline Value any_of(const Math& m, Value mask) {
  Graph& g = m.g;
  Value as_int = g.convert(mask, DType::kI32);
  Value largest = g.reduce(as_int, g.constant_int(0, DType::kI32), dim_range(0, static_cast<int64_t>(m.dims.size())),
                           ir::Reducer::kMax);
  return g.compare(largest, g.constant_int(0, DType::kI32), Comparison::kGT);
}

// The families' rules, added to the table by add_special_rules (special.cc).
void add_elementwise_extra_rules(std::vector<Rule>& table);
void add_polynomial_rules(std::vector<Rule>& table);
void add_bessel_rules(std::vector<Rule>& table);

}  // namespace torchtpu::lowering::special
