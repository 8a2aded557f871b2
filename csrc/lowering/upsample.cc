// Interpolation: upsample_nearest{1,2,3}d, _upsample_nearest_exact{1,2,3}d, upsample_linear1d,
// upsample_bilinear2d, upsample_trilinear3d, upsample_bicubic2d, and their backward ops.
//
// Every mode is separable: along each spatial dim, output position o reads a few input positions
// ("taps") with fixed weights. The tap indices and weights depend only on static sizes and scales, so
// they are computed here on the host with PyTorch's own index arithmetic (same float type and operation
// order, so every index equals CPU's) and embedded as constant vectors. The forward gathers each tap along
// the dim and sums tap * weight, last dim first: that is the nesting of PyTorch's kernel (the innermost
// dim's taps are combined first), so float32 results match CPU's rounding. Gathers rather than dense
// weight matrices keep inf/NaN behaviour: a matrix would multiply every input by a 0 weight. The backward
// scatter-adds grad * weight at the same indices, one dim at a time.
#include <algorithm>
#include <cmath>
#include <optional>

#include "lowering/nn.h"

namespace torchtpu::lowering {
namespace {

// Along one spatial dim: output position o reads input position index[k][o] with weight weight[k][o].
struct Taps {
  std::vector<std::vector<double>> index;
  std::vector<std::vector<double>> weight;  // empty: a single tap copied as is (nearest modes)
};

enum class Mode { kNearest, kNearestExact, kLinear, kCubic };

bool has_align_corners(Mode mode) { return mode == Mode::kLinear || mode == Mode::kCubic; }

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

template <typename T>
Taps linear_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
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
    taps.index[0].push_back(static_cast<double>(first));
    taps.index[1].push_back(static_cast<double>(first + (first < in - 1 ? 1 : 0)));
    taps.weight[0].push_back(static_cast<double>(T(1) - far_weight));
    taps.weight[1].push_back(static_cast<double>(far_weight));
  }
  return taps;
}

// Keys' cubic convolution kernel with a = -0.75, for |x| <= 1 and 1 < |x| < 2.
template <typename T>
T cubic_near(T x) {
  const T a = T(-0.75);
  return ((a + 2) * x - (a + 3)) * x * x + 1;
}
template <typename T>
T cubic_far(T x) {
  const T a = T(-0.75);
  return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a;
}

template <typename T>
Taps cubic_taps(int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
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
      taps.weight[static_cast<size_t>(k)].push_back(static_cast<double>(weights[k]));
    }
  }
  return taps;
}

Taps make_taps(Mode mode, DType compute, int64_t in, int64_t out, bool align_corners, std::optional<double> scale) {
  const bool wide = compute == DType::kF64;
  switch (mode) {
    case Mode::kNearest:
    case Mode::kNearestExact: return nearest_taps(mode, in, out, scale);
    case Mode::kLinear:
      return wide ? linear_taps<double>(in, out, align_corners, scale) : linear_taps<float>(in, out, align_corners, scale);
    case Mode::kCubic:
      return wide ? cubic_taps<double>(in, out, align_corners, scale) : cubic_taps<float>(in, out, align_corners, scale);
  }
  return {};
}

// Reads the op's arguments: forward (self, output_size, [align_corners,] scales...) or backward
// (grad_output, output_size, input_size, [align_corners,] scales...). Returns the taps of each spatial dim.
std::vector<Taps> spatial_taps(const LoweringContext& ctx, Mode mode, bool backward, DType compute,
                               const std::vector<int64_t>& input_dims) {
  const std::vector<int64_t>& output_size = ctx.ints(1);
  const size_t spatial = output_size.size();
  const size_t align_arg = backward ? 3 : 2;
  const bool align_corners = has_align_corners(mode) && ctx.boolean(align_arg);
  const size_t first_scale = align_arg + (has_align_corners(mode) ? 1 : 0);
  std::vector<Taps> taps;
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t in = input_dims[input_dims.size() - spatial + d];
    taps.push_back(make_taps(mode, compute, in, output_size[d], align_corners, scale_arg(ctx, first_scale + d)));
  }
  return taps;
}

