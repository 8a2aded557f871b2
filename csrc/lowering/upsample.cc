// Interpolation: upsample_nearest{1,2,3}d, _upsample_nearest_exact{1,2,3}d, upsample_linear1d,
// upsample_bilinear2d, upsample_trilinear3d, upsample_bicubic2d, _upsample_bilinear2d_aa,
// _upsample_bicubic2d_aa, and their backward ops; grid sampling (grid_sampler_{2,3}d and backward) at the
// end of the file.
//
// Every mode is separable: along each spatial dim, output position o reads a few input positions
// ("taps") with fixed weights. The tap indices and weights depend only on static sizes and scales, so
// they are computed here on the host with PyTorch's own index arithmetic (same float type and operation
// order, so every index equals CPU's) and embedded as constant vectors. The forward gathers each tap along
// the dim and sums tap * weight, last dim first: that is the nesting of PyTorch's kernel (the innermost
// dim's taps are combined first), so float32 results match CPU's rounding (bfloat16 inputs compute in
// float32 with weights rounded where CPU rounds them; see spatial_taps). Gathers rather than dense
// weight matrices keep inf/NaN behaviour: a matrix would multiply every input by a 0 weight. The backward
// scatter-adds grad * weight at the same indices, one dim at a time.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "lowering/nn.h"

namespace torchtpu::lowering {
namespace {

// Along one spatial dim: output position o reads input position index[k][o] with weight weight[k][o].
// No taps at all: the dim is left as it is.
struct Taps {
  std::vector<std::vector<double>> index;
  std::vector<std::vector<double>> weight;  // empty: a single tap copied as is (nearest modes)
  std::vector<std::vector<double>> used;    // empty: every tap is used; else 1 / 0 per tap and position
};

enum class Mode { kNearest, kNearestExact, kLinear, kCubic, kLinearAntialias, kCubicAntialias };

bool has_align_corners(Mode mode) { return mode != Mode::kNearest && mode != Mode::kNearestExact; }

// Scale arguments: absent, or the user's scale factor (PyTorch ignores values <= 0).
std::optional<double> scale_arg(const LoweringContext& ctx, size_t i) {
  if (ctx.is_none(i)) return std::nullopt;
  return ctx.real(i);
}

// Input positions per output position, in PyTorch's convention: the user's scale factor inverted, or
// in / out (both in type T, PyTorch's opmath type).
template <typename T>
T inverse_scale(std::optional<double> scale, int64_t in, int64_t out) {
  if (scale && *scale > 0) return static_cast<T>(1.0 / *scale);
  return static_cast<T>(in) / static_cast<T>(out);
}

template <typename T>
T area_scale(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  if (!align_corners) return inverse_scale<T>(scale, in, out);
  return out > 1 ? static_cast<T>(in - 1) / static_cast<T>(out - 1) : T(0);
}

// The (fractional) source coordinate of output position o; linear modes clamp it at 0, cubic does not.
template <typename T>
T source_coordinate(T scale, int64_t o, bool align_corners, bool cubic) {
  if (align_corners) return scale * static_cast<T>(o);
  const T source = scale * (static_cast<T>(o) + T(0.5)) - T(0.5);
  return (!cubic && source < T(0)) ? T(0) : source;
}

// floor of the coordinate (through float, as PyTorch's floorf does) capped at the last position, and
// the distance from it clamped to [0, 1].
template <typename T>
std::pair<int64_t, T> split_coordinate(T coordinate, int64_t in) {
  const int64_t index = std::min(static_cast<int64_t>(std::floor(static_cast<float>(coordinate))), in - 1);
  const T fraction = std::min(std::max(coordinate - static_cast<T>(index), T(0)), T(1));
  return {index, fraction};
}

Taps nearest_taps(Mode mode, int64_t in, int64_t out, std::optional<double> scale) {
  Taps taps;
  taps.index.resize(1);
  const float inverse = inverse_scale<float>(scale, in, out);
  for (int64_t o = 0; o < out; ++o) {
    int64_t source;
    if (mode == Mode::kNearestExact) {
      // (o + 0.5) * scale is computed in double, then floored as a float.
      source = static_cast<int64_t>(std::floor(static_cast<float>((static_cast<double>(o) + 0.5) * inverse)));
    } else if (out == in) {
      source = o;
    } else if (out == 2 * in) {
      source = o >> 1;
    } else {
      source = static_cast<int64_t>(std::floor(static_cast<float>(o) * inverse));
    }
    taps.index[0].push_back(static_cast<double>(std::min(source, in - 1)));
  }
  return taps;
}

// Rounds a float to bfloat16 (nearest even) and back: PyTorch's CPU kernels keep linear and cubic weights
// in the input's type, so bfloat16 inputs see rounded weights.
float round_to_bf16(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  bits = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
  std::memcpy(&value, &bits, sizeof bits);
  return value;
}

template <typename T>
Taps linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale, bool bf16_weights) {
  Taps taps;
  taps.index.resize(2);
  taps.weight.resize(2);
  const T ratio = area_scale<T>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; ++o) {
    int64_t first = o;
    T far_weight = T(0);
    if (out != in) {  // equal sizes copy: PyTorch skips the arithmetic
      std::tie(first, far_weight) = split_coordinate(source_coordinate(ratio, o, align_corners, false), in);
    }
    T near_weight = T(1) - far_weight;
    if (bf16_weights) {
      far_weight = static_cast<T>(round_to_bf16(static_cast<float>(far_weight)));
      near_weight = static_cast<T>(round_to_bf16(static_cast<float>(T(1) - far_weight)));
    }
    taps.index[0].push_back(static_cast<double>(first));
    taps.index[1].push_back(static_cast<double>(first + (first < in - 1 ? 1 : 0)));
    taps.weight[0].push_back(static_cast<double>(near_weight));
    taps.weight[1].push_back(static_cast<double>(far_weight));
  }
  return taps;
}

