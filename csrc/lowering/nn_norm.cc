// Normalization layers: layer norm, group norm, batch norm and weight norm, forward and backward.
//
// Statistics accumulate in float32 for 16-bit inputs (PyTorch's opmath); the variance is the biased one
// and rstd = 1 / sqrt(var + eps), as in PyTorch's kernels, so the saved mean/rstd match CPU's.
#include <algorithm>

#include "lowering/nn.h"

namespace torchtpu::lowering {
namespace {

using ir::Reducer;

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

struct Moments {
  Value centered;  // x - mean, x's shape
  Value mean;      // reduced shape (kept dims only)
  Value rstd;      // reduced shape
};

// Mean and reciprocal standard deviation of x (already in the accumulation type) over `dims`.
Moments moments(Graph& g, Value x, const std::vector<int64_t>& dims, double eps) {
  const Type t = g.type(x);
  int64_t count = 1;
  for (int64_t d : dims) count *= t.dims[static_cast<size_t>(d)];
  const std::vector<int64_t> kept = kept_dims(t.rank(), dims);
  Value sum = sum_over(g, x, dims);
  Value mean = g.binary("divide", sum, like(g, sum, static_cast<double>(count)));
  Value centered = g.binary("subtract", x, g.broadcast_in_dim(mean, t.dims, kept));
  Value var = g.binary("divide", sum_over(g, g.binary("multiply", centered, centered), dims),
                       like(g, mean, static_cast<double>(count)));
  Value rstd = g.unary("rsqrt", g.binary("add", var, like(g, var, eps)));
  return {centered, mean, rstd};
}

// The input gradient of a normalization over `dims` given xhat and gw = grad * weight (both x's shape)
// and rstd (reduced shape): rstd * (gw - mean(gw) - xhat * mean(gw * xhat)).
Value normalized_input_grad(Graph& g, Value gw, Value xhat, Value rstd, const std::vector<int64_t>& dims) {
  const Type t = g.type(xhat);
  int64_t count = 1;
  for (int64_t d : dims) count *= t.dims[static_cast<size_t>(d)];
  const double inv = 1.0 / static_cast<double>(count);
  Value mean_gw = g.binary("multiply", reduce_keep(g, gw, dims, Reducer::kAdd), like(g, gw, inv));
  Value mean_gw_xhat =
      g.binary("multiply", reduce_keep(g, g.binary("multiply", gw, xhat), dims, Reducer::kAdd), like(g, gw, inv));
  Value inner = g.binary("subtract", g.binary("subtract", gw, mean_gw), g.binary("multiply", xhat, mean_gw_xhat));
  return g.binary("multiply", g.broadcast_in_dim(rstd, t.dims, kept_dims(t.rank(), dims)), inner);
}

// ---- layer norm -------------------------------------------------------------------------------------

// native_layer_norm(input, normalized_shape, weight?, bias?, eps) -> (out, mean, rstd); mean and rstd keep
// the normalized dims as size 1.
std::vector<Value> lower_native_layer_norm(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(in.dtype);
  const int64_t axis = in.rank() - static_cast<int64_t>(ctx.ints(1).size());
  const std::vector<int64_t> dims = dim_range(axis, in.rank());
  Moments m = moments(g, g.convert(ctx.tensor(0), accumulate), dims, ctx.real(4));
  const std::vector<int64_t> kept = kept_dims(in.rank(), dims);
  Value y = g.binary("multiply", m.centered, g.broadcast_in_dim(m.rstd, in.dims, kept));
  if (!ctx.is_none(2)) y = g.binary("multiply", y, cast_to(g, ctx.tensor(2), Type{accumulate, in.dims}));
  if (!ctx.is_none(3)) y = g.binary("add", y, cast_to(g, ctx.tensor(3), Type{accumulate, in.dims}));
  return {g.convert(y, out(ctx, 0).dtype), g.reshape(g.convert(m.mean, out(ctx, 1).dtype), out(ctx, 1).dims),
          g.reshape(g.convert(m.rstd, out(ctx, 2).dtype), out(ctx, 2).dims)};
}

// native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight?, bias?, output_mask)
//   -> (grad_input, grad_weight, grad_bias)
std::vector<Value> lower_native_layer_norm_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(1);
  const DType accumulate = accumulation_dtype(in.dtype);
  const Type compute{accumulate, in.dims};
  const int64_t axis = in.rank() - static_cast<int64_t>(ctx.ints(2).size());
  const std::vector<int64_t> dims = dim_range(axis, in.rank());
  const std::vector<int64_t> batch = dim_range(0, axis);
  const std::vector<bool> mask = output_mask(ctx, 7, 3);

