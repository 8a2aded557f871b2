// Pooling over the last 1-3 dims: max_pool{2,3}d_with_indices, avg_pool{2,3}d, adaptive average and max
// pooling, im2col/col2im (unfold/fold) and max_unpool, with their backward ops. Inputs are [N, C, *spatial]
// or [C, *spatial]; every rule takes the number of spatial dims from the op it lowers.
//
// Max pooling visits the kernel offsets one by one (strided slices of the -inf padded input), keeping
// the running maximum and its flat index within the spatial plane, so the indices match PyTorch's (first
// maximum wins, a NaN always wins). Its backward scatter-adds the gradient at those indices. Average
// pooling sums with reduce_window; its backward spreads grad / divisor back with interior-padded copies,
// one per offset. Adaptive average pooling contracts each spatial dim with a matrix of bin weights;
// adaptive max pooling visits each bin's elements through host-computed gathers.
#include <algorithm>
#include <stdexcept>
#include <limits>
#include <string>

#include "lowering/nn.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;

// The geometry of a windowed pooling over `spatial` trailing dims.
struct Pool {
  size_t spatial = 0;
  std::vector<int64_t> kernel, stride, padding, dilation;
  std::vector<int64_t> in, out;  // spatial sizes
  std::vector<int64_t> high;     // padding after the input, enough for every window (ceil_mode may need more)
};

int64_t pick(const std::vector<int64_t>& v, size_t i, int64_t otherwise) {
  if (v.empty()) return otherwise;
  return v.size() == 1 ? v[0] : v[i];
}

// Sizes of the last `count` dims.
std::vector<int64_t> trailing(const std::vector<int64_t>& dims, size_t count) {
  return std::vector<int64_t>(dims.end() - static_cast<std::ptrdiff_t>(count), dims.end());
}

int64_t product(const std::vector<int64_t>& values) {
  int64_t p = 1;
  for (int64_t v : values) p *= v;
  return p;
}

// kernel_size, stride (empty: the kernel), padding and dilation (pass dilation_arg 0 for none), from
// consecutive arguments starting at kernel_arg.
Pool pool_geometry(const LoweringContext& ctx, size_t spatial, const Type& input, const Type& output,
                   size_t kernel_arg, size_t dilation_arg) {
  Pool p;
  p.spatial = spatial;
  p.in = trailing(input.dims, spatial);
  p.out = trailing(output.dims, spatial);
  for (size_t i = 0; i < spatial; ++i) {
    p.kernel.push_back(pick(ctx.ints(kernel_arg), i, 1));
    p.stride.push_back(pick(ctx.ints(kernel_arg + 1), i, p.kernel[i]));
    p.padding.push_back(pick(ctx.ints(kernel_arg + 2), i, 0));
    p.dilation.push_back(dilation_arg ? pick(ctx.ints(dilation_arg), i, 1) : 1);
    const int64_t needed = (p.out[i] - 1) * p.stride[i] + (p.kernel[i] - 1) * p.dilation[i] + 1;
    p.high.push_back(std::max<int64_t>(needed - p.in[i] - p.padding[i], p.padding[i]));
  }
  return p;
}

// A rank-long list that is `values` on the trailing spatial dims and `fill` before them.
std::vector<int64_t> on_spatial(size_t rank, const std::vector<int64_t>& values, int64_t fill) {
  std::vector<int64_t> full(rank - values.size(), fill);
  full.insert(full.end(), values.begin(), values.end());
  return full;
}

// Every kernel offset tuple in row-major order (last dim fastest), PyTorch's visiting order.
std::vector<std::vector<int64_t>> offsets(const std::vector<int64_t>& extent) {
  std::vector<std::vector<int64_t>> all;
  std::vector<int64_t> current(extent.size(), 0);
  if (product(extent) == 0) return all;
  while (true) {
    all.push_back(current);
    size_t d = extent.size();
    while (d > 0 && ++current[d - 1] == extent[d - 1]) current[--d] = 0;
    if (d == 0) return all;
  }
}

// Row-major strides of the spatial plane: flat index = sum(position[d] * stride[d]).
std::vector<int64_t> plane_strides(const std::vector<int64_t>& in) {
  std::vector<int64_t> strides(in.size(), 1);
  for (size_t d = in.size(); d-- > 1;) strides[d - 1] = strides[d] * in[d];
  return strides;
}

