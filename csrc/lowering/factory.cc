// Factories that compute their values on device.
#include <algorithm>
#include <cmath>
#include <complex>
#include <functional>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

// arange.start_out(start, end, step, out): start + i * step, computed in float64 (or int64) and rounded.
std::vector<Value> lower_arange(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = ctx.outputs.at(0);
  const DType compute = is_floating(t.dtype) ? DType::kF64 : DType::kI64;
  Value index = g.iota(Type{compute, t.dims}, 0);
  Value start = g.constant(ctx.real(0), compute, t.dims);
  Value step = g.constant(ctx.real(2), compute, t.dims);
  if (compute == DType::kI64) {
    start = g.constant_int(ctx.integer(0), compute, t.dims);
    step = g.constant_int(ctx.integer(2), compute, t.dims);
  }
  return {g.convert(g.binary("add", start, g.binary("multiply", index, step)), t.dtype)};
}

// An end of a ramp, from its value, as an f64 scalar.
using EndPoint = std::function<Value(double)>;

// The symmetric ramp from start to end in float64, or for a complex output, the ramps of the real and
// imaginary parts (the ramp is linear, so this is the complex ramp) as complex128.
Value ramp(Graph& g, const Type& t, std::complex<double> start, std::complex<double> end, int64_t steps,
           const EndPoint& end_point) {
  auto part = [&](double a, double b) { return symmetric_ramp(g, t.dims, end_point(a), end_point(b), steps); };
  Value re = part(start.real(), end.real());
  return is_complex(t.dtype) ? g.complex(re, part(start.imag(), end.imag())) : re;
}

// linspace.out(start, end, steps, out): the symmetric ramp, rounded once.
std::vector<Value> lower_linspace(LoweringContext& ctx) {
  const Type& t = ctx.outputs.at(0);
  Graph& g = ctx.graph;
  Value r = ramp(g, t, ctx.complex_value(0), ctx.complex_value(1), ctx.integer(2),
                 [&](double v) { return g.constant(v, DType::kF64); });
  return {ctx.graph.convert(r, t.dtype)};
}

// logspace.out(start, end, steps, base, out): base ** ramp in float64, rounded once. Like PyTorch, the ends
// are first rounded to the output dtype (truncated for integers) unless there is a single step.
std::vector<Value> lower_logspace(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = ctx.outputs.at(0);
  const int64_t steps = ctx.integer(2);
  const DType part = is_complex(t.dtype) ? complex_part(t.dtype) : t.dtype;
  auto end_point = [&](double v) {
    Value exact = g.constant(v, DType::kF64);
    if (steps == 1) return exact;
    if (!is_floating(part)) return g.constant(std::trunc(v), DType::kF64);
    return g.convert(g.convert(exact, part), DType::kF64);
  };
  Value exponent = ramp(g, t, ctx.complex_value(0), ctx.complex_value(1), steps, end_point);
  Value base = g.constant(ctx.real(3), DType::kF64, t.dims);
  if (is_complex(t.dtype)) base = g.complex(base, g.constant(0.0, DType::kF64, t.dims));
  return {g.convert(g.binary("power", base, exponent), t.dtype)};
}

// _efficientzerotensor(size, dtype, ...): autograd's zero gradient. CPU marks it with the ZeroTensor key to
// skip work; on tpu it is an ordinary tensor of zeros.
std::vector<Value> lower_efficient_zero_tensor(LoweringContext& ctx) {
  const Type& t = ctx.outputs.at(0);
  return {ctx.graph.constant(0.0, t.dtype, t.dims)};
}

}  // namespace

void add_factory_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_efficientzerotensor", &lower_efficient_zero_tensor});
  table.push_back({"aten::arange.start_out", &lower_arange, false, false, /*scalars_shape_output=*/true});
  table.push_back({"aten::linspace.out", &lower_linspace});
  table.push_back({"aten::logspace.out", &lower_logspace});
}

}  // namespace torchtpu::lowering