  Value grad = g.convert(ctx.tensor(0), accumulate);
  Value x = g.convert(ctx.tensor(1), accumulate);
  Value mean = cast_to(g, ctx.tensor(3), compute);
  Value rstd_full = cast_to(g, ctx.tensor(4), compute);
  Value xhat = g.binary("multiply", g.binary("subtract", x, mean), rstd_full);
  Value gw = ctx.is_none(5) ? grad : g.binary("multiply", grad, cast_to(g, ctx.tensor(5), compute));
  // rstd in the reduced shape, for normalized_input_grad.
  Value rstd = g.reshape(g.convert(ctx.tensor(4), accumulate), std::vector<int64_t>(in.dims.begin(), in.dims.begin() + axis));

  std::vector<Value> results(3);
  if (mask[0]) results[0] = g.convert(normalized_input_grad(g, gw, xhat, rstd, dims), out(ctx, 0).dtype);
  if (mask[1] && ctx.outputs.size() > 1) {
    results[1] = g.reshape(g.convert(sum_over(g, g.binary("multiply", grad, xhat), batch), out(ctx, 1).dtype), out(ctx, 1).dims);
  }
  if (mask[2] && ctx.outputs.size() > 2) {
    results[2] = g.reshape(g.convert(sum_over(g, grad, batch), out(ctx, 2).dtype), out(ctx, 2).dims);
  }
  results.resize(ctx.outputs.size());
  return results;
}

// ---- group norm -------------------------------------------------------------------------------------

struct GroupShape {
  int64_t n, c, hw, groups;
};

GroupShape group_shape(const LoweringContext& ctx, size_t n_arg) {
  return {ctx.integer(n_arg), ctx.integer(n_arg + 1), ctx.integer(n_arg + 2), ctx.integer(n_arg + 3)};
}

// weight or bias [C] broadcast over [N, C, HxW].
Value per_channel(Graph& g, Value v, const GroupShape& s, DType dtype) {
  return g.broadcast_in_dim(g.convert(v, dtype), {s.n, s.c, s.hw}, {1});
}

// native_group_norm(input, weight?, bias?, N, C, HxW, group, eps) -> (out, mean [N, G], rstd [N, G])
std::vector<Value> lower_native_group_norm(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(in.dtype);
  const GroupShape s = group_shape(ctx, 3);
  const std::vector<int64_t> grouped_dims{s.n, s.groups, (s.c / s.groups) * s.hw};
  Value x = g.reshape(g.convert(ctx.tensor(0), accumulate), grouped_dims);
  Moments m = moments(g, x, {2}, ctx.real(7));
  Value y = g.binary("multiply", m.centered, g.broadcast_in_dim(m.rstd, grouped_dims, {0, 1}));
  y = g.reshape(y, {s.n, s.c, s.hw});
  if (!ctx.is_none(1)) y = g.binary("multiply", y, per_channel(g, ctx.tensor(1), s, accumulate));
  if (!ctx.is_none(2)) y = g.binary("add", y, per_channel(g, ctx.tensor(2), s, accumulate));
  return {g.reshape(g.convert(y, out(ctx, 0).dtype), out(ctx, 0).dims),
          g.reshape(g.convert(m.mean, out(ctx, 1).dtype), out(ctx, 1).dims),
          g.reshape(g.convert(m.rstd, out(ctx, 2).dtype), out(ctx, 2).dims)};
}

// native_group_norm_backward(grad_out, input, mean, rstd, weight?, N, C, HxW, group, output_mask)
//   -> (grad_input, grad_weight, grad_bias)
std::vector<Value> lower_native_group_norm_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(1);
  const DType accumulate = accumulation_dtype(in.dtype);
  const GroupShape s = group_shape(ctx, 5);
  const std::vector<int64_t> grouped{s.n, s.groups, (s.c / s.groups) * s.hw};
  const std::vector<int64_t> channels{s.n, s.c, s.hw};
  const std::vector<bool> mask = output_mask(ctx, 9, 3);

  Value grad = g.reshape(g.convert(ctx.tensor(0), accumulate), channels);
  Value x = g.reshape(g.convert(ctx.tensor(1), accumulate), grouped);
  Value mean = g.reshape(g.convert(ctx.tensor(2), accumulate), {s.n, s.groups});
  Value rstd = g.reshape(g.convert(ctx.tensor(3), accumulate), {s.n, s.groups});
  Value xhat = g.binary("multiply", g.binary("subtract", x, g.broadcast_in_dim(mean, grouped, {0, 1})),
                        g.broadcast_in_dim(rstd, grouped, {0, 1}));
  Value gw = ctx.is_none(4) ? grad : g.binary("multiply", grad, per_channel(g, ctx.tensor(4), s, accumulate));