// The window element at kernel offset `offset` for every output position: a strided slice of `padded`.
Value window_element(Graph& g, Value padded, const Pool& p, const std::vector<int64_t>& offset) {
  const Type t = g.type(padded);
  const size_t rank = t.dims.size(), lead = rank - p.spatial;
  std::vector<int64_t> start(rank, 0), limit = t.dims, strides(rank, 1);
  for (size_t d = 0; d < p.spatial; ++d) {
    start[lead + d] = offset[d] * p.dilation[d];
    limit[lead + d] = start[lead + d] + (p.out[d] - 1) * p.stride[d] + 1;
    strides[lead + d] = p.stride[d];
  }
  return g.slice(padded, start, limit, strides);
}

// The running first maximum over candidates offered in PyTorch's visiting order, with its index. `real` says
// which candidates are input elements rather than padding: a real element replaces a padding cell even when
// equal to it, so a window whose elements are all -inf points at its first element, as on CPU.
struct FirstMax {
  Value best, index, best_real;
  void offer(Graph& g, Value value, Value value_index, Value real = {}) {
    if (!best.valid()) {
      best = value;
      index = value_index;
      best_real = real;
      return;
    }
    Value take = g.binary("or", g.compare(value, best, Comparison::kGT), g.compare(value, value, Comparison::kNE));
    if (real.valid()) {
      take = g.binary("or", take, g.binary("and", real, g.unary("not", best_real)));
      best_real = g.select(take, real, best_real);
    }
    best = g.select(take, value, best);
    index = g.select(take, value_index, index);
  }
};

std::vector<Value> max_pool(LoweringContext& ctx, size_t spatial) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Type& result = ctx.outputs.at(0);
  const Pool p = pool_geometry(ctx, spatial, in, result, 1, 4);
  const size_t rank = in.dims.size();
  const std::vector<int64_t> low = on_spatial(rank, p.padding, 0), high = on_spatial(rank, p.high, 0);
  Value padded = g.pad(ctx.tensor(0), extreme(g, in.dtype, true), low, high);
  auto positive = [](const std::vector<int64_t>& v) {
    return std::any_of(v.begin(), v.end(), [](int64_t n) { return n > 0; });
  };
  const bool has_padding = positive(low) || positive(high);
  Value real_cells;  // true on input elements, false on padding; only where there is padding
  if (has_padding) {
    real_cells = g.pad(g.constant_int(1, DType::kBool, in.dims), g.constant_int(0, DType::kBool), low, high);
  }
  // Flat index of the window's first element: sum((o[d] * stride[d] - padding[d]) * plane_stride[d]).
  const std::vector<int64_t> plane = plane_strides(p.in);
  const Type index_type{DType::kI64, result.dims};
  Value origin = g.constant_int(0, DType::kI64, result.dims);
  for (size_t d = 0; d < spatial; ++d) {
    Value position = g.iota(index_type, static_cast<int64_t>(rank - spatial + d));
    Value step = g.constant_int(p.stride[d] * plane[d], DType::kI64, result.dims);
    origin = g.binary("add", origin, g.binary("multiply", position, step));
  }
  FirstMax max;
  for (const std::vector<int64_t>& offset : offsets(p.kernel)) {
    int64_t shift = 0;
    for (size_t d = 0; d < spatial; ++d) shift += (offset[d] * p.dilation[d] - p.padding[d]) * plane[d];
    Value index = g.binary("add", origin, g.constant_int(shift, DType::kI64, result.dims));
    max.offer(g, window_element(g, padded, p, offset), index,
              has_padding ? window_element(g, real_cells, p, offset) : Value{});
  }
  return {max.best, g.convert(max.index, ctx.outputs.at(1).dtype)};
}

// max_pool{2,3}d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)
std::vector<Value> lower_max_pool2d_with_indices(LoweringContext& ctx) { return max_pool(ctx, 2); }
std::vector<Value> lower_max_pool3d_with_indices(LoweringContext& ctx) { return max_pool(ctx, 3); }

// Indices into each spatial plane of `plane_dims` (any shape whose leading dims are the input's) made
// flat indices into the whole input, as [count, 1] for a scatter or gather.
Value flat_plane_index(Graph& g, Value indices, const std::vector<int64_t>& input_dims, size_t spatial) {
  const Type index_type{DType::kI64, g.type(indices).dims};
  const size_t lead = input_dims.size() - spatial;
  const int64_t plane = product(trailing(input_dims, spatial));
  Value flat = g.convert(indices, DType::kI64);
  int64_t stride = plane;
  for (size_t d = lead; d-- > 0;) {
    Value position = g.iota(index_type, static_cast<int64_t>(d));
    flat = g.binary("add", flat, g.binary("multiply", position, g.constant_int(stride, DType::kI64, index_type.dims)));
    stride *= input_dims[d];
  }
  return g.reshape(flat, {index_type.numel(), 1});
}