// Keys' cubic convolution kernel, for |x| <= 1 and 1 < |x| < 2: a = -0.75 for bicubic interpolation, -0.5
// for its antialiased form, as PyTorch's kernels use.
template <typename T>
T cubic_near(T x, T a = T(-0.75)) {
  return ((a + 2) * x - (a + 3)) * x * x + 1;
}
template <typename T>
T cubic_far(T x, T a = T(-0.75)) {
  return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

template <typename T>
Taps cubic_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale, bool bf16_weights) {
  Taps taps;
  taps.index.resize(4);
  taps.weight.resize(4);
  const T ratio = area_scale<T>(in, out, align_corners, scale);
  for (int64_t o = 0; o < out; ++o) {
    const auto [index, t] = split_coordinate(source_coordinate(ratio, o, align_corners, true), in);
    const T weights[4] = {cubic_far<T>(t + T(1)), cubic_near<T>(t), cubic_near<T>(T(1) - t),
                          cubic_far<T>(T(1) - t + T(1))};
    for (int64_t k = 0; k < 4; ++k) {
      // Taps past either edge read the edge element.
      const int64_t source = std::max<int64_t>(std::min(index - 1 + k, in - 1), 0);
      taps.index[static_cast<size_t>(k)].push_back(static_cast<double>(source));
      const T weight = bf16_weights ? static_cast<T>(round_to_bf16(static_cast<float>(weights[k]))) : weights[k];
      taps.weight[static_cast<size_t>(k)].push_back(static_cast<double>(weight));
    }
  }
  return taps;
}

// The antialiasing filters at distance x (in output pixels): the triangle of linear interpolation (half
// width 1) and Keys' cubic convolution with a = -0.5 (half width 2).
template <typename T>
T antialias_filter(bool cubic, T x) {
  x = std::abs(x);
  if (!cubic) return x < T(1) ? T(1) - x : T(0);
  if (x < T(1)) return cubic_near(x, T(-0.5));
  if (x < T(2)) return cubic_far(x, T(-0.5));
  return T(0);
}

// Antialiased linear and cubic (_upsample_bilinear2d_aa, _upsample_bicubic2d_aa): when shrinking, the
// filter widens by the scale so every input pixel contributes. Output o reads the `used` positions
// first..first+count-1 with normalized filter weights; the other taps repeat the last position and are
// masked out. A dim whose size does not change is skipped, as PyTorch's separable kernel does.
template <typename T>
Taps antialias_taps(bool cubic, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  Taps taps;
  if (in == out) return taps;
  const T ratio = area_scale<T>(in, out, align_corners, scale);
  const T half_width = cubic ? T(2) : T(1);
  const T support = ratio >= T(1) ? half_width * ratio : half_width;  // the filter's half width times the scale
  const int64_t widest = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
  const T inverse = ratio >= T(1) ? T(1) / ratio : T(1);
  taps.index.resize(static_cast<size_t>(widest));
  taps.weight.resize(static_cast<size_t>(widest));
  taps.used.resize(static_cast<size_t>(widest));
  for (int64_t o = 0; o < out; ++o) {
    const T center = ratio * (static_cast<T>(o) + T(0.5));
    const int64_t first = std::max<int64_t>(static_cast<int64_t>(center - support + T(0.5)), 0);
    const int64_t count = std::clamp<int64_t>(std::min<int64_t>(static_cast<int64_t>(center + support + T(0.5)), in) - first,
                                              0, widest);
    std::vector<T> weights(static_cast<size_t>(widest), T(0));
    T total = T(0);
    for (int64_t k = 0; k < count; ++k) {
      weights[static_cast<size_t>(k)] =
          antialias_filter(cubic, (static_cast<T>(k + first) - center + T(0.5)) * inverse);
      total += weights[static_cast<size_t>(k)];
    }
    for (int64_t k = 0; k < widest; ++k) {
      T w = weights[static_cast<size_t>(k)];
      if (k < count && total != T(0)) w /= total;
      const int64_t position = first + std::min(k, std::max<int64_t>(count - 1, 0));
      taps.index[static_cast<size_t>(k)].push_back(static_cast<double>(std::clamp<int64_t>(position, 0, in - 1)));
      taps.weight[static_cast<size_t>(k)].push_back(static_cast<double>(w));
      taps.used[static_cast<size_t>(k)].push_back(k < count ? 1 : 0);
    }
  }
  return taps;
}

