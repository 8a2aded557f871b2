// Convolution (1d/2d/3d, strided, padded, dilated, grouped, transposed) and its backward, as
// stablehlo.convolution.
//
// The rules key on aten::convolution / aten::convolution_backward rather than the *_overrideable pair:
// those have no meta kernel, so the generic kernel could not infer their output shapes, while
// aten::convolution registered for tpu takes precedence over its CompositeExplicitAutograd kernel and
// autograd differentiates it with convolution_backward. Everything is built from one canonical
// convolution (operands laid out [batch, feature, spatial...] and [out, in, spatial...]) following the
// transposition identities JAX uses for conv's VJP: the input gradient is a convolution of the output
// gradient with the flipped, group-regrouped kernel; the weight gradient is a convolution of the input
// with the output gradient, batch and feature swapped (batch_group_count = groups). A transposed
// convolution is the input gradient of the ordinary one, and vice versa.
#include <algorithm>
#include <string>

#include "lowering/nn.h"

namespace torchtpu::lowering {
namespace {

struct Window {
  std::vector<int64_t> strides, low, high, lhs_dilation, rhs_dilation;
};

int64_t dilated(int64_t size, int64_t dilation) { return size == 0 ? 0 : (size - 1) * dilation + 1; }

// lhs [B, F, s...] conv rhs [O, I, k...] -> [B / batch_groups, O, s'...], float32 for 16-bit operands
// (they are converted first) at HIGHEST precision, as PyTorch's CPU convolution accumulates.
Value canonical_conv(Graph& g, Value lhs, Value rhs, const Window& w, int64_t feature_groups, int64_t batch_groups) {
  const Type l = g.type(lhs);
  const Type r = g.type(rhs);
  const size_t spatial = l.dims.size() - 2;
  std::vector<int64_t> dims{l.dims[0] / batch_groups, r.dims[0]};
  std::string labels = "b, f", kernel = "o, i";
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t extent = dilated(l.dims[i + 2], w.lhs_dilation[i]) + w.low[i] + w.high[i];
    dims.push_back((extent - dilated(r.dims[i + 2], w.rhs_dilation[i])) / w.strides[i] + 1);
    labels += ", " + std::to_string(i);
    kernel += ", " + std::to_string(i);
  }
  std::string padding;
  for (size_t i = 0; i < spatial; ++i) padding += std::string(i ? ", " : "") + "[" + std::to_string(w.low[i]) + ", " + std::to_string(w.high[i]) + "]";
  const std::string attributes =
      "dimension_numbers = #stablehlo.conv<[" + labels + "]x[" + kernel + "]->[" + labels + "]>, window_strides = " +
      ir::dense_i64_array(w.strides) + ", padding = dense<[" + padding + "]> : tensor<" + std::to_string(spatial) +
      "x2xi64>, lhs_dilation = " + ir::dense_i64_array(w.lhs_dilation) + ", rhs_dilation = " +
      ir::dense_i64_array(w.rhs_dilation) + ", feature_group_count = " + std::to_string(feature_groups) +
      " : i64, batch_group_count = " + std::to_string(batch_groups) +
      " : i64, precision_config = [#stablehlo<precision HIGHEST>, #stablehlo<precision HIGHEST>]";
  return g.op("convolution", {lhs, rhs}, Type{l.dtype, dims}, attributes);
}

struct ConvArgs {
  std::vector<int64_t> stride, padding, dilation;
  int64_t groups;
};

// A per-dim argument, expanded when given as one value.
std::vector<int64_t> per_dim(const std::vector<int64_t>& v, size_t spatial) {
  return v.size() == 1 ? std::vector<int64_t>(spatial, v[0]) : v;
}

ConvArgs conv_args(const LoweringContext& ctx, size_t stride_arg, size_t groups_arg, size_t spatial) {
  return {per_dim(ctx.ints(stride_arg), spatial), per_dim(ctx.ints(stride_arg + 1), spatial),
          per_dim(ctx.ints(stride_arg + 2), spatial), ctx.integer(groups_arg)};
}

std::vector<int64_t> ones(size_t n) { return std::vector<int64_t>(n, 1); }

// The ordinary convolution y = conv(x, w): x [N, C, s...], w [O, C / groups, k...].
Value conv(Graph& g, Value x, Value w, const ConvArgs& a) {
  const size_t spatial = g.type(x).dims.size() - 2;
  return canonical_conv(g, x, w, {a.stride, a.padding, a.padding, ones(spatial), a.dilation}, a.groups, 1);
}

// The input gradient of y = conv(x, w) given dy, where x has spatial shape `in_spatial`: a convolution
// of dy (dilated by the stride) with w flipped and regrouped to [C, O / groups, k...].
Value conv_input_grad(Graph& g, Value dy, Value w, const ConvArgs& a, const std::vector<int64_t>& in_spatial) {
  const Type wt = g.type(w);
  const Type dyt = g.type(dy);
  const size_t spatial = wt.dims.size() - 2;
  const int64_t out_channels = wt.dims[0], in_per_group = wt.dims[1], groups = a.groups;
  std::vector<int64_t> grouped{groups, out_channels / groups, in_per_group};
  std::vector<int64_t> perm{1, 0, 2}, regrouped{out_channels / groups, groups * in_per_group}, flip;
  for (size_t i = 0; i < spatial; ++i) {
    grouped.push_back(wt.dims[i + 2]);
    perm.push_back(static_cast<int64_t>(i) + 3);
    regrouped.push_back(wt.dims[i + 2]);
    flip.push_back(static_cast<int64_t>(i) + 2);
  }
  // [O, I, k] -> [G, O/G, I, k] -> [O/G, G, I, k] -> [O/G, C, k] -> [C, O/G, k], then flipped.
  Value kernel = g.reshape(g.transpose(g.reshape(w, grouped), perm), regrouped);
  std::vector<int64_t> swap{1, 0};
  for (size_t i = 0; i < spatial; ++i) swap.push_back(static_cast<int64_t>(i) + 2);
  kernel = g.transpose(kernel, swap);
  const Type kernel_type = g.type(kernel);
  kernel = g.op("reverse", {kernel}, kernel_type, "dimensions = " + ir::dense_i64_array(flip));
  Window win{ones(spatial), {}, {}, a.stride, a.dilation};
  for (size_t i = 0; i < spatial; ++i) {
    const int64_t k = dilated(wt.dims[i + 2], a.dilation[i]);
    const int64_t low = k - a.padding[i] - 1;
    win.low.push_back(low);
    win.high.push_back(in_spatial[i] + k - 1 - dilated(dyt.dims[i + 2], a.stride[i]) - low);
  }
  return canonical_conv(g, dy, kernel, win, groups, 1);
}

// The weight gradient of y = conv(x, w) given dy, for a kernel of spatial shape `kernel_spatial`: x and
// dy with batch and feature swapped, convolved with batch_group_count = groups, gives [C / groups, O, k].
Value conv_weight_grad(Graph& g, Value x, Value dy, const ConvArgs& a, const std::vector<int64_t>& kernel_spatial) {
  const Type xt = g.type(x);
  const Type dyt = g.type(dy);
  const size_t spatial = xt.dims.size() - 2;
  std::vector<int64_t> swap{1, 0};
  for (size_t i = 0; i < spatial; ++i) swap.push_back(static_cast<int64_t>(i) + 2);
  Window win{a.dilation, {}, {}, ones(spatial), a.stride};
  for (size_t i = 0; i < spatial; ++i) {
    win.low.push_back(a.padding[i]);
    win.high.push_back(dilated(dyt.dims[i + 2], a.stride[i]) - xt.dims[i + 2] + dilated(kernel_spatial[i], a.dilation[i]) -
                       a.padding[i] - 1);
  }
  Value grad = canonical_conv(g, g.transpose(x, swap), g.transpose(dy, swap), win, 1, a.groups);
  return g.transpose(grad, swap);
}

std::vector<int64_t> spatial_of(const Type& t) { return std::vector<int64_t>(t.dims.begin() + 2, t.dims.end()); }

Value bias_grad(Graph& g, Value dy) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < g.type(dy).rank(); ++d) dims.push_back(d);
  return sum_over(g, dy, dims);
}