// grad added at each window's argmax: the backward of every max pooling that returns indices.
Value max_pool_backward(LoweringContext& ctx, size_t spatial, size_t indices_arg) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(1);
  const DType accumulate = accumulation_dtype(ctx.outputs.at(0).dtype);
  const int64_t count = ctx.type_of(0).numel();
  Value grad = scatter_add_rows(g, g.constant(0, accumulate, {in.numel()}),
                                flat_plane_index(g, ctx.tensor(indices_arg), in.dims, spatial),
                                g.reshape(g.convert(ctx.tensor(0), accumulate), {count}));
  return g.reshape(g.convert(grad, ctx.outputs.at(0).dtype), in.dims);
}

// max_pool{2,3}d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation,
//                                      ceil_mode, indices)
std::vector<Value> lower_max_pool2d_with_indices_backward(LoweringContext& ctx) { return {max_pool_backward(ctx, 2, 7)}; }
std::vector<Value> lower_max_pool3d_with_indices_backward(LoweringContext& ctx) { return {max_pool_backward(ctx, 3, 7)}; }

// ---- average pooling -----------------------------------------------------------------------------------

// The divisor of each output position (output's spatial shape), as PyTorch's kernel computes it: the
// window clipped to the padded input, or to the input itself without count_include_pad.
Value avg_divisor(LoweringContext& ctx, const Pool& p, const std::vector<int64_t>& dims, size_t include_pad_arg,
                  size_t override_arg, DType dtype) {
  Graph& g = ctx.graph;
  if (!ctx.is_none(override_arg)) return g.constant(static_cast<double>(ctx.integer(override_arg)), dtype, dims);
  const int64_t rank = static_cast<int64_t>(dims.size());
  const Type index_type{DType::kI64, dims};
  auto c = [&](int64_t v) { return g.constant_int(v, DType::kI64, dims); };
  Value size = c(1);
  for (size_t d = 0; d < p.spatial; ++d) {
    Value position = g.iota(index_type, rank - static_cast<int64_t>(p.spatial - d));
    Value start = g.binary("subtract", g.binary("multiply", position, c(p.stride[d])), c(p.padding[d]));
    Value end = g.binary("minimum", g.binary("add", start, c(p.kernel[d])), c(p.in[d] + p.padding[d]));
    if (!ctx.boolean(include_pad_arg)) {
      start = g.binary("maximum", start, c(0));
      end = g.binary("minimum", end, c(p.in[d]));
    }
    size = g.binary("multiply", size, g.binary("subtract", end, start));
  }
  return g.convert(size, dtype);
}

// avg_pool{2,3}d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override?)
// CPU's average and adaptive pooling kernels take floating inputs (avg_pool int64 too); the meta kernels take
// any, so the rules refuse the rest and the glue raises CPU's error.
std::vector<Value> avg_pool(LoweringContext& ctx, size_t spatial) {
  if (ctx.type_of(0).dtype != DType::kI64) require_floating(ctx, 0, "avg_pool");
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Type& result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  const Pool p = pool_geometry(ctx, spatial, in, result, 1, 0);
  const size_t rank = in.dims.size();
  const std::vector<int64_t> low = on_spatial(rank, p.padding, 0), high = on_spatial(rank, p.high, 0);
  std::string padding;
  for (size_t d = 0; d < rank; ++d) {
    padding += std::string(d ? ", " : "") + "[" + std::to_string(low[d]) + ", " + std::to_string(high[d]) + "]";
  }
  // reduce_window over the zero-padded input; windows running past the ceil_mode edge are cut off by
  // the result shape.
  std::vector<int64_t> full_dims = in.dims;
  for (size_t d = 0; d < spatial; ++d) {
    full_dims[rank - spatial + d] = (p.in[d] + p.padding[d] + p.high[d] - p.kernel[d]) / p.stride[d] + 1;
  }
  Value sum = g.op_multi("stablehlo.reduce_window", {g.convert(ctx.tensor(0), accumulate), g.constant_int(0, accumulate)},
                         {Type{accumulate, full_dims}},
                         "window_dimensions = " + ir::dense_i64_array(on_spatial(rank, p.kernel, 1)) +
                             ", window_strides = " + ir::dense_i64_array(on_spatial(rank, p.stride, 1)) +
                             ", padding = dense<[" + padding + "]> : tensor<" + std::to_string(rank) + "x2xi64>",
                         ir::scalar_region("stablehlo.add", accumulate))[0];
  sum = g.slice(sum, std::vector<int64_t>(rank, 0), result.dims, std::vector<int64_t>(rank, 1));
  Value divisor = avg_divisor(ctx, p, result.dims, 5, 6, accumulate);
  return {g.convert(g.binary("divide", sum, divisor), result.dtype)};
}