// float64 inputs compute in double; bf16 rounds the linear and cubic weights to bfloat16.
Taps make_taps(Mode mode, bool wide, bool bf16, int64_t in, int64_t out, bool align_corners,
               std::optional<double> scale) {
  switch (mode) {
    case Mode::kNearest:
    case Mode::kNearestExact: return nearest_taps(mode, in, out, scale);
    case Mode::kLinear:
      return wide ? linear_taps<double>(in, out, align_corners, scale, false)
                  : linear_taps<float>(in, out, align_corners, scale, bf16);
    case Mode::kCubic:
      return wide ? cubic_taps<double>(in, out, align_corners, scale, false)
                  : cubic_taps<float>(in, out, align_corners, scale, bf16);
    case Mode::kLinearAntialias:
    case Mode::kCubicAntialias: {
      const bool cubic = mode == Mode::kCubicAntialias;
      return wide ? antialias_taps<double>(cubic, in, out, align_corners, scale)
                  : antialias_taps<float>(cubic, in, out, align_corners, scale);
    }
  }
  return {};
}

// Reads the op's arguments: forward (self, output_size, [align_corners,] scales...) or backward
// (grad_output, output_size, input_size, [align_corners,] scales...). Returns the taps of each spatial dim.
std::vector<Taps> spatial_taps(const LoweringContext& ctx, Mode mode, bool backward, DType input_dtype,
                               const std::vector<int64_t>& input_dims) {
  const std::vector<int64_t>& output_size = ctx.ints(1);
  const size_t spatial = output_size.size();
  const size_t align_arg = backward ? 3 : 2;
  const bool align_corners = has_align_corners(mode) && ctx.boolean(align_arg);
  const size_t first_scale = align_arg + (has_align_corners(mode) ? 1 : 0);
  // For bfloat16, CPU's linear1d, trilinear3d and bicubic2d kernels keep their weights in bfloat16; its
  // bilinear2d kernel keeps them in float.
  const bool bf16_weights = input_dtype == DType::kBF16 && !(mode == Mode::kLinear && spatial == 2);
  std::vector<Taps> taps;
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t in = input_dims[input_dims.size() - spatial + d];
    taps.push_back(make_taps(mode, input_dtype == DType::kF64, bf16_weights, in, output_size[d], align_corners,
                             scale_arg(ctx, first_scale + d)));
  }
  return taps;
}

// term where tap k is used at its output position, else 0 (a select: an unused tap may read an inf).
Value only_used(Graph& g, Value term, int64_t dim, const Taps& taps, size_t k) {
  if (taps.used.empty()) return term;
  const Type t = g.type(term);
  const int64_t size = t.dims[static_cast<size_t>(dim)];
  Value used = g.compare(constant_vector(g, taps.used[k], DType::kI64), g.constant_int(0, DType::kI64, {size}),
                         ir::Comparison::kNE);
  return g.select(g.broadcast_in_dim(used, t.dims, {dim}), term, g.constant(0, t.dtype, t.dims));
}

// Resamples dim `dim` of x (of the compute dtype) through its taps.
Value resample_dim(Graph& g, Value x, int64_t dim, const Taps& taps) {
  if (taps.index.empty()) return x;
  Value total;
  for (size_t k = 0; k < taps.index.size(); ++k) {
    Value term = take_along(g, x, dim, constant_vector(g, taps.index[k], DType::kI64));
    if (!taps.weight.empty()) {
      const Type t = g.type(term);
      Value weight = g.broadcast_in_dim(constant_vector(g, taps.weight[k], t.dtype), t.dims, {dim});
      term = only_used(g, g.binary("multiply", term, weight), dim, taps, k);
    }
    total = total.valid() ? g.binary("add", total, term) : term;
  }
  return total;
}

// The transpose of resample_dim: each output position's gradient times its weights, added at its taps.
Value spread_dim(Graph& g, Value grad, int64_t dim, const Taps& taps, int64_t in) {
  if (taps.index.empty()) return grad;
  const Type t = g.type(grad);
  std::vector<int64_t> dims = t.dims;
  dims[static_cast<size_t>(dim)] = in;
  Value total = g.constant(0, t.dtype, dims);
  for (size_t k = 0; k < taps.index.size(); ++k) {
    Value term = grad;
    if (!taps.weight.empty()) {
      term = g.binary("multiply", term, g.broadcast_in_dim(constant_vector(g, taps.weight[k], t.dtype), t.dims, {dim}));
      term = only_used(g, term, dim, taps, k);
    }
    total = scatter_along(g, total, dim, constant_vector(g, taps.index[k], DType::kI64), term, ir::Reducer::kAdd);
  }
  return total;
}