  std::vector<Value> results(3);
  if (mask[0]) {
    Value dx = normalized_input_grad(g, g.reshape(gw, grouped), xhat, rstd, {2});
    results[0] = g.reshape(g.convert(dx, out(ctx, 0).dtype), out(ctx, 0).dims);
  }
  if (mask[1] && ctx.outputs.size() > 1) {
    Value dw = sum_over(g, g.binary("multiply", grad, g.reshape(xhat, channels)), {0, 2});
    results[1] = g.reshape(g.convert(dw, out(ctx, 1).dtype), out(ctx, 1).dims);
  }
  if (mask[2] && ctx.outputs.size() > 2) {
    results[2] = g.reshape(g.convert(sum_over(g, grad, {0, 2}), out(ctx, 2).dtype), out(ctx, 2).dims);
  }
  results.resize(ctx.outputs.size());
  return results;
}

// ---- batch norm -------------------------------------------------------------------------------------

// Statistics of batch norm run over every dim but the channel dim (1).
std::vector<int64_t> batch_norm_dims(int64_t rank) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < rank; ++d) dims.push_back(d);
  return dims;
}

// A per-channel [C] value (in the accumulation type) broadcast over the input's shape.
Value channel_wise(Graph& g, Value v, const Type& in, DType dtype) {
  return g.broadcast_in_dim(g.convert(v, dtype), in.dims, {1});
}

// y = (x - mean) * rstd * weight + bias, every statistic per channel.
Value batch_normalize(LoweringContext& ctx, Value centered, Value rstd, const Type& in, DType accumulate) {
  Graph& g = ctx.graph;
  Value y = g.binary("multiply", centered, channel_wise(g, rstd, in, accumulate));
  if (!ctx.is_none(1)) y = g.binary("multiply", y, channel_wise(g, ctx.tensor(1), in, accumulate));
  if (!ctx.is_none(2)) y = g.binary("add", y, channel_wise(g, ctx.tensor(2), in, accumulate));
  return y;
}

// Training-mode outputs (out, save_mean, save_invstd) and, when running stats are given (arguments 3 and 4),
// their updates: running = (1 - momentum) * running + momentum * batch statistic, with the unbiased
// variance, as PyTorch does.
std::vector<Value> batch_norm_training(LoweringContext& ctx, bool has_running, double momentum, double eps) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(in.dtype);
  const std::vector<int64_t> dims = batch_norm_dims(in.rank());
  Moments m = moments(g, g.convert(ctx.tensor(0), accumulate), dims, eps);
  Value y = batch_normalize(ctx, m.centered, m.rstd, in, accumulate);
  std::vector<Value> results{g.convert(y, out(ctx, 0).dtype), g.convert(m.mean, out(ctx, 1).dtype),
                             g.convert(m.rstd, out(ctx, 2).dtype)};
  if (!has_running) return results;
  int64_t count = 1;
  for (int64_t d : dims) count *= in.dims[static_cast<size_t>(d)];
  Value biased_var = g.binary("divide", sum_over(g, g.binary("multiply", m.centered, m.centered), dims),
                              like(g, m.mean, static_cast<double>(count)));
  Value unbiased_var = g.binary("multiply", biased_var,
                                like(g, biased_var, static_cast<double>(count) / static_cast<double>(std::max<int64_t>(count - 1, 1))));
  const Type stat_type = ctx.type_of(3);
  auto update = [&](size_t arg, Value batch_stat) {
    Value running = g.convert(ctx.tensor(arg), accumulate);
    Value blended = g.binary("add", g.binary("multiply", running, like(g, running, 1.0 - momentum)),
                             g.binary("multiply", batch_stat, like(g, batch_stat, momentum)));
    return g.convert(blended, stat_type.dtype);
  };
  results.push_back(update(3, m.mean));
  results.push_back(update(4, unbiased_var));
  return results;
}

// Inference: normalize with the running statistics; save_mean/save_invstd are empty.
std::vector<Value> batch_norm_inference(LoweringContext& ctx, double eps) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(in.dtype);
  Value mean = g.convert(ctx.tensor(3), accumulate);
  Value var = g.convert(ctx.tensor(4), accumulate);
  Value rstd = g.unary("rsqrt", g.binary("add", var, like(g, var, eps)));
  Value centered = g.binary("subtract", g.convert(ctx.tensor(0), accumulate), channel_wise(g, mean, in, accumulate));
  Value y = batch_normalize(ctx, centered, rstd, in, accumulate);
  return {g.convert(y, out(ctx, 0).dtype), g.constant(0.0, out(ctx, 1).dtype, out(ctx, 1).dims),
          g.constant(0.0, out(ctx, 2).dtype, out(ctx, 2).dims)};
}