std::vector<Value> lower_avg_pool2d(LoweringContext& ctx) { return avg_pool(ctx, 2); }
std::vector<Value> lower_avg_pool3d(LoweringContext& ctx) { return avg_pool(ctx, 3); }

// The transpose of reading window elements: shares[k] (output's shape) holds what each output position
// adds to the input position at its k-th kernel offset (row-major). Output o lands at padded position
// o * stride + offset * dilation (interior padding spaces the outputs by the stride); the padding is then
// cut off.
Value spread_windows(Graph& g, const std::vector<Value>& shares, const Pool& p, const std::vector<int64_t>& input_dims) {
  const Type t = g.type(shares.at(0));
  const size_t rank = input_dims.size(), lead = rank - p.spatial;
  std::vector<int64_t> padded_dims = input_dims;
  for (size_t d = 0; d < p.spatial; ++d) padded_dims[lead + d] = p.in[d] + p.padding[d] + p.high[d];
  Value zero = g.constant_int(0, t.dtype);
  Value total;
  const std::vector<std::vector<int64_t>> all = offsets(p.kernel);
  for (size_t k = 0; k < all.size(); ++k) {
    const std::vector<int64_t>& offset = all[k];
    std::vector<int64_t> low(rank, 0), high(rank, 0), interior(rank, 0);
    for (size_t d = 0; d < p.spatial; ++d) {
      low[lead + d] = offset[d] * p.dilation[d];
      interior[lead + d] = p.stride[d] - 1;
      high[lead + d] = padded_dims[lead + d] - low[lead + d] - (p.out[d] - 1) * p.stride[d] - 1;
    }
    Value spread = g.op("pad", {shares[k], zero}, Type{t.dtype, padded_dims},
                        "edge_padding_low = " + ir::dense_i64_array(low) + ", edge_padding_high = " +
                            ir::dense_i64_array(high) + ", interior_padding = " + ir::dense_i64_array(interior));
    total = total.valid() ? g.binary("add", total, spread) : spread;
  }
  std::vector<int64_t> start(rank, 0), limit = padded_dims;
  for (size_t d = 0; d < p.spatial; ++d) {
    start[lead + d] = p.padding[d];
    limit[lead + d] = p.padding[d] + p.in[d];
  }
  return g.slice(total, start, limit, std::vector<int64_t>(rank, 1));
}

// avg_pool{2,3}d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
//                         divisor_override?): each window's grad / divisor added to every input it covered.
std::vector<Value> avg_pool_backward(LoweringContext& ctx, size_t spatial) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(1);
  const Type grad_type = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(ctx.outputs.at(0).dtype);
  const Pool p = pool_geometry(ctx, spatial, in, grad_type, 2, 0);
  Value share = g.binary("divide", g.convert(ctx.tensor(0), accumulate),
                         avg_divisor(ctx, p, grad_type.dims, 6, 7, accumulate));
  const std::vector<Value> shares(static_cast<size_t>(product(p.kernel)), share);
  return {g.convert(spread_windows(g, shares, p, in.dims), ctx.outputs.at(0).dtype)};
}

std::vector<Value> lower_avg_pool2d_backward(LoweringContext& ctx) { return avg_pool_backward(ctx, 2); }
std::vector<Value> lower_avg_pool3d_backward(LoweringContext& ctx) { return avg_pool_backward(ctx, 3); }

// ---- adaptive average pooling ------------------------------------------------------------------------

// Averaging weights [out, in]: output position i averages the input window
// [floor(i * in / out), ceil((i + 1) * in / out)), PyTorch's adaptive bins, built from iotas.
Value adaptive_weights(Graph& g, int64_t in, int64_t out, DType dtype) {
  const Type index_type{DType::kI64, {out, in}};
  Value row = g.iota(index_type, 0);
  Value column = g.iota(index_type, 1);
  auto constant = [&](int64_t v) { return g.constant_int(v, DType::kI64, {out, in}); };
  Value start = g.binary("divide", g.binary("multiply", row, constant(in)), constant(out));
  Value end = g.binary("divide", g.binary("add", g.binary("multiply", g.binary("add", row, constant(1)), constant(in)),
                                          constant(out - 1)),
                       constant(out));
  Value inside = g.binary("and", g.compare(column, start, Comparison::kGE), g.compare(column, end, Comparison::kLT));
  Value count = g.convert(g.binary("subtract", end, start), dtype);
  return g.select(inside, g.binary("divide", g.constant(1.0, dtype, {out, in}), count), g.constant(0.0, dtype, {out, in}));
}