std::vector<Value> upsample(LoweringContext& ctx, Mode mode) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Type& result = ctx.outputs.at(0);
  // Nearest modes copy elements, in any dtype; the others compute in PyTorch's opmath type.
  const bool copies = mode == Mode::kNearest || mode == Mode::kNearestExact;
  const std::vector<Taps> taps = spatial_taps(ctx, mode, false, in.dtype, in.dims);
  // Besides floats, CPU's kernels take uint8 images, in the nearest modes and the 2-d bilinear and bicubic
  // ones; another integer input gets CPU's error (the glue asks CPU when a rule refuses).
  const bool image = in.dtype == DType::kU8 && (copies || taps.size() == 2);
  if (!is_floating(in.dtype) && !image) throw std::invalid_argument("upsampling takes floating point or uint8 images");
  const DType compute = copies ? in.dtype : is_floating(in.dtype) ? accumulation_dtype(in.dtype) : DType::kF32;
  // The meta kernels of the linear and cubic modes accept an empty spatial size, CPU's kernels refuse it
  // (the glue then raises CPU's message).
  for (size_t d = in.dims.size() - taps.size(); d < in.dims.size() && !copies; ++d) {
    if (in.dims[d] == 0 || result.dims[d] == 0) {
      throw std::invalid_argument("Input and output sizes should be greater than 0");
    }
  }
  Value x = g.convert(ctx.tensor(0), compute);
  const int64_t first_spatial = in.rank() - static_cast<int64_t>(taps.size());
  for (int64_t d = static_cast<int64_t>(taps.size()) - 1; d >= 0; --d) {
    x = resample_dim(g, x, first_spatial + d, taps[static_cast<size_t>(d)]);
    // uint8: CPU resamples one dim at a time into uint8, weighing in fixed point, so each pass rounds to
    // nearest and clamps to 0..255 (bicubic overshoots).
    if (!copies && !is_floating(result.dtype)) {
      const std::vector<int64_t>& dims = g.type(x).dims;
      x = g.unary("floor", g.binary("add", x, g.constant(0.5, compute, dims)));
      x = g.binary("minimum", g.binary("maximum", x, g.constant(0.0, compute, dims)), g.constant(255.0, compute, dims));
    }
  }
  return {g.convert(x, result.dtype)};
}

std::vector<Value> upsample_backward(LoweringContext& ctx, Mode mode) {
  Graph& g = ctx.graph;
  const Type& result = ctx.outputs.at(0);
  const DType compute = accumulation_dtype(result.dtype);
  const std::vector<Taps> taps = spatial_taps(ctx, mode, true, result.dtype, result.dims);
  Value grad = g.convert(ctx.tensor(0), compute);
  const int64_t first_spatial = result.rank() - static_cast<int64_t>(taps.size());
  for (size_t d = 0; d < taps.size(); ++d) {
    const int64_t dim = first_spatial + static_cast<int64_t>(d);
    grad = spread_dim(g, grad, dim, taps[d], result.dims[static_cast<size_t>(dim)]);
  }
  return {g.convert(grad, result.dtype)};
}

std::vector<Value> lower_upsample_nearest(LoweringContext& ctx) { return upsample(ctx, Mode::kNearest); }
std::vector<Value> lower_upsample_nearest_exact(LoweringContext& ctx) { return upsample(ctx, Mode::kNearestExact); }
std::vector<Value> lower_upsample_linear(LoweringContext& ctx) { return upsample(ctx, Mode::kLinear); }
std::vector<Value> lower_upsample_cubic(LoweringContext& ctx) { return upsample(ctx, Mode::kCubic); }
std::vector<Value> lower_upsample_antialias(LoweringContext& ctx) { return upsample(ctx, Mode::kLinearAntialias); }
std::vector<Value> lower_upsample_antialias_backward(LoweringContext& ctx) {
  return upsample_backward(ctx, Mode::kLinearAntialias);
}
std::vector<Value> lower_upsample_cubic_antialias(LoweringContext& ctx) { return upsample(ctx, Mode::kCubicAntialias); }
std::vector<Value> lower_upsample_cubic_antialias_backward(LoweringContext& ctx) {
  return upsample_backward(ctx, Mode::kCubicAntialias);
}
std::vector<Value> lower_upsample_nearest_backward(LoweringContext& ctx) {
  return upsample_backward(ctx, Mode::kNearest);
}
std::vector<Value> lower_upsample_nearest_exact_backward(LoweringContext& ctx) {
  return upsample_backward(ctx, Mode::kNearestExact);
}
std::vector<Value> lower_upsample_linear_backward(LoweringContext& ctx) { return upsample_backward(ctx, Mode::kLinear); }
std::vector<Value> lower_upsample_cubic_backward(LoweringContext& ctx) { return upsample_backward(ctx, Mode::kCubic); }

// ---- grid_sampler_2d / grid_sampler_3d ------------------------------------------------------------------
//
// Sampling positions come from data, so taps are computed on the device: per spatial dim, each output
// point has 1 (nearest), 2 (bilinear) or 4 (bicubic) input positions with weights; a corner of the
// sampling cell is one tap per dim. The input, moved to [N, spatial..., C] and flattened to rows, is read
// with one row gather per corner; corners outside the input read 0 (a select, so no 0 * inf). The
// backward scatter-adds grad * weight at the same rows and differentiates the weights for the grid.
// Everything is computed in the input's dtype, bfloat16 included: PyTorch's CPU kernels do their
// coordinate and weight arithmetic in scalar_t, and float32 arithmetic would pick other pixels near
// cell edges.

enum class GridMode { kBilinear = 0, kNearest = 1, kBicubic = 2 };
enum class GridPadding { kZeros = 0, kBorder = 1, kReflection = 2 };

