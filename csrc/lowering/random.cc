// Random sampling from a functional generator state.
//
// The caller passes the generator's (seed, offset) as a ui64[2] input and advances the offset by the
// number of draws, so `torch.manual_seed` reproduces a run and a fused or compiled graph can carry the
// state like any other value. Bits come from rng_bit_generator (Threefry), which is counter based.
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

DType sample_dtype(DType out_dtype) { return out_dtype == DType::kF64 ? DType::kF64 : DType::kF32; }

// The complex values of [..., 2] (real, imaginary) pairs of one real dtype, as [...].
Value complex_from_pairs(Graph& g, Value pairs) {
  const Type& t = g.type(pairs);
  const std::vector<int64_t> dims(t.dims.begin(), t.dims.end() - 1);
  std::vector<int64_t> start(t.dims.size(), 0), limit = t.dims, unit(t.dims.size(), 1);
  limit.back() = 1;
  Value re = g.reshape(g.slice(pairs, start, limit, unit), dims);
  start.back() = 1;
  limit.back() = 2;
  Value im = g.reshape(g.slice(pairs, start, limit, unit), dims);
  return g.complex(re, im);
}

// Mantissa digits of a float type: random_ on floats draws integers every value of which is exact.
int64_t float_digits(DType dtype) {
  switch (dtype) {
    case DType::kF16: return 11;
    case DType::kBF16: return 8;
    case DType::kF8E4M3FN:
    case DType::kF8E4M3FNUZ: return 4;
    case DType::kF8E5M2:
    case DType::kF8E5M2FNUZ: return 3;
    case DType::kF64: return 53;
    default: return 24;
  }
}

// uniform_(self, from, to, generator). A complex tensor's real and imaginary parts are each drawn from
// [from, to), as CPU fills its real view.
std::vector<Value> lower_uniform(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const bool complex = is_complex(t.dtype);
  const DType dtype = sample_dtype(complex ? complex_part(t.dtype) : t.dtype);
  std::vector<int64_t> dims = t.dims;
  if (complex) dims.push_back(2);
  Value u = unit_uniform(g, ctx.rng_state, dims, dtype);
  const DType stored = complex ? complex_part(t.dtype) : t.dtype;
  if (stored == DType::kF16 || stored == DType::kBF16) {
    // As CPU: a 16-bit uniform has only its type's mantissa digits of randomness, k / 2^digits, so rounding
    // to the type never gives 1 (a float32 draw near 1 would round up to it).
    const double steps = std::ldexp(1.0, static_cast<int>(float_digits(stored)));
    u = g.binary("multiply", g.unary("floor", g.binary("multiply", u, g.constant(steps, dtype, dims))),
                 g.constant(1.0 / steps, dtype, dims));
  }
  const double from = ctx.real(1);
  const double to = ctx.real(2);
  // Both are read here, so every pair of values is its own program and the check runs for each.
  if (!(from <= to)) throw std::invalid_argument("uniform_ expects to return a [from, to) range");
  Value scaled = g.binary("add", g.binary("multiply", u, g.constant(to - from, dtype, dims)),
                          g.constant(from, dtype, dims));
  // Rounding to the stored type can still reach `to` (2 + 255/256 is 3 in bfloat16); that value becomes
  // `from`, as CUDA's kernel does, so the range stays [from, to).
  Value rounded = g.convert(scaled, stored);
  const std::vector<int64_t>& rounded_dims = g.type(rounded).dims;
  rounded = g.select(g.compare(rounded, g.constant(to, stored, rounded_dims), ir::Comparison::kEQ),
                     g.constant(from, stored, rounded_dims), rounded);
  if (!complex) return {rounded};
  return {complex_from_pairs(g, rounded)};
}