// Applies the adaptive weights of each of the `spatial` trailing dims: forward contracts with their input
// side, backward (spreading gradients back) with their output side.
Value adaptive_average(Graph& g, Value x, const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                       size_t spatial, bool backward, DType dtype) {
  const int64_t rank = g.type(x).rank();
  const int64_t matrix_dim = backward ? 0 : 1;
  for (size_t k = 1; k <= spatial; ++k) {
    const size_t d = in.size() - k;
    x = contract_dim(g, x, rank - static_cast<int64_t>(k), adaptive_weights(g, in[d], out[d], dtype), matrix_dim, dtype);
  }
  return x;
}

// _adaptive_avg_pool{2,3}d(self, output_size): a weighted sum over the spatial dims, exact for any sizes.
std::vector<Value> adaptive_avg_pool(LoweringContext& ctx, size_t spatial) {
  require_floating(ctx, 0, "adaptive_avg_pool");
  Graph& g = ctx.graph;
  const Type result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  Value y = adaptive_average(g, g.convert(ctx.tensor(0), accumulate), ctx.type_of(0).dims, result.dims, spatial,
                             false, accumulate);
  return {g.convert(y, result.dtype)};
}

// _adaptive_avg_pool{2,3}d_backward(grad_output, self): the same weights, transposed, spread each gradient back.
std::vector<Value> adaptive_avg_pool_backward(LoweringContext& ctx, size_t spatial) {
  Graph& g = ctx.graph;
  const Type result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  Value dx = adaptive_average(g, g.convert(ctx.tensor(0), accumulate), result.dims, ctx.type_of(0).dims, spatial,
                              true, accumulate);
  return {g.convert(dx, result.dtype)};
}

std::vector<Value> lower_adaptive_avg_pool2d(LoweringContext& ctx) { return adaptive_avg_pool(ctx, 2); }
std::vector<Value> lower_adaptive_avg_pool3d(LoweringContext& ctx) { return adaptive_avg_pool(ctx, 3); }
std::vector<Value> lower_adaptive_avg_pool2d_backward(LoweringContext& ctx) { return adaptive_avg_pool_backward(ctx, 2); }
std::vector<Value> lower_adaptive_avg_pool3d_backward(LoweringContext& ctx) { return adaptive_avg_pool_backward(ctx, 3); }

// ---- adaptive max pooling ------------------------------------------------------------------------------

// adaptive_max_pool{2,3}d(self, output_size) -> (out, indices). Bins differ in size, so the k-th visit of
// a dim reads position min(start + k, end - 1) of each bin: short bins repeat their last element, which
// changes neither the first maximum nor the last NaN.
std::vector<Value> adaptive_max_pool(LoweringContext& ctx, size_t spatial) {
  require_floating(ctx, 0, "adaptive_max_pool");
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Type& result = ctx.outputs.at(0);
  const size_t lead = in.dims.size() - spatial;
  const std::vector<int64_t> in_sizes = trailing(in.dims, spatial), out_sizes = trailing(result.dims, spatial);
  const std::vector<int64_t> plane = plane_strides(in_sizes);
  std::vector<int64_t> widest(spatial, 0);
  for (size_t d = 0; d < spatial; ++d) {
    for (int64_t o = 0; o < out_sizes[d]; ++o) {
      const int64_t start = o * in_sizes[d] / out_sizes[d];
      const int64_t end = ((o + 1) * in_sizes[d] + out_sizes[d] - 1) / out_sizes[d];
      widest[d] = std::max(widest[d], end - start);
    }
  }
  FirstMax max;
  for (const std::vector<int64_t>& offset : offsets(widest)) {
    Value value = ctx.tensor(0);
    Value index = g.constant_int(0, DType::kI64, result.dims);
    for (size_t d = 0; d < spatial; ++d) {
      std::vector<double> position, flat;
      for (int64_t o = 0; o < out_sizes[d]; ++o) {
        const int64_t start = o * in_sizes[d] / out_sizes[d];
        const int64_t end = ((o + 1) * in_sizes[d] + out_sizes[d] - 1) / out_sizes[d];
        position.push_back(static_cast<double>(std::min(start + offset[d], end - 1)));
        flat.push_back(position.back() * static_cast<double>(plane[d]));
      }
      const int64_t dim = static_cast<int64_t>(lead + d);
      value = take_along(g, value, dim, constant_vector(g, position, DType::kI64));
      index = g.binary("add", index, g.broadcast_in_dim(constant_vector(g, flat, DType::kI64), result.dims, {dim}));
    }
    max.offer(g, value, index);
  }
  return {max.best, g.convert(max.index, ctx.outputs.at(1).dtype)};
}