struct GridTap {
  Value index;        // i64, [N, out...], clamped into the input (read only where `inside`)
  Value inside;       // i1
  Value weight;       // compute dtype; invalid for nearest (weight 1)
  Value weight_grad;  // d weight / d source coordinate; invalid for nearest
};

struct GridDim {
  std::vector<GridTap> taps;
  Value source_grad;  // d source coordinate / d grid coordinate
};

class GridSampler {
 public:
  GridSampler(Graph& g, GridMode mode, GridPadding padding, bool align_corners, DType compute)
      : g_(g), mode_(mode), padding_(padding), align_corners_(align_corners), compute_(compute) {}

  // The taps of one spatial dim of `size` for the grid coordinates `coordinate` ([N, out...]).
  GridDim taps(Value coordinate, int64_t size) {
    dims_ = g_.type(coordinate).dims;
    GridDim dim;
    // Unnormalize [-1, 1] to pixel coordinates; d/dcoordinate is the constant scale.
    const double scale = align_corners_ ? static_cast<double>(size - 1) / 2 : static_cast<double>(size) / 2;
    Value x = align_corners_ ? mul(div(add(coordinate, c(1)), c(2)), c(static_cast<double>(size - 1)))
                             : div(sub(mul(add(coordinate, c(1)), c(static_cast<double>(size))), c(1)), c(2));
    dim.source_grad = c(scale);
    if (mode_ == GridMode::kBicubic) {
      // Bicubic taps keep the unpadded coordinate; padding applies to each tap's integer position.
      Value first = g_.unary("floor", x);
      Value t = sub(x, first);
      const Value weights[4] = {cubic_far_of(add(t, c(1))), cubic_near_of(t), cubic_near_of(sub(c(1), t)),
                                cubic_far_of(add(sub(c(1), t), c(1)))};
      const Value weight_grads[4] = {cubic_far_slope(add(t, c(1))), cubic_near_slope(t),
                                     neg(cubic_near_slope(sub(c(1), t))), neg(cubic_far_slope(add(sub(c(1), t), c(1))))};
      for (int k = 0; k < 4; ++k) {
        Value position = pad_coordinate(add(first, c(k - 1)), size, nullptr);
        GridTap tap = integer_tap(g_.convert(position, DType::kI64), size);  // truncation, as PyTorch casts
        tap.weight = weights[k];
        tap.weight_grad = weight_grads[k];
        dim.taps.push_back(tap);
      }
      return dim;
    }
    Value padding_grad;
    x = pad_coordinate(x, size, &padding_grad);
    if (padding_grad.valid()) dim.source_grad = mul(dim.source_grad, padding_grad);
    if (mode_ == GridMode::kNearest) {
      dim.taps.push_back(integer_tap(g_.convert(g_.unary("round_nearest_even", x), DType::kI64), size));
      return dim;
    }
    Value low = g_.unary("floor", x);
    Value high = add(low, c(1));
    GridTap near = integer_tap(g_.convert(low, DType::kI64), size);
    GridTap far = integer_tap(g_.convert(high, DType::kI64), size);
    near.weight = sub(high, x);
    near.weight_grad = c(-1);
    far.weight = sub(x, low);
    far.weight_grad = c(1);
    dim.taps = {near, far};
    return dim;
  }

 private:
  Value c(double v) { return g_.constant(v, compute_, dims_); }
  Value add(Value a, Value b) { return g_.binary("add", a, b); }
  Value sub(Value a, Value b) { return g_.binary("subtract", a, b); }
  Value mul(Value a, Value b) { return g_.binary("multiply", a, b); }
  Value div(Value a, Value b) { return g_.binary("divide", a, b); }
  Value neg(Value a) { return g_.unary("negate", a); }
  Value less(Value a, Value b) { return g_.compare(a, b, ir::Comparison::kLT); }

  GridTap integer_tap(Value index, int64_t size) {
    Value zero = g_.constant_int(0, DType::kI64, dims_), last = g_.constant_int(size - 1, DType::kI64, dims_);
    GridTap tap;
    tap.inside = g_.binary("and", g_.compare(index, zero, ir::Comparison::kGE), g_.compare(index, last, ir::Comparison::kLE));
    tap.index = g_.binary("minimum", g_.binary("maximum", index, zero), last);
    return tap;
  }

  // PyTorch's clip: max(x, 0) then min(size - 1, .), with std::max/std::min's NaN behaviour. Sets
  // *grad to 1 strictly inside (0, size - 1), else 0.
  Value clip(Value x, int64_t size, Value* grad) {
    Value limit = c(static_cast<double>(size - 1));
    if (grad) *grad = g_.select(g_.binary("and", less(c(0), x), less(x, limit)), c(1), c(0));
    Value low = g_.select(less(x, c(0)), c(0), x);
    return g_.select(less(low, limit), low, limit);
  }