// Standard normal samples of `dtype` (float32 or float64): Box-Muller over two uniform draws per sample.
Value standard_normal(Graph& g, Value state, const std::vector<int64_t>& dims, DType dtype) {
  std::vector<int64_t> pair_dims = dims;
  pair_dims.insert(pair_dims.begin(), 2);
  Value u = unit_uniform(g, state, pair_dims, dtype);
  std::vector<int64_t> start(pair_dims.size(), 0), limit = pair_dims, unit(pair_dims.size(), 1);
  limit[0] = 1;
  Value u1 = g.reshape(g.slice(u, start, limit, unit), dims);
  start[0] = 1;
  limit[0] = 2;
  Value u2 = g.reshape(g.slice(u, start, limit, unit), dims);
  // 1 - u1 lies in (0, 1], so the log is finite.
  Value radius_sq = g.binary("multiply", g.constant(-2.0, dtype, dims),
                             g.unary("log", g.binary("subtract", g.constant(1.0, dtype, dims), u1)));
  Value angle = g.binary("multiply", g.constant(2.0 * M_PI, dtype, dims), u2);
  return g.binary("multiply", g.unary("sqrt", radius_sq), g.unary("cosine", angle));
}

// mean + std * z in the sampling dtype; `mean` and `std` are already of that type and shape.
Value shift_and_scale(Graph& g, Value z, Value mean, Value std) {
  return g.binary("add", g.binary("multiply", z, std), mean);
}

// Samples of normal(mean, std) in the sampling dtype, mean and std being the scalar arguments 1 and 2
// (normal_, log_normal_).
Value normal_with_scalar_moments(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const DType dtype = sample_dtype(t.dtype);
  Value z = standard_normal(g, ctx.rng_state, t.dims, dtype);
  return shift_and_scale(g, z, g.constant(ctx.real(1), dtype, t.dims), g.constant(ctx.real(2), dtype, t.dims));
}

// normal_(self, mean, std, generator). A complex tensor draws its parts like torch's view_as_real(self):
// each part normal(mean, std / sqrt(2)).
std::vector<Value> lower_normal(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  if (!is_complex(t.dtype)) return {g.convert(normal_with_scalar_moments(ctx), t.dtype)};
  const DType part = complex_part(t.dtype);
  std::vector<int64_t> pairs = t.dims;
  pairs.push_back(2);
  Value z = shift_and_scale(g, standard_normal(g, ctx.rng_state, pairs, part), g.constant(ctx.real(1), part, pairs),
                            g.constant(ctx.real(2) / std::sqrt(2.0), part, pairs));
  return {complex_from_pairs(g, z)};
}

// normal.Tensor_Tensor / Tensor_float / float_Tensor (mean, std, generator): the tensor arguments broadcast. A
// negative (or NaN) std tensor fails CPU's value check; with checks off such samples are NaN rather than
// quietly drawn from normal(mean, |std|).
std::vector<Value> lower_normal_functional(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const Type compute{sample_dtype(t.dtype), t.dims};
  auto operand = [&](size_t i) {
    return ctx.args[i].kind == Arg::Kind::kTensor ? cast_to(g, ctx.tensor(i), compute)
                                                 : g.constant(ctx.real(i), compute.dtype, t.dims);
  };
  Value mean = operand(0);
  Value std = operand(1);
  if (ctx.args[1].kind == Arg::Kind::kTensor) {
    Value given = ctx.tensor(1);
    const Type& s = g.type(given);
    ctx.check(CheckKind::kNormalStd, g.unary("not", g.compare(given, g.constant(0.0, s.dtype, s.dims), ir::Comparison::kGE)));
  }
  Value z = standard_normal(g, ctx.rng_state, t.dims, compute.dtype);
  Value sample = shift_and_scale(g, z, mean, std);
  Value negative = g.compare(std, g.constant(0.0, compute.dtype, t.dims), ir::Comparison::kLT);
  sample = g.select(negative, g.constant(std::nan(""), compute.dtype, t.dims), sample);
  return {g.convert(sample, t.dtype)};
}

// log_normal_(self, mean, std, generator) = exp(normal(mean, std))
std::vector<Value> lower_log_normal(LoweringContext& ctx) {
  return {ctx.graph.convert(ctx.graph.unary("exponential", normal_with_scalar_moments(ctx)), out(ctx).dtype)};
}

