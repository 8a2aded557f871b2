// Bessel functions: modified I0/I1/K0/K1 (and scaled forms), J0/J1/Y0/Y1, spherical j0, and the Airy
// function Ai (a Bessel function of order 1/3). Series, integrals,
// recurrences and asymptotic expansions whose term counts reach float64 precision; references cited below.
#include <tuple>
#include <utility>

#include "lowering/special_math.h"

namespace torchtpu::lowering::special {
namespace {

// ---- Modified Bessel functions I and K of orders 0 and 1 ---------------------------------------------


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

// ---- Airy function Ai ---------------------------------------------------------------------------------
//
// Three regions, each reaching float64 precision (checked against mpmath to 2e-15 relative to
// |Ai| + |Ai'| in the middle, 2e-13 relative on the right, where exp(-zeta) itself is that sensitive to x):
//  * -10.25 <= x <= 1: the Taylor series about the nearest multiple of 1/2, x0. Ai'' = x Ai gives its
//    coefficients from Ai(x0) and Ai'(x0): a2 = x0 a0 / 2, a_{n+2} = (x0 a_n + a_{n-1}) / ((n + 1)(n + 2)).
//    The node values come from the same series, stepped in double from Ai(0) and Ai'(0) when a program is
//    built, and are read per element from a small table.
//  * x > 1: Ai(x) = sqrt(x / 3) / pi * K_{1/3}(zeta), zeta = 2/3 x^{3/2} (DLMF 9.6.1), with
//    K_nu(zeta) = integral_0^inf exp(-zeta cosh t) cosh(nu t) dt (DLMF 10.32.9) by the trapezoidal rule,
//    which converges exponentially for this analytic integrand. The step shrinks like 1/sqrt(zeta), the width
//    of the integrand's peak, and exp(-zeta) is taken out, so only Ai's own underflow remains.
//  * x < -10.25: the asymptotic expansion in 1/zeta (DLMF 9.7.9), 12 terms of each series.
// As in CPU's kernel, +-inf and NaN give NaN.

constexpr double kAiryNodeSpacing = 0.5;
constexpr int kAiryLowestNode = -20;  // x0 = -10
constexpr int kAiryHighestNode = 2;   // x0 = 1

// Ai(x0 + h) and Ai'(x0 + h) from Ai(x0), Ai'(x0), in double (40 terms: |h| <= 1/16 in the table's steps).
std::pair<double, double> airy_step(double x0, double value, double slope, double h) {
  std::vector<double> a = {value, slope, x0 * value / 2};
  for (int n = 1; n < 38; ++n) a.push_back((x0 * a[n] + a[n - 1]) / ((n + 1.0) * (n + 2.0)));
  double v = 0, d = 0;
  for (size_t n = a.size(); n-- > 0;) {
    v = v * h + a[n];
    if (n > 0) d = d * h + static_cast<double>(n) * a[n];
  }
  return {v, d};
}

// Ai and Ai' at the nodes kAiryLowestNode .. kAiryHighestNode (times the spacing).
const std::pair<std::vector<double>, std::vector<double>>& airy_nodes() {
  static const auto nodes = [] {
    const int count = kAiryHighestNode - kAiryLowestNode + 1;
    std::vector<double> value(count), slope(count);
    const double ai0 = 1 / (std::cbrt(9.0) * std::tgamma(2.0 / 3));
    const double slope0 = -1 / (std::cbrt(3.0) * std::tgamma(1.0 / 3));
    for (int direction : {1, -1}) {
      double x = 0, v = ai0, d = slope0;
      for (int node = 0; node >= kAiryLowestNode && node <= kAiryHighestNode; node += direction) {
        value[node - kAiryLowestNode] = v;
        slope[node - kAiryLowestNode] = d;
        for (int sub = 0; sub < 8; ++sub) {
          std::tie(v, d) = airy_step(x, v, d, direction * kAiryNodeSpacing / 8);
          x += direction * kAiryNodeSpacing / 8;
        }
      }
    }
    return std::make_pair(value, slope);
  }();
  return nodes;
}

Value airy_taylor(const Math& m, Value x) {
  Graph& g = m.g;
  Value node = m.round(m.div(x, m.c(kAiryNodeSpacing)));
  node = m.min(m.max(node, m.c(kAiryLowestNode)), m.c(kAiryHighestNode));
  Value x0 = m.mul(node, m.c(kAiryNodeSpacing));
  Value h = m.sub(x, x0);
  const int64_t numel = Type{m.dtype, m.dims}.numel();
  Value index = g.reshape(g.convert(m.sub(node, m.c(kAiryLowestNode)), DType::kI32), {numel, 1});
  auto at_node = [&](const std::vector<double>& table) {
    return g.reshape(g.gather_flat(constant_vector(g, table, m.dtype), index), m.dims);
  };
  std::vector<Value> a = {at_node(airy_nodes().first), at_node(airy_nodes().second)};
  a.push_back(m.div(m.mul(x0, a[0]), m.c(2)));
  const int terms = m.dtype == DType::kF64 ? 24 : 14;
  for (int n = 1; n + 2 < terms; ++n) {
    a.push_back(m.div(m.add(m.mul(x0, a[n]), a[n - 1]), m.c((n + 1.0) * (n + 2.0))));
  }
  Value r = a.back();
  for (size_t n = a.size() - 1; n-- > 0;) r = m.add(m.mul(r, h), a[n]);
  return r;
}

// sinh(u) without cancellation for small u.
Value sinh_small(const Math& m, Value u) { return m.mul(m.c(0.5), m.sub(m.expm1(u), m.expm1(m.neg(u)))); }

Value airy_right(const Math& m, Value x) {
  Value zeta = m.mul(m.c(2.0 / 3), m.mul(x, m.sqrt(x)));
  Value step = m.min(m.c(0.25), m.div(m.c(0.5), m.sqrt(zeta)));
  Value sum = m.c(0.5);  // the t = 0 term, halved
  for (int k = 1; k < 32; ++k) {
    Value t = m.mul(step, m.c(k));
    Value s = sinh_small(m, m.mul(t, m.c(0.5)));
    Value third = m.mul(t, m.c(1.0 / 3));
    Value cosh_third = m.mul(m.c(0.5), m.add(m.exp(third), m.exp(m.neg(third))));
    // exp(-zeta (cosh t - 1)) with cosh t - 1 = 2 sinh^2(t / 2).
    sum = m.add(sum, m.mul(m.exp(m.mul(m.c(-2), m.mul(zeta, m.mul(s, s)))), cosh_third));
  }
  return m.mul(m.mul(m.div(m.sqrt(m.div(x, m.c(3))), m.c(kPi)), m.exp(m.neg(zeta))), m.mul(sum, step));
}

Value airy_left(const Math& m, Value x) {
  Value z = m.neg(x);
  Value zeta = m.mul(m.c(2.0 / 3), m.mul(z, m.sqrt(z)));
  // u_k = (6k-5)(6k-3)(6k-1) / ((2k-1) 216 k) u_{k-1} (DLMF 9.7.2); P takes the even ones, Q the odd ones,
  // with alternating signs.
  std::vector<double> u = {1.0};
  for (int k = 1; k < 24; ++k) {
    u.push_back(u.back() * (6.0 * k - 5) * (6.0 * k - 3) * (6.0 * k - 1) / ((2.0 * k - 1) * 216 * k));
  }
  std::vector<double> even, odd;
  for (int k = 0; k < 12; ++k) {
    even.push_back((k % 2 ? -1 : 1) * u[2 * k]);
    odd.push_back((k % 2 ? -1 : 1) * u[2 * k + 1]);
  }
  Value inverse = m.div(m.c(1), zeta);
  Value inverse_squared = m.mul(inverse, inverse);
  Value p = m.polynomial(inverse_squared, even);
  Value q = m.mul(inverse, m.polynomial(inverse_squared, odd));
  Value phase = m.sub(zeta, m.c(kPi / 4));
  Value wave = m.add(m.mul(m.cos(phase), p), m.mul(m.sin(phase), q));
  return m.div(wave, m.mul(m.c(std::sqrt(kPi)), m.sqrt(m.sqrt(z))));
}

std::vector<Value> lower_airy_ai(LoweringContext& ctx) {
  Math m = math(ctx);
  Value x = operand(ctx, 0);
  const double taylor_low = kAiryLowestNode * kAiryNodeSpacing - kAiryNodeSpacing / 2;
  Value r = m.select(m.gt(x, m.c(1)), airy_right(m, x),
                     m.select(m.lt(x, m.c(taylor_low)), airy_left(m, x), airy_taylor(m, x)));
  return {finish(ctx, m.select(m.either(m.isnan(x), m.eq(m.abs(x), m.c(kInf))), m.c(kNaN), r))};
}

}  // namespace

void add_bessel_rules(std::vector<Rule>& table) {
  table.push_back({"aten::special_airy_ai", &lower_airy_ai});
  table.push_back({"aten::i0", &lower_i0});
  table.push_back({"aten::special_bessel_j0", &lower_bessel_j0});
  table.push_back({"aten::special_bessel_j1", &lower_bessel_j1});
  table.push_back({"aten::special_bessel_y0", &lower_bessel_y0});
  table.push_back({"aten::special_bessel_y1", &lower_bessel_y1});
  table.push_back({"aten::special_i0e", &lower_i0e});
  table.push_back({"aten::special_i1", &lower_i1});
  table.push_back({"aten::special_i1e", &lower_i1e});
  table.push_back({"aten::special_modified_bessel_i0", &lower_i0});
  table.push_back({"aten::special_modified_bessel_i1", &lower_i1});
  table.push_back({"aten::special_modified_bessel_k0", &lower_k0});
  table.push_back({"aten::special_modified_bessel_k1", &lower_k1});
  table.push_back({"aten::special_scaled_modified_bessel_k0", &lower_k0e});
  table.push_back({"aten::special_scaled_modified_bessel_k1", &lower_k1e});
  table.push_back({"aten::special_spherical_bessel_j0", &lower_spherical_bessel_j0});
}

}  // namespace torchtpu::lowering::special