std::vector<Value> lower_adaptive_max_pool2d(LoweringContext& ctx) { return adaptive_max_pool(ctx, 2); }
std::vector<Value> lower_adaptive_max_pool3d(LoweringContext& ctx) { return adaptive_max_pool(ctx, 3); }
// adaptive_max_pool{2,3}d_backward(grad_output, self, indices)
std::vector<Value> lower_adaptive_max_pool2d_backward(LoweringContext& ctx) { return {max_pool_backward(ctx, 2, 2)}; }
std::vector<Value> lower_adaptive_max_pool3d_backward(LoweringContext& ctx) { return {max_pool_backward(ctx, 3, 2)}; }

// ---- fractional max pooling ----------------------------------------------------------------------------

// fractional_max_pool{2,3}d(self, kernel_size, output_size, random_samples [N, C, S]) -> (out, indices).
// Each plane's window starts come from its random sample u: start[i] = int((i + u) * alpha) - int(u * alpha)
// with alpha = (in - k) / (out - 1), and the last window ends at the input's edge; computed in the input's
// dtype, as PyTorch does. Windows are then visited like max_pool's, through flat gathers.
std::vector<Value> fractional_max_pool(LoweringContext& ctx, size_t spatial) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Type& result = ctx.outputs.at(0);
  const bool batched = in.dims.size() == spatial + 2;
  std::vector<int64_t> dims = in.dims;  // [N, C, spatial...]
  if (!batched) dims.insert(dims.begin(), 1);
  std::vector<int64_t> out_dims = trailing(result.dims, spatial);
  out_dims.insert(out_dims.begin(), {dims[0], dims[1]});
  const std::vector<int64_t> in_sizes = trailing(dims, spatial), out_sizes = trailing(out_dims, spatial);
  const std::vector<int64_t> plane = plane_strides(in_sizes);
  const int64_t plane_size = product(in_sizes);
  const DType dtype = in.dtype;
  Value samples = g.convert(ctx.tensor(3), dtype);
  // The start of each output's window along each spatial dim, broadcast to the output's shape.
  std::vector<Value> starts;
  for (size_t d = 0; d < spatial; ++d) {
    const int64_t kernel = pick(ctx.ints(1), d, 1), size = in_sizes[d], count = out_sizes[d];
    // PyTorch's samples list W first in 2-d and T, H, W in 3-d.
    const int64_t component = spatial == 2 ? static_cast<int64_t>(1 - d) : static_cast<int64_t>(d);
    const std::vector<int64_t> run = {dims[0], dims[1], count};
    Value u = g.broadcast_in_dim(g.reshape(g.slice(samples, {0, 0, component}, {dims[0], dims[1], component + 1}, {1, 1, 1}),
                                           {dims[0], dims[1]}),
                                 run, {0, 1});
    Value position = g.iota(Type{DType::kI64, run}, 2);
    Value start = g.constant_int(size - kernel, DType::kI64, run);
    if (count > 1) {
      Value alpha = g.binary("divide", g.constant(static_cast<double>(size - kernel), dtype, run),
                             g.constant(static_cast<double>(count - 1), dtype, run));
      Value scaled = g.binary("multiply", g.binary("add", g.convert(position, dtype), u), alpha);
      Value offset = g.binary("multiply", u, alpha);
      Value computed = g.binary("subtract", g.convert(scaled, DType::kI64), g.convert(offset, DType::kI64));
      Value last = g.compare(position, g.constant_int(count - 1, DType::kI64, run), Comparison::kEQ);
      start = g.select(last, start, computed);
    }
    std::vector<int64_t> placement = {0, 1, static_cast<int64_t>(2 + d)};
    starts.push_back(g.broadcast_in_dim(start, out_dims, placement));
  }
  std::vector<int64_t> kernel_sizes;
  for (size_t d = 0; d < spatial; ++d) kernel_sizes.push_back(pick(ctx.ints(1), d, 1));
  const Type index_type{DType::kI64, out_dims};
  // The flat offset of each output's (n, c) plane.
  Value plane_number = g.binary("add", g.binary("multiply", g.iota(index_type, 0), g.constant_int(dims[1], DType::kI64, out_dims)),
                                g.iota(index_type, 1));
  Value plane_base = g.binary("multiply", plane_number, g.constant_int(plane_size, DType::kI64, out_dims));
  Value flat = g.reshape(ctx.tensor(0), {product(dims)});
  FirstMax max;
  for (const std::vector<int64_t>& offset : offsets(kernel_sizes)) {
    Value index = g.constant_int(0, DType::kI64, out_dims);
    for (size_t d = 0; d < spatial; ++d) {
      Value position = g.binary("add", starts[d], g.constant_int(offset[d], DType::kI64, out_dims));
      index = g.binary("add", index, g.binary("multiply", position, g.constant_int(plane[d], DType::kI64, out_dims)));
    }
    std::vector<int64_t> column = out_dims;
    column.push_back(1);
    Value value = g.gather_flat(flat, g.reshape(g.binary("add", plane_base, index), column));
    max.offer(g, value, index);
  }
  return {g.reshape(max.best, result.dims), g.reshape(g.convert(max.index, ctx.outputs.at(1).dtype), ctx.outputs.at(1).dims)};
}