// cauchy_(self, median, sigma, generator): inverse CDF, median + sigma * tan(pi * (u - 1/2)).
std::vector<Value> lower_cauchy(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const DType dtype = sample_dtype(t.dtype);
  Value u = unit_uniform(g, ctx.rng_state, t.dims, dtype);
  Value centred = g.binary("multiply", g.binary("subtract", u, g.constant(0.5, dtype, t.dims)),
                           g.constant(M_PI, dtype, t.dims));
  Value sample = shift_and_scale(g, g.chlo("tan", {centred}, Type{dtype, t.dims}),
                                 g.constant(ctx.real(1), dtype, t.dims), g.constant(ctx.real(2), dtype, t.dims));
  return {g.convert(sample, t.dtype)};
}

// geometric_(self, p, generator): trials until the first success, ceil(log(1 - u) / log(1 - p)) >= 1.
std::vector<Value> lower_geometric(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const double p = ctx.real(1);
  if (!(p > 0 && p < 1)) {
    throw std::invalid_argument("geometric_ expects p to be in (0, 1), but got p=" + std::to_string(p));
  }
  const DType dtype = sample_dtype(t.dtype);
  Value u = unit_uniform(g, ctx.rng_state, t.dims, dtype);
  Value tail = g.unary("log", g.binary("subtract", g.constant(1.0, dtype, t.dims), u));
  Value trials = g.unary("ceil", g.binary("divide", tail, g.constant(std::log1p(-p), dtype, t.dims)));
  // u = 0 gives 0 trials; the support starts at 1.
  trials = g.binary("maximum", trials, g.constant(1.0, dtype, t.dims));
  return {g.convert(trials, t.dtype)};
}

// ---- bernoulli, exponential -----------------------------------------------------------------------

// Draws u in [0, 1) and returns u < p, so p = 0 never and p = 1 always fires.
Value bernoulli_mask(Graph& g, Value state, Value p, const std::vector<int64_t>& dims) {
  const DType dtype = sample_dtype(g.type(p).dtype);
  Value u = unit_uniform(g, state, dims, dtype);
  return g.compare(u, cast_to(g, p, Type{dtype, dims}), ir::Comparison::kLT);
}

// bernoulli_.float(self, p, generator): self's old values are not read. PyTorch's meta kernel does not
// check p, so the rule does, with CPU's message.
std::vector<Value> lower_bernoulli_float(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  if (!(ctx.real(1) >= 0 && ctx.real(1) <= 1)) {
    throw std::invalid_argument("bernoulli_ expects p to be in [0, 1], but got p=" + std::to_string(ctx.real(1)));
  }
  Value p = g.constant(ctx.real(1), sample_dtype(t.dtype));
  return {g.convert(bernoulli_mask(g, ctx.rng_state, p, t.dims), t.dtype)};
}

// CPU's check of a probability tensor: each in [0, 1] (NaN fails).
void check_bernoulli_p(LoweringContext& ctx, Value p) {
  Graph& g = ctx.graph;
  const Type& t = g.type(p);
  Value inside = g.binary("and", g.compare(p, g.constant(0.0, t.dtype, t.dims), ir::Comparison::kGE),
                          g.compare(p, g.constant(1.0, t.dtype, t.dims), ir::Comparison::kLE));
  ctx.check(CheckKind::kBernoulliP, g.unary("not", inside));
}

// bernoulli_.Tensor(self, p, generator): p broadcasts to self's shape.
std::vector<Value> lower_bernoulli_tensor(LoweringContext& ctx) {
  const Type& t = out(ctx);
  check_bernoulli_p(ctx, ctx.tensor(1));
  return {ctx.graph.convert(bernoulli_mask(ctx.graph, ctx.rng_state, ctx.tensor(1), t.dims), t.dtype)};
}

// bernoulli(self, generator): self holds the probabilities.
std::vector<Value> lower_bernoulli(LoweringContext& ctx) {
  const Type& t = out(ctx);
  check_bernoulli_p(ctx, ctx.tensor(0));
  return {ctx.graph.convert(bernoulli_mask(ctx.graph, ctx.rng_state, ctx.tensor(0), t.dims), t.dtype)};
}

