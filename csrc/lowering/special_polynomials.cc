// Orthogonal polynomials of torch.special: Chebyshev (plain and shifted, four kinds), Hermite, Laguerre,
// Legendre, evaluated by their recurrences in a loop up to the largest degree present.
#include "lowering/special_math.h"

namespace torchtpu::lowering::special {
namespace {

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
  const Type& n_type = g.type(n);
  if (is_floating(n_type.dtype)) {
    // CPU's static_cast of NaN, an infinity or a value past int64's range gives INT64_MIN (x86), so n < 0;
    // XLA's convert saturates instead, and the recurrence then looped up to INT64_MAX.
    Value magnitude = g.convert(g.unary("abs", n), DType::kF32);
    Value two_to_63 = g.constant(9223372036854775808.0, DType::kF32, n_type.dims);
    Value in_range = g.compare(magnitude, two_to_63, Comparison::kLT);  // false for NaN
    n_int = g.select(in_range, n_int, g.constant_int(std::numeric_limits<int64_t>::min(), DType::kI64, n_type.dims));
  }
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

}  // namespace

void add_polynomial_rules(std::vector<Rule>& table) {
  table.push_back({"aten::special_chebyshev_polynomial_t", &lower_chebyshev_t});
  table.push_back({"aten::special_chebyshev_polynomial_u", &lower_chebyshev_u});
  table.push_back({"aten::special_chebyshev_polynomial_v", &lower_chebyshev_v});
  table.push_back({"aten::special_chebyshev_polynomial_w", &lower_chebyshev_w});
  table.push_back({"aten::special_hermite_polynomial_h", &lower_hermite_h});
  table.push_back({"aten::special_hermite_polynomial_he", &lower_hermite_he});
  table.push_back({"aten::special_laguerre_polynomial_l", &lower_laguerre_l});
  table.push_back({"aten::special_legendre_polynomial_p", &lower_legendre_p});
  table.push_back({"aten::special_shifted_chebyshev_polynomial_t", &lower_shifted_chebyshev_t});
  table.push_back({"aten::special_shifted_chebyshev_polynomial_u", &lower_shifted_chebyshev_u});
  table.push_back({"aten::special_shifted_chebyshev_polynomial_v", &lower_shifted_chebyshev_v});
  table.push_back({"aten::special_shifted_chebyshev_polynomial_w", &lower_shifted_chebyshev_w});
}

}  // namespace torchtpu::lowering::special
