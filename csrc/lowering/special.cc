// Special functions of the gamma and error-function families: digamma/polygamma, Hurwitz zeta, the
// regularized incomplete gamma functions, erfcx, log_ndtr and ndtri. The other special families live in
// special_elementwise.cc, special_polynomials.cc and special_bessel.cc, sharing special_math.h.
//
// Everything computes in the output's "opmath" type (float32 for 16-bit floats) and rounds once, as PyTorch
// does. The approximations are series, reflection formulas, continued fractions and asymptotic expansions
// whose term counts are chosen for float64 accuracy, so float64 inputs get float64 results; the references
// are cited where used.
#include "lowering/special_math.h"

namespace torchtpu::lowering {
namespace special {
namespace {

// ---- Polygamma ----------------------------------------------------------------------------------------



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

// ---- Error-function relatives ---------------------------------------------------------------------------

Value erfc(const Math& m, Value x) { return m.g.chlo("erfc", {x}, m.g.type(x)); }
Value erf(const Math& m, Value x) { return lowering::erf(m.g, x); }

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
}  // namespace special

void add_special_rules(std::vector<Rule>& table) {
  special::add_elementwise_extra_rules(table);
  special::add_polynomial_rules(table);
  special::add_bessel_rules(table);
  table.push_back({"aten::digamma", &special::lower_digamma});
  table.push_back({"aten::igamma", &special::lower_igamma});
  table.push_back({"aten::igammac", &special::lower_igammac});
  table.push_back({"aten::polygamma", &special::lower_polygamma});
  table.push_back({"aten::special_erfcx", &special::lower_erfcx});
  table.push_back({"aten::special_log_ndtr", &special::lower_log_ndtr});
  table.push_back({"aten::special_ndtri", &special::lower_ndtri});
  table.push_back({"aten::special_zeta", &special::lower_zeta});
}

}  // namespace torchtpu::lowering