// exponential_(self, lambd, generator): inverse CDF, -log(1 - u) / lambd; 1 - u lies in (0, 1].
std::vector<Value> lower_exponential(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const DType dtype = sample_dtype(t.dtype);
  Value u = unit_uniform(g, ctx.rng_state, t.dims, dtype);
  Value tail = g.unary("log", g.binary("subtract", g.constant(1.0, dtype, t.dims), u));
  Value sample = g.binary("divide", tail, g.constant(-ctx.real(1), dtype, t.dims));
  return {g.convert(sample, t.dtype)};
}

// ---- random_ --------------------------------------------------------------------------------------

// Integers uniform in [low, low + range) as `dtype`, from 64 random bits each; `range` 0 means 2^64.
// Like PyTorch, the value is bits mod range, whose bias is negligible against 64 bits.
Value random_integers(Graph& g, Value state, const Type& t, int64_t low, uint64_t range) {
  Value bits = g.rng_bit_generator(state, Type{DType::kU64, t.dims}).second;
  if (range != 0) {
    bits = g.binary("remainder", bits, g.constant_int(static_cast<int64_t>(range), DType::kU64, t.dims));
  }
  Value signed_bits = g.bitcast_convert(bits, Type{DType::kI64, t.dims});
  Value shifted = g.binary("add", signed_bits, g.constant_int(low, DType::kI64, t.dims));  // wraps like C++
  return g.convert(shifted, t.dtype);
}


// Largest value random_ may produce for `dtype` when no upper bound is given.
uint64_t default_upper(DType dtype) {
  if (is_floating(dtype)) return uint64_t{1} << float_digits(dtype);
  switch (dtype) {
    case DType::kBool: return 1;
    case DType::kI8: return 127;
    case DType::kI16: return 32767;
    case DType::kI32: return std::numeric_limits<int32_t>::max();
    case DType::kU8: return 255;
    case DType::kU16: return std::numeric_limits<uint16_t>::max();
    case DType::kU32: return std::numeric_limits<uint32_t>::max();
    case DType::kU64: return std::numeric_limits<uint64_t>::max();
    default: return std::numeric_limits<int64_t>::max();
  }
}

// random_(self, generator): [0, default_upper] inclusive.
std::vector<Value> lower_random(LoweringContext& ctx) {
  const Type& t = out(ctx);
  return {random_integers(ctx.graph, ctx.rng_state, t, 0, default_upper(t.dtype) + 1)};
}

// The meta kernels of random_ do not check the bounds; CPU does.
void check_range(int64_t from, int64_t to) {
  if (from >= to) {
    throw std::invalid_argument("random_ expects 'from' to be less than 'to', but got from=" + std::to_string(from) +
                                " >= to=" + std::to_string(to));
  }
}

// CPU's random_ also refuses bounds its dtype cannot hold: `from` and `to - 1` must lie within the type's
// range (64-bit integers, float32, bfloat16 and float64 hold every int64). The names are those CPU prints.
void check_bounds(DType dtype, int64_t from, std::optional<int64_t> to_inclusive) {
  struct Bounds {
    double low, high;
    const char* name;
  };
  std::optional<Bounds> bounds;
  switch (dtype) {
    case DType::kBool: bounds = Bounds{0, 1, "bool"}; break;
    case DType::kU8: bounds = Bounds{0, 255, "unsigned char"}; break;
    case DType::kI8: bounds = Bounds{-128, 127, "signed char"}; break;
    case DType::kI16: bounds = Bounds{-32768, 32767, "short int"}; break;
    case DType::kU16: bounds = Bounds{0, 65535, "short unsigned int"}; break;
    case DType::kI32: bounds = Bounds{-2147483648.0, 2147483647.0, "int"}; break;
    case DType::kU32: bounds = Bounds{0, 4294967295.0, "unsigned int"}; break;
    case DType::kU64: bounds = Bounds{0, 18446744073709551615.0, "long unsigned int"}; break;
    case DType::kF16: bounds = Bounds{-65504, 65504, "c10::Half"}; break;
    default: return;
  }
  auto inside = [&](int64_t v) { return static_cast<double>(v) >= bounds->low && static_cast<double>(v) <= bounds->high; };
  if (!inside(from)) throw std::invalid_argument(std::string("from is out of bounds for ") + bounds->name);
  if (to_inclusive && !inside(*to_inclusive)) {
    throw std::invalid_argument(std::string("to - 1 is out of bounds for ") + bounds->name);
  }
}

