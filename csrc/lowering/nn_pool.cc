// 2-d pooling: max_pool2d_with_indices and avg_pool2d, with their backward ops. Inputs are [N, C, H, W]
// or [C, H, W]; pooling runs over the last two dims.
//
// Max pooling visits the kernel offsets one by one (strided slices of the -inf padded input), keeping
// the running maximum and its flat H*W index, so the indices match PyTorch's (first maximum wins, a NaN
// always wins). Its backward scatter-adds the gradient at those indices. Average pooling sums with
// reduce_window; its backward spreads grad / divisor back with interior-padded copies, one per offset.
#include <algorithm>
#include <limits>
#include <string>

#include "lowering/nn.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;

struct Pool2d {
  int64_t kernel[2], stride[2], padding[2], dilation[2];
  int64_t in[2], out[2];  // spatial sizes
  int64_t high[2];        // padding after the input, enough for every window (ceil_mode may need more)
};

int64_t pick(const std::vector<int64_t>& v, size_t i, int64_t otherwise) {
  if (v.empty()) return otherwise;
  return v.size() == 1 ? v[0] : v[i];
}

// kernel_size, stride (empty: the kernel), padding and dilation (pass dilation_arg 0 for none).
Pool2d pool_geometry(const LoweringContext& ctx, const Type& input, const Type& output, size_t kernel_arg,
                     size_t dilation_arg) {
  Pool2d p{};
  for (size_t i = 0; i < 2; ++i) {
    p.kernel[i] = pick(ctx.ints(kernel_arg), i, 1);
    p.stride[i] = pick(ctx.ints(kernel_arg + 1), i, p.kernel[i]);
    p.padding[i] = pick(ctx.ints(kernel_arg + 2), i, 0);
    p.dilation[i] = dilation_arg ? pick(ctx.ints(dilation_arg), i, 1) : 1;
    p.in[i] = input.dims[input.dims.size() - 2 + i];
    p.out[i] = output.dims[output.dims.size() - 2 + i];
    const int64_t needed = (p.out[i] - 1) * p.stride[i] + (p.kernel[i] - 1) * p.dilation[i] + 1;
    p.high[i] = std::max<int64_t>(needed - p.in[i] - p.padding[i], p.padding[i]);
  }
  return p;
}

// Edge padding of the last two dims.
std::vector<int64_t> spatial_pad(size_t rank, int64_t h, int64_t w) {
  std::vector<int64_t> pad(rank, 0);
  pad[rank - 2] = h;
  pad[rank - 1] = w;
  return pad;
}

// The window element at kernel offset (i, j) for every output position: a strided slice of `padded`.
Value window_element(Graph& g, Value padded, const Pool2d& p, int64_t i, int64_t j) {
  const Type t = g.type(padded);
  const size_t rank = t.dims.size();
  std::vector<int64_t> start(rank, 0), limit = t.dims, strides(rank, 1);
  const int64_t offset[2] = {i * p.dilation[0], j * p.dilation[1]};
  for (size_t d = 0; d < 2; ++d) {
    start[rank - 2 + d] = offset[d];
    limit[rank - 2 + d] = offset[d] + (p.out[d] - 1) * p.stride[d] + 1;
    strides[rank - 2 + d] = p.stride[d];
  }
  return g.slice(padded, start, limit, strides);
}

// max_pool2d_with_indices(self, kernel_size, stride, padding, dilation, ceil_mode) -> (out, indices)
std::vector<Value> lower_max_pool2d_with_indices(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Type& result = ctx.outputs.at(0);
  const Pool2d p = pool_geometry(ctx, in, result, 1, 4);
  const size_t rank = in.dims.size();
  Value x = ctx.tensor(0);
  Value padded = g.pad(x, g.constant(-std::numeric_limits<double>::infinity(), in.dtype),
                       spatial_pad(rank, p.padding[0], p.padding[1]), spatial_pad(rank, p.high[0], p.high[1]));
  // Flat index of the window's top-left element: (oh * sh - ph) * W + (ow * sw - pw).
  const Type index_type{DType::kI64, result.dims};
  Value origin = g.binary(
      "add",
      g.binary("multiply", g.iota(index_type, static_cast<int64_t>(rank) - 2), g.constant_int(p.stride[0] * p.in[1], DType::kI64, result.dims)),
      g.binary("multiply", g.iota(index_type, static_cast<int64_t>(rank) - 1), g.constant_int(p.stride[1], DType::kI64, result.dims)));
  Value best, best_index;
  for (int64_t i = 0; i < p.kernel[0]; ++i) {
    for (int64_t j = 0; j < p.kernel[1]; ++j) {
      Value v = window_element(g, padded, p, i, j);
      const int64_t shift = (i * p.dilation[0] - p.padding[0]) * p.in[1] + (j * p.dilation[1] - p.padding[1]);
      Value index = g.binary("add", origin, g.constant_int(shift, DType::kI64, result.dims));
      if (!best.valid()) {
        best = v;
        best_index = index;
        continue;
      }
      Value take = g.binary("or", g.compare(v, best, Comparison::kGT), g.compare(v, v, Comparison::kNE));
      best = g.select(take, v, best);
      best_index = g.select(take, index, best_index);
    }
  }
  return {best, g.convert(best_index, ctx.outputs.at(1).dtype)};
}