std::vector<Value> lower_fractional_max_pool2d(LoweringContext& ctx) { return fractional_max_pool(ctx, 2); }
std::vector<Value> lower_fractional_max_pool3d(LoweringContext& ctx) { return fractional_max_pool(ctx, 3); }
// fractional_max_pool2d_backward(grad_output, self, kernel_size, output_size, indices). The 3-d backward
// has no meta kernel in PyTorch, so its output shape cannot be inferred and it stays on the CPU fallback.
std::vector<Value> lower_fractional_max_pool2d_backward(LoweringContext& ctx) { return {max_pool_backward(ctx, 2, 4)}; }

// ---- max_unpool ----------------------------------------------------------------------------------------

// max_unpool2d(self, indices, output_size) and max_unpool3d(self, indices, output_size, stride, padding):
// zeros of the output's shape with each input element written at its plane index (last write wins).
std::vector<Value> max_unpool(LoweringContext& ctx, size_t spatial) {
  Graph& g = ctx.graph;
  const Type& result = ctx.outputs.at(0);
  const int64_t count = ctx.type_of(0).numel();
  // CPU refuses an index past the output plane; the scatter would drop it.
  const std::vector<int64_t> plane(result.dims.end() - static_cast<std::ptrdiff_t>(spatial), result.dims.end());
  int64_t plane_size = 1;
  for (int64_t d : plane) plane_size *= d;
  Value indices = g.convert(ctx.tensor(1), DType::kI64);
  ctx.check(CheckKind::kUnpoolIndex, outside_range(g, indices, 0, plane_size), indices, plane);
  Value flat = g.scatter_flat(g.constant(0, result.dtype, {result.numel()}),
                              flat_plane_index(g, ctx.tensor(1), result.dims, spatial),
                              g.reshape(ctx.tensor(0), {count}));
  return {g.reshape(flat, result.dims)};
}

std::vector<Value> lower_max_unpool2d(LoweringContext& ctx) { return max_unpool(ctx, 2); }
std::vector<Value> lower_max_unpool3d(LoweringContext& ctx) { return max_unpool(ctx, 3); }

// ---- im2col / col2im -----------------------------------------------------------------------------------

// The geometry of im2col/col2im(..., kernel_size, dilation, padding, stride) from argument kernel_arg on;
// `image` is the [N, C, H, W] or [C, H, W] side.
Pool unfold_geometry(const LoweringContext& ctx, size_t kernel_arg, const std::vector<int64_t>& image) {
  Pool p;
  p.spatial = 2;
  p.in = trailing(image, 2);
  for (size_t d = 0; d < 2; ++d) {
    p.kernel.push_back(pick(ctx.ints(kernel_arg), d, 1));
    p.dilation.push_back(pick(ctx.ints(kernel_arg + 1), d, 1));
    p.padding.push_back(pick(ctx.ints(kernel_arg + 2), d, 0));
    p.stride.push_back(pick(ctx.ints(kernel_arg + 3), d, 1));
    p.out.push_back((p.in[d] + 2 * p.padding[d] - p.dilation[d] * (p.kernel[d] - 1) - 1) / p.stride[d] + 1);
    p.high.push_back(p.padding[d]);
  }
  return p;
}