// random_.to(self, to, generator): [0, to).
std::vector<Value> lower_random_to(LoweringContext& ctx) {
  check_range(0, ctx.integer(1));
  check_bounds(out(ctx).dtype, 0, ctx.integer(1) - 1);
  return {random_integers(ctx.graph, ctx.rng_state, out(ctx), 0, static_cast<uint64_t>(ctx.integer(1)))};
}

// random_.from(self, from, to?, generator): [from, to), or [from, default_upper] without `to`.
std::vector<Value> lower_random_from(LoweringContext& ctx) {
  const Type& t = out(ctx);
  const int64_t from = ctx.integer(1);
  if (!ctx.is_none(2)) check_range(from, ctx.integer(2));
  check_bounds(t.dtype, from, ctx.is_none(2) ? std::nullopt : std::optional<int64_t>(ctx.integer(2) - 1));
  const uint64_t range = ctx.is_none(2) ? default_upper(t.dtype) - static_cast<uint64_t>(from) + 1
                                        : static_cast<uint64_t>(ctx.integer(2)) - static_cast<uint64_t>(from);
  return {random_integers(ctx.graph, ctx.rng_state, t, from, range)};
}

// ---- dropout --------------------------------------------------------------------------------------

// native_dropout(input, p, train?) -> (output, mask): keeps each element with probability 1 - p and
// scales kept ones by 1 / (1 - p) (by 0 when p = 1). Multiplying by the mask, not selecting, matches
// PyTorch for inf/NaN inputs. Not training: the input and an all-true mask.
std::vector<Value> lower_native_dropout(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type t = g.type(x);
  const bool train = ctx.is_none(2) || ctx.boolean(2);
  if (!train) return {x, g.constant_int(1, DType::kBool, t.dims)};
  const double keep = 1.0 - ctx.real(1);
  const DType compute = accumulation_dtype(t.dtype);
  Value mask = bernoulli_mask(g, ctx.rng_state, g.constant(keep, DType::kF32), t.dims);
  Value kept = g.binary("multiply", g.convert(x, compute), g.convert(mask, compute));
  Value scaled = g.binary("multiply", kept, g.constant(keep == 0 ? 0.0 : 1.0 / keep, compute, t.dims));
  return {g.convert(scaled, t.dtype), mask};
}

// native_dropout_backward(grad_output, mask, scale) = grad_output * mask * scale.
std::vector<Value> lower_native_dropout_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const DType compute = accumulation_dtype(t.dtype);
  Value kept = g.binary("multiply", cast_to(g, ctx.tensor(0), Type{compute, t.dims}),
                        cast_to(g, ctx.tensor(1), Type{compute, t.dims}));
  return {g.convert(g.binary("multiply", kept, g.constant(ctx.real(2), compute, t.dims)), t.dtype)};
}

// ---- randperm -------------------------------------------------------------------------------------

// randperm.generator_out(n, generator, out): positions sorted by 64-bit random keys. Ties, which would
// bias a stable sort toward the identity, have probability about n^2 / 2^65.
std::vector<Value> lower_randperm(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  if (t.numel() <= 1) return {g.convert(g.iota(Type{DType::kI64, t.dims}, 0), t.dtype)};
  Value keys = g.rng_bit_generator(ctx.rng_state, Type{DType::kU64, t.dims}).second;
  return {g.convert(stable_argsort(g, keys, 0, false), t.dtype)};
}

// ---- multinomial -----------------------------------------------------------------------------------