  // Reflects x into [twice_low / 2, twice_high / 2]; *grad gets the sign of dx'/dx.
  Value reflect(Value x, int64_t twice_low, int64_t twice_high, Value* grad) {
    if (twice_low == twice_high) {
      if (grad) *grad = c(0);
      return c(0);
    }
    const double low = static_cast<double>(twice_low) / 2, span = static_cast<double>(twice_high - twice_low) / 2;
    Value shifted = sub(x, c(low));
    Value distance = g_.unary("abs", shifted);
    Value extra = g_.binary("remainder", distance, c(span));
    Value flips = g_.unary("floor", div(distance, c(span)));
    Value even = g_.compare(sub(flips, mul(c(2), g_.unary("floor", div(flips, c(2))))), c(0), ir::Comparison::kEQ);
    if (grad) {
      Value direction = g_.select(less(shifted, c(0)), c(-1), c(1));
      *grad = g_.select(even, direction, neg(direction));
    }
    return g_.select(even, add(extra, c(low)), add(sub(c(span), extra), c(low)));
  }

  // compute_coordinates: the padding mode applied to a pixel coordinate; *grad (if asked) its derivative,
  // left invalid for zeros padding (derivative 1).
  Value pad_coordinate(Value x, int64_t size, Value* grad) {
    if (padding_ == GridPadding::kBorder) return clip(x, size, grad);
    if (padding_ == GridPadding::kReflection) {
      Value reflect_grad, clip_grad;
      x = align_corners_ ? reflect(x, 0, 2 * (size - 1), grad ? &reflect_grad : nullptr)
                         : reflect(x, -1, 2 * size - 1, grad ? &reflect_grad : nullptr);
      x = clip(x, size, grad ? &clip_grad : nullptr);
      if (grad) *grad = mul(reflect_grad, clip_grad);
    }
    return x;
  }

  // Keys' cubic kernel (a = -0.75) and its slope, for |x| <= 1 and 1 < |x| < 2.
  Value cubic_near_of(Value x) { return add(mul(mul(sub(mul(c(1.25), x), c(2.25)), x), x), c(1)); }
  Value cubic_far_of(Value x) {
    return sub(mul(add(mul(sub(mul(c(-0.75), x), c(-3.75)), x), c(-6)), x), c(-3));
  }
  Value cubic_near_slope(Value x) { return mul(sub(mul(c(3.75), x), c(4.5)), x); }
  Value cubic_far_slope(Value x) { return add(mul(sub(mul(c(-2.25), x), c(-7.5)), x), c(-6)); }

  Graph& g_;
  GridMode mode_;
  GridPadding padding_;
  bool align_corners_;
  DType compute_;
  std::vector<int64_t> dims_;
};

// What grid_sampler_{2,3}d and its backward share: input moved to rows, the taps of every spatial dim.
struct GridSample {
  int64_t batch, channels;
  std::vector<int64_t> in, out;  // spatial sizes
  Value rows;                    // input as [N * prod(in), C], compute dtype
  std::vector<GridDim> dims;     // per spatial dim, outermost first
  DType compute;  // the input's dtype (see the section comment)
};

// (input, grid, interpolation_mode, padding_mode, align_corners) starting at argument `first`.
GridSample grid_sample_setup(LoweringContext& ctx, size_t first) {
  Graph& g = ctx.graph;
  const Type input = ctx.type_of(first), grid = ctx.type_of(first + 1);
  GridSample s;
  s.compute = input.dtype;
  s.batch = input.dims[0];
  s.channels = input.dims[1];
  s.in.assign(input.dims.begin() + 2, input.dims.end());
  s.out.assign(grid.dims.begin() + 1, grid.dims.end() - 1);
  const size_t spatial = s.in.size();
  std::vector<int64_t> moved = {0};
  for (size_t d = 0; d < spatial; ++d) moved.push_back(static_cast<int64_t>(d) + 2);
  moved.push_back(1);
  s.rows = g.reshape(g.transpose(g.convert(ctx.tensor(first), s.compute), moved), {input.numel() / s.channels, s.channels});
  GridSampler sampler(g, static_cast<GridMode>(ctx.integer(first + 2)), static_cast<GridPadding>(ctx.integer(first + 3)),
                      ctx.boolean(first + 4), s.compute);
  Value coordinates = g.convert(ctx.tensor(first + 1), s.compute);
  const int64_t last = grid.rank() - 1;
  std::vector<int64_t> point_dims(grid.dims.begin(), grid.dims.end() - 1);
  for (size_t d = 0; d < spatial; ++d) {
    // The grid's last dim lists x (the innermost spatial dim) first.
    const int64_t component = static_cast<int64_t>(spatial - 1 - d);
    std::vector<int64_t> start(grid.dims.size(), 0), limit = grid.dims;
    start[static_cast<size_t>(last)] = component;
    limit[static_cast<size_t>(last)] = component + 1;
    Value coordinate = g.reshape(g.slice(coordinates, start, limit, std::vector<int64_t>(grid.dims.size(), 1)), point_dims);
    s.dims.push_back(sampler.taps(coordinate, s.in[d]));
  }
  return s;
}

// One corner of the sampling cell: a tap per dim.
struct Corner {
  Value row;     // [N * prod(out), 1] row of GridSample::rows
  Value inside;  // [N, out...]
  Value weight;  // product of the taps' weights (invalid for nearest)
  std::vector<size_t> tap;
};