// Resamples dim `dim` of x (of the compute dtype) through its taps.
Value resample_dim(Graph& g, Value x, int64_t dim, const Taps& taps) {
  Value total;
  for (size_t k = 0; k < taps.index.size(); ++k) {
    Value term = take_along(g, x, dim, constant_vector(g, taps.index[k], DType::kI64));
    if (!taps.weight.empty()) {
      const Type t = g.type(term);
      Value weight = g.broadcast_in_dim(constant_vector(g, taps.weight[k], t.dtype), t.dims, {dim});
      term = g.binary("multiply", term, weight);
    }
    total = total.valid() ? g.binary("add", total, term) : term;
  }
  return total;
}

// The transpose of resample_dim: each output position's gradient times its weights, added at its taps.
Value spread_dim(Graph& g, Value grad, int64_t dim, const Taps& taps, int64_t in) {
  const Type t = g.type(grad);
  std::vector<int64_t> dims = t.dims;
  dims[static_cast<size_t>(dim)] = in;
  Value total = g.constant(0, t.dtype, dims);
  for (size_t k = 0; k < taps.index.size(); ++k) {
    Value term = grad;
    if (!taps.weight.empty()) {
      term = g.binary("multiply", term, g.broadcast_in_dim(constant_vector(g, taps.weight[k], t.dtype), t.dims, {dim}));
    }
    total = add_along(g, total, dim, constant_vector(g, taps.index[k], DType::kI64), term);
  }
  return total;
}

std::vector<Value> upsample(LoweringContext& ctx, Mode mode) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Type& result = ctx.outputs.at(0);
  // Nearest modes copy elements, in any dtype; the others compute in PyTorch's opmath type.
  const bool copies = mode == Mode::kNearest || mode == Mode::kNearestExact;
  const DType compute = copies ? in.dtype : accumulation_dtype(in.dtype);
  const std::vector<Taps> taps = spatial_taps(ctx, mode, false, compute, in.dims);
  Value x = g.convert(ctx.tensor(0), compute);
  const int64_t first_spatial = in.rank() - static_cast<int64_t>(taps.size());
  for (int64_t d = static_cast<int64_t>(taps.size()) - 1; d >= 0; --d) {
    x = resample_dim(g, x, first_spatial + d, taps[static_cast<size_t>(d)]);
  }
  return {g.convert(x, result.dtype)};
}

std::vector<Value> upsample_backward(LoweringContext& ctx, Mode mode) {
  Graph& g = ctx.graph;
  const Type& result = ctx.outputs.at(0);
  const DType compute = accumulation_dtype(result.dtype);
  const std::vector<Taps> taps = spatial_taps(ctx, mode, true, compute, result.dims);
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
std::vector<Value> lower_upsample_nearest_backward(LoweringContext& ctx) {
  return upsample_backward(ctx, Mode::kNearest);
}
std::vector<Value> lower_upsample_nearest_exact_backward(LoweringContext& ctx) {
  return upsample_backward(ctx, Mode::kNearestExact);
}
std::vector<Value> lower_upsample_linear_backward(LoweringContext& ctx) { return upsample_backward(ctx, Mode::kLinear); }
std::vector<Value> lower_upsample_cubic_backward(LoweringContext& ctx) { return upsample_backward(ctx, Mode::kCubic); }

}  // namespace

void add_upsample_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_upsample_nearest_exact1d", &lower_upsample_nearest_exact});
  table.push_back({"aten::_upsample_nearest_exact1d_backward", &lower_upsample_nearest_exact_backward});
  table.push_back({"aten::_upsample_nearest_exact2d", &lower_upsample_nearest_exact});
  table.push_back({"aten::_upsample_nearest_exact2d_backward", &lower_upsample_nearest_exact_backward});
  table.push_back({"aten::_upsample_nearest_exact3d", &lower_upsample_nearest_exact});
  table.push_back({"aten::_upsample_nearest_exact3d_backward", &lower_upsample_nearest_exact_backward});
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