// convolution(input, weight, bias?, stride, padding, dilation, transposed, output_padding, groups)
std::vector<Value> lower_convolution(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = ctx.outputs.at(0);
  const DType accumulate = accumulation_dtype(result.dtype);
  const size_t spatial = static_cast<size_t>(ctx.type_of(0).rank()) - 2;
  // A transposed convolution with an empty output dim: the meta kernel accepts every such case, CPU's
  // kernels refuse some ("Output size is too small") and return an empty tensor for others, so CPU decides.
  const std::vector<int64_t> out_spatial = spatial_of(result);
  if (ctx.boolean(6) && std::count(out_spatial.begin(), out_spatial.end(), 0) > 0) throw NotLowered{};
  const ConvArgs a = conv_args(ctx, 3, 8, spatial);
  Value x = g.convert(ctx.tensor(0), accumulate);
  Value w = g.convert(ctx.tensor(1), accumulate);
  // A transposed convolution is the input gradient of the ordinary one; output_padding is already in
  // the inferred output shape.
  Value y = ctx.boolean(6) ? conv_input_grad(g, x, w, a, spatial_of(result)) : conv(g, x, w, a);
  if (!ctx.is_none(2)) y = g.binary("add", y, g.broadcast_in_dim(g.convert(ctx.tensor(2), accumulate), result.dims, {1}));
  return {g.convert(y, result.dtype)};
}