// max_pool2d_with_indices_backward(grad_output, self, kernel_size, stride, padding, dilation, ceil_mode,
//                                  indices): grad added at each window's argmax.
std::vector<Value> lower_max_pool2d_with_indices_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(1);
  const Type grad_type = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(ctx.outputs.at(0).dtype);
  const size_t rank = in.dims.size();
  const int64_t plane = in.dims[rank - 2] * in.dims[rank - 1];
  const int64_t count = grad_type.numel();
  // Each output's plane (the leading dims, flattened) offsets its H*W index into the flat input.
  const Type index_type{DType::kI64, grad_type.dims};
  Value plane_index = g.constant_int(0, DType::kI64, grad_type.dims);
  int64_t stride = 1;
  for (int64_t d = static_cast<int64_t>(rank) - 3; d >= 0; --d) {
    plane_index = g.binary("add", plane_index,
                           g.binary("multiply", g.iota(index_type, d), g.constant_int(stride, DType::kI64, grad_type.dims)));
    stride *= in.dims[static_cast<size_t>(d)];
  }
  Value flat_index = g.binary("add", g.convert(ctx.tensor(7), DType::kI64),
                              g.binary("multiply", plane_index, g.constant_int(plane, DType::kI64, grad_type.dims)));
  Value grad = scatter_add_rows(g, g.constant(0, accumulate, {in.numel()}), g.reshape(flat_index, {count, 1}),
                                g.reshape(g.convert(ctx.tensor(0), accumulate), {count}));
  return {g.reshape(g.convert(grad, ctx.outputs.at(0).dtype), in.dims)};
}

// ---- avg_pool2d -------------------------------------------------------------------------------------

// The divisor of each output position (output's spatial shape), as PyTorch's kernel computes it: the
// window clipped to the padded input, or to the input itself without count_include_pad.
Value avg_divisor(LoweringContext& ctx, const Pool2d& p, const std::vector<int64_t>& dims, size_t include_pad_arg,
                  size_t override_arg, DType dtype) {
  Graph& g = ctx.graph;
  if (!ctx.is_none(override_arg)) return g.constant(static_cast<double>(ctx.integer(override_arg)), dtype, dims);
  const int64_t rank = static_cast<int64_t>(dims.size());
  const Type index_type{DType::kI64, dims};
  auto c = [&](int64_t v) { return g.constant_int(v, DType::kI64, dims); };
  Value extent[2];
  for (int64_t d = 0; d < 2; ++d) {
    Value start = g.binary("subtract", g.binary("multiply", g.iota(index_type, rank - 2 + d), c(p.stride[d])), c(p.padding[d]));
    Value end = g.binary("minimum", g.binary("add", start, c(p.kernel[d])), c(p.in[d] + p.padding[d]));
    if (!ctx.boolean(include_pad_arg)) {
      start = g.binary("maximum", start, c(0));
      end = g.binary("minimum", end, c(p.in[d]));
    }
    extent[d] = g.binary("subtract", end, start);
  }
  return g.convert(g.binary("multiply", extent[0], extent[1]), dtype);
}

// avg_pool2d(self, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override?)
std::vector<Value> lower_avg_pool2d(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const Type& result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  const Pool2d p = pool_geometry(ctx, in, result, 1, 0);
  const size_t rank = in.dims.size();
  Value x = g.convert(ctx.tensor(0), accumulate);
  std::vector<int64_t> window(rank, 1), strides(rank, 1);
  std::string padding;
  for (size_t d = 0; d < rank; ++d) {
    const bool spatial = d + 2 >= rank;
    const size_t s = spatial ? d + 2 - rank : 0;
    if (spatial) {
      window[d] = p.kernel[s];
      strides[d] = p.stride[s];
    }
    padding += std::string(d ? ", " : "") + "[" + std::to_string(spatial ? p.padding[s] : 0) + ", " +
               std::to_string(spatial ? p.high[s] : 0) + "]";
  }
  // reduce_window over the zero-padded input; windows running past the ceil_mode edge are cut off by
  // the result shape.
  std::vector<int64_t> full_dims = in.dims;
  for (size_t s = 0; s < 2; ++s) {
    full_dims[rank - 2 + s] = (p.in[s] + p.padding[s] + p.high[s] - p.kernel[s]) / p.stride[s] + 1;
  }
  Value sum = g.op_multi("stablehlo.reduce_window", {x, g.constant_int(0, accumulate)}, {Type{accumulate, full_dims}},
                         "window_dimensions = " + ir::dense_i64_array(window) + ", window_strides = " +
                             ir::dense_i64_array(strides) + ", padding = dense<[" + padding + "]> : tensor<" +
                             std::to_string(rank) + "x2xi64>",
                         ir::scalar_region("stablehlo.add", accumulate))[0];
  std::vector<int64_t> zeros(rank, 0), unit(rank, 1);
  sum = g.slice(sum, zeros, result.dims, unit);
  Value divisor = avg_divisor(ctx, p, result.dims, 5, 6, accumulate);
  return {g.convert(g.binary("divide", sum, divisor), result.dtype)};
}