// im2col(self, kernel_size, dilation, padding, stride): [N, C*kh*kw, L], channel c's offset (i, j) in
// row c*kh*kw + i*kw + j, window positions in row-major order along L.
std::vector<Value> lower_im2col(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Pool p = unfold_geometry(ctx, 1, in.dims);
  const size_t rank = in.dims.size();
  Value padded = g.pad(ctx.tensor(0), g.constant_int(0, in.dtype), on_spatial(rank, p.padding, 0),
                       on_spatial(rank, p.high, 0));
  std::vector<int64_t> column_dims(in.dims.begin(), in.dims.end() - 2);
  column_dims.push_back(1);
  column_dims.push_back(p.out[0] * p.out[1]);
  std::vector<Value> columns;
  for (const std::vector<int64_t>& offset : offsets(p.kernel)) {
    columns.push_back(g.reshape(window_element(g, padded, p, offset), column_dims));
  }
  return {g.reshape(g.concatenate(columns, static_cast<int64_t>(rank) - 2), ctx.outputs.at(0).dims)};
}

// col2im(self, output_size, kernel_size, dilation, padding, stride): the transpose of im2col, each column
// entry added back to the image position it was read from.
std::vector<Value> lower_col2im(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Type& result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  const Pool p = unfold_geometry(ctx, 2, result.dims);
  const size_t rank = result.dims.size();
  const int64_t kernel_count = p.kernel[0] * p.kernel[1];
  // [..., C, K, oh, ow]: the leading dims, the channels, then one plane per kernel offset.
  std::vector<int64_t> split(in.dims.begin(), in.dims.end() - 2);
  split.push_back(result.dims[rank - 3]);
  split.push_back(kernel_count);
  split.push_back(p.out[0]);
  split.push_back(p.out[1]);
  Value columns = g.reshape(g.convert(ctx.tensor(0), accumulate), split);
  std::vector<int64_t> plane_dims = result.dims;
  plane_dims[rank - 2] = p.out[0];
  plane_dims[rank - 1] = p.out[1];
  std::vector<Value> planes;
  const size_t k_dim = split.size() - 3;
  for (int64_t k = 0; k < kernel_count; ++k) {
    std::vector<int64_t> start(split.size(), 0), limit = split;
    start[k_dim] = k;
    limit[k_dim] = k + 1;
    planes.push_back(g.reshape(g.slice(columns, start, limit, std::vector<int64_t>(split.size(), 1)),
                               plane_dims));
  }
  return {g.convert(spread_windows(g, planes, p, result.dims), result.dtype)};
}

}  // namespace

void add_nn_pool_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_adaptive_avg_pool2d", &lower_adaptive_avg_pool2d});
  table.push_back({"aten::_adaptive_avg_pool2d_backward", &lower_adaptive_avg_pool2d_backward});
  table.push_back({"aten::_adaptive_avg_pool3d", &lower_adaptive_avg_pool3d});
  table.push_back({"aten::_adaptive_avg_pool3d_backward", &lower_adaptive_avg_pool3d_backward});
  table.push_back({"aten::adaptive_max_pool2d", &lower_adaptive_max_pool2d});
  table.push_back({"aten::adaptive_max_pool2d_backward", &lower_adaptive_max_pool2d_backward});
  table.push_back({"aten::adaptive_max_pool3d", &lower_adaptive_max_pool3d});
  table.push_back({"aten::adaptive_max_pool3d_backward", &lower_adaptive_max_pool3d_backward});
  table.push_back({"aten::avg_pool2d", &lower_avg_pool2d});
  table.push_back({"aten::avg_pool2d_backward", &lower_avg_pool2d_backward});
  table.push_back({"aten::avg_pool3d", &lower_avg_pool3d});
  table.push_back({"aten::avg_pool3d_backward", &lower_avg_pool3d_backward});
  table.push_back({"aten::col2im", &lower_col2im});
  table.push_back({"aten::fractional_max_pool2d", &lower_fractional_max_pool2d});
  table.push_back({"aten::fractional_max_pool2d_backward", &lower_fractional_max_pool2d_backward});
  table.push_back({"aten::fractional_max_pool3d", &lower_fractional_max_pool3d});
  table.push_back({"aten::im2col", &lower_im2col});
  table.push_back({"aten::max_pool2d_with_indices", &lower_max_pool2d_with_indices});
  table.push_back({"aten::max_pool2d_with_indices_backward", &lower_max_pool2d_with_indices_backward});
  table.push_back({"aten::max_pool3d_with_indices", &lower_max_pool3d_with_indices});
  table.push_back({"aten::max_pool3d_with_indices_backward", &lower_max_pool3d_with_indices_backward});
  table.push_back({"aten::max_unpool2d", &lower_max_unpool2d});
  table.push_back({"aten::max_unpool3d", &lower_max_unpool3d});
}

}  // namespace torchtpu::lowering