// convolution_backward(grad_output, input, weight, bias_sizes?, stride, padding, dilation, transposed,
//                      output_padding, groups, output_mask) -> (grad_input, grad_weight, grad_bias)
std::vector<Value> lower_convolution_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(ctx.type_of(1).dtype);
  const size_t spatial = static_cast<size_t>(ctx.type_of(1).rank()) - 2;
  const ConvArgs a = conv_args(ctx, 4, 9, spatial);
  const std::vector<bool> mask = output_mask(ctx, 10, 3);
  const bool transposed = ctx.boolean(7);
  Value dy = g.convert(ctx.tensor(0), accumulate);
  Value x = g.convert(ctx.tensor(1), accumulate);
  Value w = g.convert(ctx.tensor(2), accumulate);
  const std::vector<int64_t> kernel_spatial = spatial_of(ctx.type_of(2));
  std::vector<Value> results(3);
  if (mask[0]) {
    // Transposed: the forward was conv_input_grad, so its input gradient is the ordinary convolution. Its
    // output can be longer than the input: output_padding cells it reaches never came from the input.
    Value dx = transposed ? conv(g, dy, w, a) : conv_input_grad(g, dy, w, a, spatial_of(ctx.type_of(1)));
    const Type& input = ctx.type_of(1);
    if (g.type(dx).dims != input.dims) {
      dx = g.slice(dx, std::vector<int64_t>(input.dims.size(), 0), input.dims, ones(input.dims.size()));
    }
    results[0] = g.convert(dx, ctx.outputs.at(0).dtype);
  }
  if (mask[1] && ctx.outputs.size() > 1) {
    // Transposed: y = A_w^T x, so dw pairs dy (as the ordinary conv's input) with x (as its output grad).
    Value dw = transposed ? conv_weight_grad(g, dy, x, a, kernel_spatial) : conv_weight_grad(g, x, dy, a, kernel_spatial);
    results[1] = g.convert(dw, ctx.outputs.at(1).dtype);
  }
  if (mask[2] && ctx.outputs.size() > 2) {
    results[2] = g.reshape(g.convert(bias_grad(g, dy), ctx.outputs.at(2).dtype), ctx.outputs.at(2).dims);
  }
  results.resize(ctx.outputs.size());
  return results;
}

}  // namespace

// convolution_backward returns an undefined tensor for each false output_mask entry, which the generic
// kernel (aten/op_kernel.cc) cannot bind yet, nor does it pass the bool[] output_mask to rules: until it
// does, only calls that request all three gradients (input, weight and bias) succeed. It is registered
// anyway because nothing else can serve it: its CompositeExplicitAutograd kernel routes tpu tensors to
// convolution_backward_overrideable, which has no implementation, so the CPU fallback is never reached.
// The rule already follows the intended contract: it reads output_mask as 0/1 ints and returns an
// invalid Value for each result that is not requested.
void add_nn_conv_rules(std::vector<Rule>& table) {
  table.push_back({"aten::convolution", &lower_convolution});
  table.push_back({"aten::convolution_backward", &lower_convolution_backward});
}

}  // namespace torchtpu::lowering