// avg_pool2d_backward(grad_output, self, kernel_size, stride, padding, ceil_mode, count_include_pad,
//                     divisor_override?): each window's grad / divisor added to every input it covered.
std::vector<Value> lower_avg_pool2d_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(1);
  const Type grad_type = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(ctx.outputs.at(0).dtype);
  const Pool2d p = pool_geometry(ctx, in, grad_type, 2, 0);
  const size_t rank = in.dims.size();
  Value share = g.binary("divide", g.convert(ctx.tensor(0), accumulate),
                         avg_divisor(ctx, p, grad_type.dims, 6, 7, accumulate));
  std::vector<int64_t> padded_dims = in.dims;
  for (size_t s = 0; s < 2; ++s) padded_dims[rank - 2 + s] = p.in[s] + p.padding[s] + p.high[s];
  Value zero = g.constant_int(0, accumulate);
  Value total;
  for (int64_t i = 0; i < p.kernel[0]; ++i) {
    for (int64_t j = 0; j < p.kernel[1]; ++j) {
      // Output (oh, ow) lands at padded position (oh * sh + i, ow * sw + j): interior padding spaces
      // the outputs by the stride.
      const int64_t offset[2] = {i, j};
      std::vector<int64_t> low(rank, 0), high(rank, 0), interior(rank, 0);
      for (size_t s = 0; s < 2; ++s) {
        low[rank - 2 + s] = offset[s];
        interior[rank - 2 + s] = p.stride[s] - 1;
        high[rank - 2 + s] = padded_dims[rank - 2 + s] - offset[s] - (p.out[s] - 1) * p.stride[s] - 1;
      }
      Value spread = g.op("pad", {share, zero}, Type{accumulate, padded_dims},
                          "edge_padding_low = " + ir::dense_i64_array(low) + ", edge_padding_high = " +
                              ir::dense_i64_array(high) + ", interior_padding = " + ir::dense_i64_array(interior));
      total = total.valid() ? g.binary("add", total, spread) : spread;
    }
  }
  std::vector<int64_t> start(rank, 0), limit = padded_dims, unit(rank, 1);
  for (size_t s = 0; s < 2; ++s) {
    start[rank - 2 + s] = p.padding[s];
    limit[rank - 2 + s] = p.padding[s] + p.in[s];
  }
  return {g.convert(g.slice(total, start, limit, unit), ctx.outputs.at(0).dtype)};
}

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

// Applies the adaptive weights of both spatial dims: forward contracts with their input side, backward
// (spreading gradients back) with their output side.
Value adaptive_average(Graph& g, Value x, const std::vector<int64_t>& in, const std::vector<int64_t>& out,
                       bool backward, DType dtype) {
  const int64_t rank = g.type(x).rank();
  const int64_t matrix_dim = backward ? 0 : 1;
  for (int64_t k = 1; k <= 2; ++k) {
    const size_t d = static_cast<size_t>(static_cast<int64_t>(in.size()) - k);
    x = contract_dim(g, x, rank - k, adaptive_weights(g, in[d], out[d], dtype), matrix_dim, dtype);
  }
  return x;
}

// _adaptive_avg_pool2d(self, output_size): a weighted sum over the spatial dims, exact for any sizes.
std::vector<Value> lower_adaptive_avg_pool2d(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  Value y = adaptive_average(g, g.convert(ctx.tensor(0), accumulate), ctx.type_of(0).dims, result.dims, false, accumulate);
  return {g.convert(y, result.dtype)};
}

// _adaptive_avg_pool2d_backward(grad_output, self): the same weights, transposed, spread each gradient back.
std::vector<Value> lower_adaptive_avg_pool2d_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  Value dx = adaptive_average(g, g.convert(ctx.tensor(0), accumulate), result.dims, ctx.type_of(0).dims, true, accumulate);
  return {g.convert(dx, result.dtype)};
}

}  // namespace

void add_nn_pool_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_adaptive_avg_pool2d", &lower_adaptive_avg_pool2d});
  table.push_back({"aten::_adaptive_avg_pool2d_backward", &lower_adaptive_avg_pool2d_backward});
  table.push_back({"aten::avg_pool2d", &lower_avg_pool2d});
  table.push_back({"aten::avg_pool2d_backward", &lower_avg_pool2d_backward});
  table.push_back({"aten::max_pool2d_with_indices", &lower_max_pool2d_with_indices});
  table.push_back({"aten::max_pool2d_with_indices_backward", &lower_max_pool2d_with_indices_backward});
}

}  // namespace torchtpu::lowering
