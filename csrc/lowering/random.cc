// Random sampling from a functional generator state.
//
// The caller passes the generator's (seed, offset) as a ui64[2] input and advances the offset by the
// number of draws, so `torch.manual_seed` reproduces a run and a fused or compiled graph can carry the
// state like any other value. Bits come from rng_bit_generator (Threefry), which is counter based.
#include <cmath>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx) { return ctx.outputs.at(0); }

// Uniform floats in [0, 1) of `dtype` (float32 or float64) from the mantissa bits.
Value unit_uniform(Graph& g, Value state, const std::vector<int64_t>& dims, DType dtype) {
  const bool wide = dtype == DType::kF64;
  const DType bits_type = wide ? DType::kU64 : DType::kU32;
  Value bits = g.rng_bit_generator(state, Type{bits_type, dims}).second;
  const int64_t shift = wide ? 12 : 9;
  const int64_t one_bits = wide ? 0x3FF0000000000000LL : 0x3F800000LL;
  Value mantissa = g.binary("shift_right_logical", bits, g.constant_int(shift, bits_type, dims));
  Value in_one_two = g.binary("or", mantissa, g.constant_int(one_bits, bits_type, dims));
  Value floats = g.bitcast_convert(in_one_two, Type{dtype, dims});
  return g.binary("subtract", floats, g.constant(1.0, dtype, dims));
}

DType sample_dtype(DType out_dtype) { return out_dtype == DType::kF64 ? DType::kF64 : DType::kF32; }

// uniform_(self, from, to, generator)
std::vector<Value> lower_uniform(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const DType dtype = sample_dtype(t.dtype);
  Value u = unit_uniform(g, ctx.rng_state, t.dims, dtype);
  const double from = ctx.real(1);
  const double to = ctx.real(2);
  Value scaled = g.binary("add", g.binary("multiply", u, g.constant(to - from, dtype, t.dims)),
                          g.constant(from, dtype, t.dims));
  return {g.convert(scaled, t.dtype)};
}

// normal_(self, mean, std, generator): Box-Muller over two uniform draws per sample.
std::vector<Value> lower_normal(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const DType dtype = sample_dtype(t.dtype);
  std::vector<int64_t> pair_dims = t.dims;
  pair_dims.insert(pair_dims.begin(), 2);
  Value u = unit_uniform(g, ctx.rng_state, pair_dims, dtype);
  std::vector<int64_t> start(pair_dims.size(), 0), limit = pair_dims, unit(pair_dims.size(), 1);
  limit[0] = 1;
  Value u1 = g.reshape(g.slice(u, start, limit, unit), t.dims);
  start[0] = 1;
  limit[0] = 2;
  Value u2 = g.reshape(g.slice(u, start, limit, unit), t.dims);
  // 1 - u1 lies in (0, 1], so the log is finite.
  Value radius_sq = g.binary("multiply", g.constant(-2.0, dtype, t.dims),
                             g.unary("log", g.binary("subtract", g.constant(1.0, dtype, t.dims), u1)));
  Value angle = g.binary("multiply", g.constant(2.0 * M_PI, dtype, t.dims), u2);
  Value z = g.binary("multiply", g.unary("sqrt", radius_sq), g.unary("cosine", angle));
  Value sample = g.binary("add", g.binary("multiply", z, g.constant(ctx.real(2), dtype, t.dims)),
                          g.constant(ctx.real(1), dtype, t.dims));
  return {g.convert(sample, t.dtype)};
}

}  // namespace

void add_random_rules(std::vector<Rule>& table) {
  table.push_back({"aten::normal_", &lower_normal, true, true});
  table.push_back({"aten::uniform_", &lower_uniform, true, true});
}

}  // namespace torchtpu::lowering