// _native_batch_norm_legit(input, weight?, bias?, running_mean!, running_var!, training, momentum, eps)
//   -> (out, save_mean, save_invstd), then the new running_mean and running_var.
std::vector<Value> lower_batch_norm_legit(LoweringContext& ctx) {
  if (!ctx.boolean(5)) {
    std::vector<Value> results = batch_norm_inference(ctx, ctx.real(7));
    results.push_back(ctx.tensor(3));  // running statistics are left as they are
    results.push_back(ctx.tensor(4));
    return results;
  }
  return batch_norm_training(ctx, /*has_running=*/true, ctx.real(6), ctx.real(7));
}

// _native_batch_norm_legit.no_stats(input, weight?, bias?, training, momentum, eps): batch statistics only.
std::vector<Value> lower_batch_norm_legit_no_stats(LoweringContext& ctx) {
  return batch_norm_training(ctx, /*has_running=*/false, ctx.real(4), ctx.real(5));
}

// _native_batch_norm_legit_no_training(input, weight?, bias?, running_mean, running_var, momentum, eps)
std::vector<Value> lower_batch_norm_legit_no_training(LoweringContext& ctx) {
  return batch_norm_inference(ctx, ctx.real(6));
}

// _batch_norm_with_update(input, weight?, bias?, running_mean!, running_var!, momentum, eps)
//   -> (out, save_mean, save_invstd, reserve), then the new running_mean and running_var. reserve is
// cuDNN's workspace, empty elsewhere.
std::vector<Value> lower_batch_norm_with_update(LoweringContext& ctx) {
  std::vector<Value> results = batch_norm_training(ctx, /*has_running=*/true, ctx.real(5), ctx.real(6));
  const Type reserve = out(ctx, 3);
  results.insert(results.begin() + 3, ctx.graph.constant_int(0, reserve.dtype, reserve.dims));
  return results;
}

// native_batch_norm_backward(grad_out, input, weight?, running_mean?, running_var?, save_mean?, save_invstd?,
//                            train, eps, output_mask) -> (grad_input, grad_weight, grad_bias), and
// batch_norm_backward, whose arguments read the same up to a trailing `reserve` (its save_var holds the
// inverse standard deviation, and `update` says whether batch statistics were used).
std::vector<Value> lower_batch_norm_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(1);
  const DType accumulate = accumulation_dtype(in.dtype);
  const std::vector<int64_t> dims = batch_norm_dims(in.rank());
  const std::vector<bool> mask = output_mask(ctx, 9, 3);
  const bool train = ctx.boolean(7);
  Value mean;
  Value rstd;
  if (train) {
    mean = g.convert(ctx.tensor(5), accumulate);
    rstd = g.convert(ctx.tensor(6), accumulate);
  } else {
    mean = g.convert(ctx.tensor(3), accumulate);
    Value var = g.convert(ctx.tensor(4), accumulate);
    rstd = g.unary("rsqrt", g.binary("add", var, like(g, var, ctx.real(8))));
  }
  Value grad = g.convert(ctx.tensor(0), accumulate);
  Value x = g.convert(ctx.tensor(1), accumulate);
  Value xhat = g.binary("multiply", g.binary("subtract", x, channel_wise(g, mean, in, accumulate)),
                        channel_wise(g, rstd, in, accumulate));
  Value gw = ctx.is_none(2) ? grad : g.binary("multiply", grad, channel_wise(g, ctx.tensor(2), in, accumulate));
  std::vector<Value> results(3);
  if (mask[0]) {
    // Inference mode treats the statistics as constants: the gradient is just scaled.
    Value dx = train ? normalized_input_grad(g, gw, xhat, rstd, dims)
                     : g.binary("multiply", gw, channel_wise(g, rstd, in, accumulate));
    results[0] = g.convert(dx, out(ctx, 0).dtype);
  }
  if (mask[1]) results[1] = g.convert(sum_over(g, g.binary("multiply", grad, xhat), dims), out(ctx, 1).dtype);
  if (mask[2]) results[2] = g.convert(sum_over(g, grad, dims), out(ctx, 2).dtype);
  return results;
}