// multinomial(self, num_samples, replacement, generator): self holds unnormalised probabilities over the last
// dim (1-d or 2-d). Gumbel-max sampling: log(p) plus Gumbel noise, largest first. One noise draw per row
// gives its first num_samples keys as a draw without replacement; with replacement every sample draws its
// own noise and takes its largest key. Zero-probability categories get -inf keys and are never drawn.
// Negative, infinite or NaN probabilities and rows summing to zero fail CPU's value checks.
std::vector<Value> lower_multinomial(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const Type& probs = ctx.type_of(0);
  const int64_t categories = probs.dims.back();
  const int64_t rows = probs.rank() == 2 ? probs.dims[0] : 1;
  const int64_t samples = ctx.integer(1);
  const bool replacement = ctx.boolean(2);
  // The meta kernel does not check these; CPU's kernel does (the glue raises CPU's message).
  if (samples <= 0) throw std::invalid_argument("cannot sample n_sample <= 0 samples");
  if (!replacement && samples > categories) {
    throw std::invalid_argument("cannot sample n_sample > prob_dist.size(-1) samples without replacement");
  }
  if (t.numel() == 0) return {g.constant_int(0, DType::kI64, t.dims)};
  const DType dtype = sample_dtype(probs.dtype);
  Value p = g.convert(g.reshape(ctx.tensor(0), {rows, categories}), dtype);
  const double inf = std::numeric_limits<double>::infinity();
  Value valid = g.binary("and", g.compare(p, g.constant(0.0, dtype, {rows, categories}), ir::Comparison::kGE),
                         g.compare(p, g.constant(inf, dtype, {rows, categories}), ir::Comparison::kLT));
  ctx.check(CheckKind::kProbabilities, g.unary("not", valid));
  Value row_sums = g.reduce(p, g.constant(0.0, dtype), {1}, ir::Reducer::kAdd);
  ctx.check(CheckKind::kProbabilitySum, g.compare(row_sums, g.constant(0.0, dtype, {rows}), ir::Comparison::kLE));
  // keys: [rows, draws, categories], one draw of noise per sample with replacement, one per row without.
  const int64_t draws = replacement ? samples : 1;
  const std::vector<int64_t> dims{rows, draws, categories};
  Value log_p = g.unary("log", g.reshape(p, {rows, 1, categories}));
  Value u = unit_uniform(g, ctx.rng_state, dims, dtype);
  Value gumbel = g.unary("negate", g.unary("log", g.unary("negate", g.unary("log", u))));
  Value keys = g.binary("add", broadcast_to(g, log_p, dims), gumbel);
  Value order = stable_argsort(g, keys, 2, true);
  const int64_t taken = replacement ? 1 : samples;
  Value picked = g.slice(order, {0, 0, 0}, {rows, draws, taken}, {1, 1, 1});
  return {g.reshape(picked, t.dims)};
}

}  // namespace

void add_random_rules(std::vector<Rule>& table) {
  table.push_back({"aten::bernoulli", &lower_bernoulli, true});
  table.push_back({"aten::bernoulli_.Tensor", &lower_bernoulli_tensor, true, true});
  table.push_back({"aten::bernoulli_.float", &lower_bernoulli_float, true, true});
  table.push_back({"aten::cauchy_", &lower_cauchy, true, true});
  table.push_back({"aten::exponential_", &lower_exponential, true, true});
  table.push_back({"aten::geometric_", &lower_geometric, true, true});
  table.push_back({"aten::log_normal_", &lower_log_normal, true, true});
  table.push_back({"aten::multinomial", &lower_multinomial, true});
  table.push_back({"aten::native_dropout", &lower_native_dropout, true});
  table.push_back({"aten::native_dropout_backward", &lower_native_dropout_backward});
  table.push_back({"aten::normal.Tensor_Tensor", &lower_normal_functional, true});
  table.push_back({"aten::normal.Tensor_float", &lower_normal_functional, true});
  table.push_back({"aten::normal.float_Tensor", &lower_normal_functional, true});
  table.push_back({"aten::normal_", &lower_normal, true, true});
  table.push_back({"aten::random_", &lower_random, true, true});
  table.push_back({"aten::random_.from", &lower_random_from, true, true});
  table.push_back({"aten::random_.to", &lower_random_to, true, true});
  table.push_back({"aten::randperm.generator_out", &lower_randperm, true});
  table.push_back({"aten::uniform_", &lower_uniform, true, true});
}

}  // namespace torchtpu::lowering