std::vector<Corner> grid_corners(Graph& g, const GridSample& s) {
  std::vector<int64_t> extent;
  for (const GridDim& d : s.dims) extent.push_back(static_cast<int64_t>(d.taps.size()));
  std::vector<int64_t> point_dims = {s.batch};
  point_dims.insert(point_dims.end(), s.out.begin(), s.out.end());
  const Type index_type{DType::kI64, point_dims};
  int64_t plane = 1;
  for (int64_t v : s.in) plane *= v;
  std::vector<Corner> corners;
  std::vector<int64_t> tap(extent.size(), 0);
  while (true) {
    Corner corner;
    Value row = g.binary("multiply", g.iota(index_type, 0), g.constant_int(plane, DType::kI64, point_dims));
    int64_t stride = plane;
    for (size_t d = 0; d < s.dims.size(); ++d) {
      const GridTap& t = s.dims[d].taps[static_cast<size_t>(tap[d])];
      stride /= s.in[d];
      row = g.binary("add", row, g.binary("multiply", t.index, g.constant_int(stride, DType::kI64, point_dims)));
      corner.inside = corner.inside.valid() ? g.binary("and", corner.inside, t.inside) : t.inside;
      corner.tap.push_back(static_cast<size_t>(tap[d]));
    }
    // Weights multiply innermost dim first (x * y * z), PyTorch's order.
    for (size_t d = s.dims.size(); d-- > 0;) {
      const GridTap& t = s.dims[d].taps[static_cast<size_t>(tap[d])];
      if (t.weight.valid()) corner.weight = corner.weight.valid() ? g.binary("multiply", corner.weight, t.weight) : t.weight;
    }
    corner.row = g.reshape(row, {g.type(row).numel(), 1});
    corners.push_back(corner);
    size_t d = extent.size();
    while (d > 0 && ++tap[d - 1] == extent[d - 1]) tap[--d] = 0;
    if (d == 0) return corners;
  }
}

// [N, out..., C] dims of per-point channel vectors.
std::vector<int64_t> point_channel_dims(const GridSample& s) {
  std::vector<int64_t> dims = {s.batch};
  dims.insert(dims.end(), s.out.begin(), s.out.end());
  dims.push_back(s.channels);
  return dims;
}

// The values at a corner, [N, out..., C], 0 outside the input.
Value corner_values(Graph& g, const GridSample& s, const Corner& corner) {
  const std::vector<int64_t> dims = point_channel_dims(s);
  const int64_t points = g.type(corner.row).dims[0];
  Value values = g.op("gather", {s.rows, corner.row}, Type{s.compute, {points, s.channels}},
                      "dimension_numbers = #stablehlo.gather<offset_dims = [1], collapsed_slice_dims = [0], "
                      "start_index_map = [0], index_vector_dim = 1>, slice_sizes = array<i64: 1, " +
                          std::to_string(s.channels) + ">, indices_are_sorted = false");
  values = g.reshape(values, dims);
  const int64_t rank = static_cast<int64_t>(dims.size());
  Value inside = g.broadcast_in_dim(corner.inside, dims, dim_range(0, rank - 1));
  return g.select(inside, values, g.constant(0, s.compute, dims));
}

Value per_channel(Graph& g, Value point_value, const std::vector<int64_t>& dims) {
  return g.broadcast_in_dim(point_value, dims, dim_range(0, static_cast<int64_t>(dims.size()) - 1));
}

// [N, out..., C] back to the NCHW layout [N, C, out...].
Value channels_first(Graph& g, Value x) {
  const int64_t rank = g.type(x).rank();
  std::vector<int64_t> order = {0, rank - 1};
  for (int64_t d = 1; d < rank - 1; ++d) order.push_back(d);
  return g.transpose(x, order);
}

// grid_sampler_{2,3}d(input, grid, interpolation_mode, padding_mode, align_corners)
std::vector<Value> lower_grid_sampler(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const GridSample s = grid_sample_setup(ctx, 0);
  const std::vector<int64_t> dims = point_channel_dims(s);
  Value total;
  for (const Corner& corner : grid_corners(g, s)) {
    Value term = corner_values(g, s, corner);
    if (corner.weight.valid()) term = g.binary("multiply", term, per_channel(g, corner.weight, dims));
    total = total.valid() ? g.binary("add", total, term) : term;
  }
  return {g.convert(channels_first(g, total), ctx.outputs.at(0).dtype)};
}