// ---- weight norm ----
//
// The fused interface nn.utils.weight_norm (and its parametrization) calls when `dim` is the first or last:
// w = g * v / ||v||, the norm over every dim but `dim`, in float32 for 16-bit v as CPU computes it.

struct WeightNorm {
  std::vector<int64_t> others;  // the dims the norm runs over
  std::vector<int64_t> kept;    // where `dim` sits among v's dims, for broadcasting a per-slice value
};

WeightNorm weight_norm_dims(const LoweringContext& ctx, size_t dim_arg, int64_t rank) {
  const int64_t dim = wrap_dim(ctx.integer(dim_arg), rank);
  WeightNorm shape;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) shape.others.push_back(d);
  }
  shape.kept = kept_dims(rank, shape.others);
  return shape;
}

// _weight_norm_interface(v, g, dim) -> (w, norms); norms has g's shape.
std::vector<Value> lower_weight_norm(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx, 0).dtype);
  Value v = g.convert(ctx.tensor(0), accumulate);
  const Type t = g.type(v);
  const WeightNorm shape = weight_norm_dims(ctx, 2, t.rank());
  Value norm = g.unary("sqrt", sum_over(g, g.binary("multiply", v, v), shape.others));
  Value gain = broadcast_to(g, g.convert(ctx.tensor(1), accumulate), t.dims);
  Value w = g.binary("multiply", v, g.binary("divide", gain, g.broadcast_in_dim(norm, t.dims, shape.kept)));
  return {g.convert(w, out(ctx, 0).dtype), g.convert(g.reshape(norm, out(ctx, 1).dims), out(ctx, 1).dtype)};
}

// _weight_norm_interface_backward(grad_w, saved_v, saved_g, saved_norms, dim) -> (grad_v, grad_g):
// grad_g = <grad_w, v> / ||v|| per slice, grad_v = g / ||v|| * (grad_w - v * <grad_w, v> / ||v||^2).
std::vector<Value> lower_weight_norm_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx, 0).dtype);
  Value grad = g.convert(ctx.tensor(0), accumulate);
  Value v = g.convert(ctx.tensor(1), accumulate);
  const Type t = g.type(v);
  const WeightNorm shape = weight_norm_dims(ctx, 4, t.rank());
  Value gain = broadcast_to(g, g.convert(ctx.tensor(2), accumulate), t.dims);
  Value norm = broadcast_to(g, g.convert(ctx.tensor(3), accumulate), t.dims);
  Value dot = g.broadcast_in_dim(sum_over(g, g.binary("multiply", grad, v), shape.others), t.dims, shape.kept);
  Value grad_gain = g.binary("divide", dot, norm);
  Value projected = g.binary("multiply", v, g.binary("divide", grad_gain, norm));
  Value grad_v = g.binary("multiply", g.binary("divide", gain, norm), g.binary("subtract", grad, projected));
  // One value per slice: read it at the slice's first position of the other dims.
  std::vector<int64_t> limit = t.dims;
  for (int64_t d : shape.others) limit[static_cast<size_t>(d)] = 1;
  Value grad_g = g.slice(grad_gain, std::vector<int64_t>(t.dims.size(), 0), limit, std::vector<int64_t>(t.dims.size(), 1));
  return {g.convert(grad_v, out(ctx, 0).dtype), g.convert(g.reshape(grad_g, out(ctx, 1).dims), out(ctx, 1).dtype)};
}

}  // namespace

void add_nn_norm_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_weight_norm_interface", &lower_weight_norm});
  table.push_back({"aten::_weight_norm_interface_backward", &lower_weight_norm_backward});
  table.push_back({"aten::_batch_norm_with_update", &lower_batch_norm_with_update});
  table.push_back({"aten::_native_batch_norm_legit", &lower_batch_norm_legit});
  table.push_back({"aten::_native_batch_norm_legit.no_stats", &lower_batch_norm_legit_no_stats});
  table.push_back({"aten::_native_batch_norm_legit_no_training", &lower_batch_norm_legit_no_training});
  table.push_back({"aten::batch_norm_backward", &lower_batch_norm_backward});
  table.push_back({"aten::native_batch_norm_backward", &lower_batch_norm_backward});
  table.push_back({"aten::native_group_norm", &lower_native_group_norm});
  table.push_back({"aten::native_group_norm_backward", &lower_native_group_norm_backward});
  table.push_back({"aten::native_layer_norm", &lower_native_layer_norm});
  table.push_back({"aten::native_layer_norm_backward", &lower_native_layer_norm_backward});
}

}  // namespace torchtpu::lowering