// grid_sampler_{2,3}d_backward(grad_output, input, grid, interpolation_mode, padding_mode, align_corners,
// output_mask) -> (grad_input, grad_grid)
std::vector<Value> lower_grid_sampler_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const GridSample s = grid_sample_setup(ctx, 1);
  const std::vector<int64_t> dims = point_channel_dims(s);
  const int64_t rank = static_cast<int64_t>(dims.size());
  std::vector<int64_t> moved = {0};
  for (int64_t d = 2; d < rank; ++d) moved.push_back(d);
  moved.push_back(1);
  Value grad = g.transpose(g.convert(ctx.tensor(0), s.compute), moved);  // [N, out..., C]
  const int64_t points = g.type(grad).numel() / s.channels;
  Value grad_rows = g.constant(0, s.compute, g.type(s.rows).dims);
  std::vector<int64_t> point_dims(dims.begin(), dims.end() - 1);
  std::vector<Value> coordinate_grad(s.dims.size());
  for (const Corner& corner : grid_corners(g, s)) {
    Value inside = g.broadcast_in_dim(corner.inside, dims, dim_range(0, rank - 1));
    Value share = g.select(inside, grad, g.constant(0, s.compute, dims));
    if (corner.weight.valid()) share = g.binary("multiply", share, per_channel(g, corner.weight, dims));
    grad_rows = scatter_add_rows(g, grad_rows, corner.row, g.reshape(share, {points, s.channels}));
    if (!corner.weight.valid()) continue;  // nearest: the grid gets no gradient
    // sum over channels of grad * value, times the derivative of the corner's weight along each dim.
    Value weighted = sum_over(g, g.binary("multiply", grad, corner_values(g, s, corner)), {rank - 1});
    for (size_t d = 0; d < s.dims.size(); ++d) {
      Value slope;
      for (size_t e = s.dims.size(); e-- > 0;) {
        const GridTap& t = s.dims[e].taps[corner.tap[e]];
        Value factor = e == d ? t.weight_grad : t.weight;
        slope = slope.valid() ? g.binary("multiply", slope, factor) : factor;
      }
      Value term = g.binary("multiply", weighted, slope);
      coordinate_grad[d] = coordinate_grad[d].valid() ? g.binary("add", coordinate_grad[d], term) : term;
    }
  }
  std::vector<int64_t> input_moved = {s.batch};
  input_moved.insert(input_moved.end(), s.in.begin(), s.in.end());
  input_moved.push_back(s.channels);
  Value grad_input = channels_first(g, g.reshape(grad_rows, input_moved));
  std::vector<int64_t> component_dims = point_dims;
  component_dims.push_back(1);
  std::vector<Value> components;
  for (size_t k = 0; k < s.dims.size(); ++k) {
    const size_t d = s.dims.size() - 1 - k;  // component k is spatial dim d (x first)
    Value value = coordinate_grad[d].valid() ? g.binary("multiply", coordinate_grad[d], s.dims[d].source_grad)
                                             : g.constant(0, s.compute, point_dims);
    components.push_back(g.reshape(value, component_dims));
  }
  Value grad_grid = g.concatenate(components, rank - 1);
  return {g.convert(grad_input, ctx.outputs.at(0).dtype), g.convert(grad_grid, ctx.outputs.at(1).dtype)};
}

}  // namespace

void add_upsample_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_upsample_nearest_exact1d", &lower_upsample_nearest_exact});
  table.push_back({"aten::_upsample_nearest_exact1d_backward", &lower_upsample_nearest_exact_backward});
  table.push_back({"aten::_upsample_nearest_exact2d", &lower_upsample_nearest_exact});
  table.push_back({"aten::_upsample_nearest_exact2d_backward", &lower_upsample_nearest_exact_backward});
  table.push_back({"aten::_upsample_nearest_exact3d", &lower_upsample_nearest_exact});
  table.push_back({"aten::_upsample_nearest_exact3d_backward", &lower_upsample_nearest_exact_backward});
  table.push_back({"aten::_upsample_bilinear2d_aa", &lower_upsample_antialias});
  table.push_back({"aten::_upsample_bilinear2d_aa_backward", &lower_upsample_antialias_backward});
  table.push_back({"aten::_upsample_bicubic2d_aa", &lower_upsample_cubic_antialias});
  table.push_back({"aten::_upsample_bicubic2d_aa_backward", &lower_upsample_cubic_antialias_backward});
  table.push_back({"aten::grid_sampler_2d", &lower_grid_sampler});
  table.push_back({"aten::grid_sampler_2d_backward", &lower_grid_sampler_backward});
  table.push_back({"aten::grid_sampler_3d", &lower_grid_sampler});
  table.push_back({"aten::grid_sampler_3d_backward", &lower_grid_sampler_backward});
  table.push_back({"aten::upsample_bicubic2d", &lower_upsample_cubic});
  table.push_back({"aten::upsample_bicubic2d_backward", &lower_upsample_cubic_backward});
  table.push_back({"aten::upsample_bilinear2d", &lower_upsample_linear});
  table.push_back({"aten::upsample_bilinear2d_backward", &lower_upsample_linear_backward});
  table.push_back({"aten::upsample_linear1d", &lower_upsample_linear});
  table.push_back({"aten::upsample_linear1d_backward", &lower_upsample_linear_backward});
  table.push_back({"aten::upsample_nearest1d", &lower_upsample_nearest});
  table.push_back({"aten::upsample_nearest1d_backward", &lower_upsample_nearest_backward});
  table.push_back({"aten::upsample_nearest2d", &lower_upsample_nearest});
  table.push_back({"aten::upsample_nearest2d_backward", &lower_upsample_nearest_backward});
  table.push_back({"aten::upsample_nearest3d", &lower_upsample_nearest});
  table.push_back({"aten::upsample_nearest3d_backward", &lower_upsample_nearest_backward});
  table.push_back({"aten::upsample_trilinear3d", &lower_upsample_linear});
  table.push_back({"aten::upsample_trilinear3d_backward", &lower_upsample_linear_backward});
}

}  // namespace torchtpu::lowering
