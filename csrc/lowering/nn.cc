// Losses, embedding backward, embedding_bag, channel_shuffle, and the helpers shared by the nn rule files
// (nn_activation.cc, nn_norm.cc, nn_conv.cc, nn_pool.cc, nn_distance.cc, upsample.cc), whose rules
// add_nn_rules collects.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>
#include <string>

#include "lowering/nn.h"

namespace torchtpu::lowering {

using ir::Comparison;
using ir::Reducer;

Value reduce_keep(Graph& g, Value x, const std::vector<int64_t>& dims, Reducer reducer) {
  const Type t = g.type(x);
  Value init;
  if (reducer == Reducer::kMax) init = g.constant(-std::numeric_limits<double>::infinity(), t.dtype);
  else init = g.constant_int(0, t.dtype);
  return g.broadcast_in_dim(g.reduce(x, init, dims, reducer), t.dims, kept_dims(t.rank(), dims));
}

Value sum_over(Graph& g, Value x, const std::vector<int64_t>& dims) {
  return g.reduce(x, g.constant_int(0, g.type(x).dtype), dims, Reducer::kAdd);
}

Value like(Graph& g, Value x, double value) {
  const Type t = g.type(x);  // a copy: Graph::type() refers into storage that adding nodes may move
  return g.constant(value, t.dtype, t.dims);
}

std::vector<int64_t> kept_dims(int64_t rank, const std::vector<int64_t>& dims) {
  std::vector<int64_t> kept;
  for (int64_t i = 0; i < rank; ++i) {
    bool reduced = false;
    for (int64_t d : dims) reduced |= d == i;
    if (!reduced) kept.push_back(i);
  }
  return kept;
}

std::vector<bool> output_mask(const LoweringContext& ctx, size_t i, size_t count) {
  std::vector<bool> mask(count, true);
  if (i < ctx.args.size() && ctx.args[i].kind == Arg::Kind::kIntList) {
    const std::vector<int64_t>& bits = ctx.args[i].ints;
    for (size_t k = 0; k < count && k < bits.size(); ++k) mask[k] = bits[k] != 0;
  }
  return mask;
}

Value constant_vector(Graph& g, const std::vector<double>& values, DType dtype) {
  // Other float types are rounded once from float32.
  if (is_floating(dtype) && dtype != DType::kF32 && dtype != DType::kF64) {
    return g.convert(constant_vector(g, values, DType::kF32), dtype);
  }
  std::string literal;
  char buf[40];
  for (size_t i = 0; i < values.size(); ++i) {
    // Floats are spelled as their bit patterns, which MLIR reads back exactly.
    if (dtype == DType::kF64) {
      uint64_t bits;
      std::memcpy(&bits, &values[i], sizeof bits);
      std::snprintf(buf, sizeof buf, "0x%016llX", static_cast<unsigned long long>(bits));
    } else if (dtype == DType::kF32) {
      const float f = static_cast<float>(values[i]);
      uint32_t bits;
      std::memcpy(&bits, &f, sizeof bits);
      std::snprintf(buf, sizeof buf, "0x%08X", bits);
    } else {
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(values[i]));
    }
    literal += (i ? ", " : "") + std::string(buf);
  }
  const Type type{dtype, {static_cast<int64_t>(values.size())}};
  return g.op("constant", {}, type, "value = dense<[" + literal + "]> : " + ir::to_mlir(type));
}

namespace {

// Dimension numbers shared by take_along and scatter_along: every dim but `dim` is a window dim.
std::vector<int64_t> all_but(int64_t rank, int64_t dim) {
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != dim) dims.push_back(d);
  }
  return dims;
}

}  // namespace

Value take_along(Graph& g, Value x, int64_t dim, Value index) {
  const Type t = g.type(x);
  const int64_t count = g.type(index).dims.at(0);
  std::vector<int64_t> slice = t.dims, result = t.dims;
  slice[static_cast<size_t>(dim)] = 1;
  result[static_cast<size_t>(dim)] = count;
  Value indices = g.reshape(g.convert(index, DType::kI64), {count, 1});
  return g.op("gather", {x, indices}, Type{t.dtype, result},
              "dimension_numbers = #stablehlo.gather<offset_dims = " + ir::bracket_list(all_but(t.rank(), dim)) +
                  ", collapsed_slice_dims = [" + std::to_string(dim) + "], start_index_map = [" +
                  std::to_string(dim) + "], index_vector_dim = 1>, slice_sizes = " + ir::dense_i64_array(slice) +
                  ", indices_are_sorted = false");
}

Value scatter_along(Graph& g, Value base, int64_t dim, Value index, Value updates, Reducer reducer) {
  const Type t = g.type(base);
  const char* combiner = reducer == Reducer::kMax ? "stablehlo.maximum"
                         : reducer == Reducer::kMin ? "stablehlo.minimum"
                         : reducer == Reducer::kMul ? "stablehlo.multiply"
                                                    : "stablehlo.add";
  const int64_t count = g.type(index).dims.at(0);
  Value indices = g.reshape(g.convert(index, DType::kI64), {count, 1});
  return g.op_multi("stablehlo.scatter", {base, indices, updates}, {t},
                    "scatter_dimension_numbers = #stablehlo.scatter<update_window_dims = " +
                        ir::bracket_list(all_but(t.rank(), dim)) + ", inserted_window_dims = [" + std::to_string(dim) +
                        "], scatter_dims_to_operand_dims = [" + std::to_string(dim) +
                        "], index_vector_dim = 1>, indices_are_sorted = false, unique_indices = false",
                    ir::scalar_region(combiner, t.dtype))[0];
}

namespace {

// at::Reduction: 0 none, 1 mean, 2 sum.
constexpr int64_t kReductionNone = 0;
constexpr int64_t kReductionMean = 1;

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

// mse_loss(self, target, reduction)
std::vector<Value> lower_mse_loss(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  const Type compute{accumulate, in.dims};
  Value diff = g.binary("subtract", cast_to(g, ctx.tensor(0), compute), cast_to(g, ctx.tensor(1), compute));
  Value squared = g.binary("multiply", diff, diff);
  const int64_t reduction = ctx.integer(2);
  if (reduction == kReductionNone) return {g.convert(squared, out(ctx).dtype)};
  Value total = g.reduce(squared, g.constant_int(0, accumulate), reduction_dims({}, in.rank()), ir::Reducer::kAdd);
  if (reduction == kReductionMean) total = g.binary("divide", total, g.constant(static_cast<double>(in.numel()), accumulate));
  return {g.convert(total, out(ctx).dtype)};
}

// mse_loss_backward(grad_output, self, target, reduction): 2 * (self - target) * grad [/ numel]
std::vector<Value> lower_mse_loss_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  const Type compute{accumulate, out(ctx).dims};
  Value diff = g.binary("subtract", cast_to(g, ctx.tensor(1), compute), cast_to(g, ctx.tensor(2), compute));
  double scale = 2.0;
  if (ctx.integer(3) == kReductionMean) scale /= static_cast<double>(out(ctx).numel());
  Value grad = cast_to(g, ctx.tensor(0), compute);
  Value result = g.binary("multiply", g.binary("multiply", diff, grad), g.constant(scale, accumulate, compute.dims));
  return {g.convert(result, out(ctx).dtype)};
}

// ---- nll_loss ---------------------------------------------------------------------------------------
//
// One implementation serves nll_loss (input [C] or [N, C]) and nll_loss2d (input [N, C, H, W]): the class
// dim is 1 (0 for a 1-d input) and the target has the input's other dims. The target class is picked
// with a one-hot mask rather than a gather, so an ignore_index outside [0, C) needs no special case.

struct NllTerms {
  int64_t class_dim;
  Value one_hot;        // bool, input's shape: target == class
  Value target_weight;  // accumulation type, target's shape: weight[target], 0 where ignored
};

NllTerms nll_terms(LoweringContext& ctx, size_t self_arg, DType accumulate) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(self_arg);
  const int64_t class_dim = in.rank() == 1 ? 0 : 1;
  const size_t target_arg = self_arg + 1, weight_arg = self_arg + 2, ignore_arg = self_arg + 4;
  Value target = g.convert(ctx.tensor(target_arg), DType::kI64);
  const std::vector<int64_t> target_dims = g.type(target).dims;
  Value classes = g.iota(Type{DType::kI64, in.dims}, class_dim);
  Value one_hot = g.compare(classes, g.broadcast_in_dim(target, in.dims, kept_dims(in.rank(), {class_dim})), Comparison::kEQ);
  Value weight;
  if (ctx.is_none(weight_arg)) {
    weight = g.constant(1, accumulate, target_dims);
  } else {
    Value per_class = g.broadcast_in_dim(g.convert(ctx.tensor(weight_arg), accumulate), in.dims, {class_dim});
    weight = sum_over(g, g.select(one_hot, per_class, g.constant(0, accumulate, in.dims)), {class_dim});
  }
  Value valid = g.compare(target, g.constant_int(ctx.integer(ignore_arg), DType::kI64, target_dims), Comparison::kNE);
  // CPU's check of the targets, in the forward and the backward: each is a class or the ignore_index.
  const int64_t class_count = in.dims[static_cast<size_t>(class_dim)];
  ctx.check(CheckKind::kTarget, g.binary("and", outside_range(g, target, 0, class_count), valid), target);
  weight = g.select(valid, weight, g.constant(0, accumulate, target_dims));
  return {class_dim, one_hot, weight};
}

// nll_loss_forward(self, target, weight?, reduction, ignore_index) -> (output, total_weight)
std::vector<Value> lower_nll_loss_forward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(in.dtype);
  NllTerms terms = nll_terms(ctx, 0, accumulate);
  Value x = g.convert(ctx.tensor(0), accumulate);
  Value picked = sum_over(g, g.select(terms.one_hot, x, g.constant(0, accumulate, in.dims)), {terms.class_dim});
  // Ignored positions contribute an exact 0 even where the input is -inf (log of 0).
  Value loss = g.select(g.compare(terms.target_weight, like(g, terms.target_weight, 0), Comparison::kNE),
                        g.binary("multiply", g.unary("negate", picked), terms.target_weight), like(g, picked, 0));
  const int64_t reduction = ctx.integer(3);
  if (reduction == kReductionNone) {
    // PyTorch leaves total_weight at 0 without a reduction.
    return {g.convert(loss, out(ctx, 0).dtype), g.constant(0, out(ctx, 1).dtype, out(ctx, 1).dims)};
  }
  const int64_t rank = g.type(loss).rank();
  Value total = sum_over(g, loss, reduction_dims({}, rank));
  Value total_weight = sum_over(g, terms.target_weight, reduction_dims({}, rank));
  if (reduction == kReductionMean) total = g.binary("divide", total, total_weight);
  return {g.reshape(g.convert(total, out(ctx, 0).dtype), out(ctx, 0).dims),
          g.reshape(g.convert(total_weight, out(ctx, 1).dtype), out(ctx, 1).dims)};
}

// nll_loss_backward(grad_output, self, target, weight?, reduction, ignore_index, total_weight):
// -weight[target] * grad at the target class, 0 elsewhere.
std::vector<Value> lower_nll_loss_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(1);
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  NllTerms terms = nll_terms(ctx, 1, accumulate);
  const std::vector<int64_t> target_dims = g.type(terms.target_weight).dims;
  Value grad = g.convert(ctx.tensor(0), accumulate);
  const int64_t reduction = ctx.integer(4);
  if (reduction == kReductionNone) {
    grad = g.reshape(grad, target_dims);
  } else {
    grad = g.reshape(grad, {});
    if (reduction == kReductionMean) grad = g.binary("divide", grad, g.reshape(g.convert(ctx.tensor(6), accumulate), {}));
    grad = g.broadcast_in_dim(grad, target_dims, {});
  }
  Value per_target = g.unary("negate", g.binary("multiply", grad, terms.target_weight));
  Value full = g.broadcast_in_dim(per_target, in.dims, kept_dims(in.rank(), {terms.class_dim}));
  return {g.convert(g.select(terms.one_hot, full, g.constant(0, accumulate, in.dims)), out(ctx).dtype)};
}

// ---- pointwise losses -------------------------------------------------------------------------------
//
// Each computes its per-element loss in the accumulation type; reduce_loss then applies the reduction.
// Their backward ops return grad * d(loss)/d(self), with the mean's 1/numel folded into the upstream
// gradient (loss_grad).

// The reduction (none, mean or sum) of a per-element loss, rounded to the output type.
Value reduce_loss(LoweringContext& ctx, Value loss, int64_t reduction) {
  Graph& g = ctx.graph;
  const Type t = g.type(loss);
  if (reduction != kReductionNone) {
    loss = sum_over(g, loss, reduction_dims({}, t.rank()));
    if (reduction == kReductionMean) loss = g.binary("divide", loss, like(g, loss, static_cast<double>(t.numel())));
  }
  return g.reshape(g.convert(loss, out(ctx).dtype), out(ctx).dims);
}

// Argument i in the accumulation type of the output, broadcast to `dims`.
Value loss_operand(LoweringContext& ctx, size_t i, const std::vector<int64_t>& dims) {
  return cast_to(ctx.graph, ctx.tensor(i), Type{accumulation_dtype(out(ctx).dtype), dims});
}

// The upstream gradient of a pointwise loss's backward, at self's shape and scaled by 1/numel for a mean.
Value loss_grad(LoweringContext& ctx, size_t reduction_arg) {
  Graph& g = ctx.graph;
  const Type& in = out(ctx);
  Value grad = loss_operand(ctx, 0, in.dims);
  if (ctx.integer(reduction_arg) == kReductionMean) grad = g.binary("divide", grad, like(g, grad, static_cast<double>(in.numel())));
  return grad;
}

// binary_cross_entropy(self, target, weight?, reduction):
// -w (t log(x) + (1 - t) log(1 - x)), each log clamped at -100 so x = 0 or 1 gives a finite loss, as on
// CPU. Inputs and targets outside [0, 1] (or NaN) fail CPU's value checks.
std::vector<Value> lower_binary_cross_entropy(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const std::vector<int64_t> dims = ctx.type_of(0).dims;
  Value x = loss_operand(ctx, 0, dims);
  Value target = loss_operand(ctx, 1, dims);
  auto outside_unit = [&](Value v) {
    return g.unary("not", g.binary("and", g.compare(v, like(g, v, 0), Comparison::kGE),
                                   g.compare(v, like(g, v, 1), Comparison::kLE)));
  };
  ctx.check(CheckKind::kBceInput, outside_unit(x));
  ctx.check(CheckKind::kBceTarget, outside_unit(target));
  Value log_x = g.binary("maximum", g.unary("log", x), like(g, x, -100));
  Value log_rest = g.binary("maximum", g.unary("log_plus_one", g.unary("negate", x)), like(g, x, -100));
  Value loss = g.binary("subtract", g.binary("multiply", g.binary("subtract", target, like(g, x, 1)), log_rest),
                        g.binary("multiply", target, log_x));
  if (!ctx.is_none(2)) loss = g.binary("multiply", loss, loss_operand(ctx, 2, dims));
  return {reduce_loss(ctx, loss, ctx.integer(3))};
}

// binary_cross_entropy_backward(grad_output, self, target, weight?, reduction):
// grad * w (x - t) / max(x (1 - x), 1e-12).
std::vector<Value> lower_binary_cross_entropy_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const std::vector<int64_t> dims = out(ctx).dims;
  Value x = loss_operand(ctx, 1, dims);
  Value target = loss_operand(ctx, 2, dims);
  Value denominator = g.binary("maximum", g.binary("multiply", g.binary("subtract", like(g, x, 1), x), x), like(g, x, 1e-12));
  Value result = g.binary("divide", g.binary("multiply", loss_grad(ctx, 4), g.binary("subtract", x, target)), denominator);
  if (!ctx.is_none(3)) result = g.binary("multiply", result, loss_operand(ctx, 3, dims));
  return {g.convert(result, out(ctx).dtype)};
}

// self - target, in the accumulation type at the output's (broadcast) shape.
Value loss_difference(LoweringContext& ctx, size_t self_arg, const std::vector<int64_t>& dims) {
  return ctx.graph.binary("subtract", loss_operand(ctx, self_arg, dims), loss_operand(ctx, self_arg + 1, dims));
}

// The broadcast shape of arguments a and b (the loss functions accept a target that broadcasts).
std::vector<int64_t> broadcast_dims(LoweringContext& ctx, size_t a, size_t b) {
  std::vector<int64_t> dims = ctx.type_of(a).dims;
  const std::vector<int64_t>& other = ctx.type_of(b).dims;
  if (other.size() > dims.size()) dims.insert(dims.begin(), other.size() - dims.size(), 1);
  for (size_t i = 0; i < other.size(); ++i) {
    int64_t& d = dims[dims.size() - other.size() + i];
    if (d == 1) d = other[i];
  }
  return dims;
}

// smooth_l1_loss(self, target, reduction, beta): |d| < beta ? d^2 / (2 beta) : |d| - beta / 2.
std::vector<Value> lower_smooth_l1_loss(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  require_floating(ctx, 0, "smooth_l1_loss");
  const double beta = ctx.real(3);
  Value z = g.unary("abs", loss_difference(ctx, 0, broadcast_dims(ctx, 0, 1)));
  Value quadratic = g.binary("divide", g.binary("multiply", g.binary("multiply", z, z), like(g, z, 0.5)), like(g, z, beta));
  Value linear = g.binary("subtract", z, like(g, z, 0.5 * beta));
  return {reduce_loss(ctx, g.select(g.compare(z, like(g, z, beta), Comparison::kLT), quadratic, linear), ctx.integer(2))};
}

// huber_loss(self, target, reduction, delta): |d| < delta ? d^2 / 2 : delta (|d| - delta / 2).
std::vector<Value> lower_huber_loss(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  require_floating(ctx, 0, "huber_loss");
  const double delta = ctx.real(3);
  Value z = g.unary("abs", loss_difference(ctx, 0, broadcast_dims(ctx, 0, 1)));
  Value quadratic = g.binary("multiply", g.binary("multiply", z, z), like(g, z, 0.5));
  Value linear = g.binary("multiply", like(g, z, delta), g.binary("subtract", z, like(g, z, 0.5 * delta)));
  return {reduce_loss(ctx, g.select(g.compare(z, like(g, z, delta), Comparison::kLT), quadratic, linear), ctx.integer(2))};
}

// The slope of smooth_l1 (scale 1, inner d / beta) and huber (scale delta, inner d) in d = self - target:
// -scale at d <= -limit, +scale at d >= limit, inner between, in PyTorch's order of tests.
Value clipped_slope(Graph& g, Value d, double limit, double scale, Value inner) {
  Value upper = g.select(g.compare(d, like(g, d, limit), Comparison::kGE), like(g, d, scale), inner);
  return g.select(g.compare(d, like(g, d, -limit), Comparison::kLE), like(g, d, -scale), upper);
}

// smooth_l1_loss_backward(grad_output, self, target, reduction, beta)
std::vector<Value> lower_smooth_l1_loss_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const double beta = ctx.real(4);
  Value d = loss_difference(ctx, 1, out(ctx).dims);
  Value slope = clipped_slope(g, d, beta, 1.0, g.binary("divide", d, like(g, d, beta)));
  return {g.convert(g.binary("multiply", loss_grad(ctx, 3), slope), out(ctx).dtype)};
}

// huber_loss_backward(grad_output, self, target, reduction, delta)
std::vector<Value> lower_huber_loss_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const double delta = ctx.real(4);
  Value d = loss_difference(ctx, 1, out(ctx).dims);
  Value slope = clipped_slope(g, d, delta, delta, d);
  return {g.convert(g.binary("multiply", loss_grad(ctx, 3), slope), out(ctx).dtype)};
}

// ---- margin losses ----------------------------------------------------------------------------------
//
// Inputs of one sample ([C], or 0-d for multilabel) are handled as a batch of one row.

struct MarginRows {
  int64_t n, c;
  Value x;       // [N, C], accumulation type
  Value target;  // multi_margin: [N] int64; multilabel: [N, C] int64
};

// Also states CPU's check of the targets, in the forward and the backward: a class for multi_margin; a
// class or -1 (the end of the labels) everywhere in the row for multilabel, whose message numbers the
// target argument.
MarginRows margin_rows(LoweringContext& ctx, size_t self_arg, DType accumulate, bool target_per_class) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(self_arg);
  const int64_t c = in.rank() == 0 ? 1 : in.dims.back();
  const int64_t n = in.numel() / std::max<int64_t>(c, 1);
  Value x = g.reshape(g.convert(ctx.tensor(self_arg), accumulate), {n, c});
  const size_t target_arg = self_arg + 1;
  Value target = g.convert(ctx.tensor(target_arg), DType::kI64);
  if (target_per_class) {
    const auto argument_number = static_cast<int64_t>(target_arg) + 1;
    ctx.check(CheckKind::kMultilabelTarget, outside_range(g, target, -1, c), {}, {argument_number});
  } else {
    ctx.check(CheckKind::kMarginTarget, outside_range(g, target, 0, c));
  }
  target = g.reshape(target, target_per_class ? std::vector<int64_t>{n, c} : std::vector<int64_t>{n});
  return {n, c, x, target};
}

// The per-sample upstream gradient [N] of a loss with a per-sample value: grad_output itself for
// reduction none, else the scalar (divided by N for a mean) broadcast.
Value per_sample_grad(LoweringContext& ctx, int64_t n, int64_t reduction, DType accumulate) {
  Graph& g = ctx.graph;
  Value grad = g.convert(ctx.tensor(0), accumulate);
  if (reduction == kReductionNone) return g.reshape(grad, {n});
  grad = g.reshape(grad, {});
  if (reduction == kReductionMean) grad = g.binary("divide", grad, g.constant(static_cast<double>(n), accumulate));
  return g.broadcast_in_dim(grad, {n}, {});
}

struct MultiMarginTerms {
  Value active;  // bool [N, C]: the hinge is positive at a non-target class
  Value hinge;   // [N, C]: margin - x[target] + x[j]
  Value one_hot; // bool [N, C]: j == target
  Value scale;   // [N]: weight[target] / C
};

MultiMarginTerms multi_margin_terms(LoweringContext& ctx, const MarginRows& r, double margin, size_t weight_arg,
                                    DType accumulate) {
  Graph& g = ctx.graph;
  const std::vector<int64_t> dims{r.n, r.c};
  Value classes = g.iota(Type{DType::kI64, dims}, 1);
  Value one_hot = g.compare(classes, g.broadcast_in_dim(r.target, dims, {0}), Comparison::kEQ);
  Value zeros = g.constant(0, accumulate, dims);
  Value picked = sum_over(g, g.select(one_hot, r.x, zeros), {1});
  Value hinge = g.binary("add", g.binary("subtract", g.constant(margin, accumulate, dims), g.broadcast_in_dim(picked, dims, {0})), r.x);
  Value active = g.binary("and", g.unary("not", one_hot), g.compare(hinge, zeros, Comparison::kGT));
  Value scale = g.constant(1.0 / static_cast<double>(r.c), accumulate, {r.n});
  if (!ctx.is_none(weight_arg)) {
    Value weight = g.broadcast_in_dim(g.convert(ctx.tensor(weight_arg), accumulate), dims, {1});
    scale = g.binary("multiply", scale, sum_over(g, g.select(one_hot, weight, zeros), {1}));
  }
  return {active, hinge, one_hot, scale};
}

// multi_margin_loss(self, target, p, margin, weight?, reduction): per sample,
// sum over j != target of max(0, margin - x[target] + x[j])^p, times weight[target], over C.
std::vector<Value> lower_multi_margin_loss(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  MarginRows r = margin_rows(ctx, 0, accumulate, false);
  MultiMarginTerms terms = multi_margin_terms(ctx, r, ctx.real(3), 4, accumulate);
  Value z = terms.hinge;
  if (ctx.integer(2) == 2) z = g.binary("multiply", z, z);
  Value per_sample = sum_over(g, g.select(terms.active, z, like(g, z, 0)), {1});
  return {reduce_loss(ctx, g.binary("multiply", per_sample, terms.scale), ctx.integer(5))};
}

// multi_margin_loss_backward(grad_output, self, target, p, margin, weight?, reduction)
std::vector<Value> lower_multi_margin_loss_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  MarginRows r = margin_rows(ctx, 1, accumulate, false);
  MultiMarginTerms terms = multi_margin_terms(ctx, r, ctx.real(4), 5, accumulate);
  const std::vector<int64_t> dims{r.n, r.c};
  Value per_sample = g.binary("multiply", per_sample_grad(ctx, r.n, ctx.integer(6), accumulate), terms.scale);
  Value slope = ctx.integer(3) == 2 ? g.binary("multiply", like(g, terms.hinge, 2), terms.hinge) : like(g, terms.hinge, 1);
  Value others = g.binary("multiply", g.select(terms.active, slope, like(g, slope, 0)), g.broadcast_in_dim(per_sample, dims, {0}));
  // The target class moves against every active hinge.
  Value target_grad = g.broadcast_in_dim(g.unary("negate", sum_over(g, others, {1})), dims, {0});
  Value grad = g.select(terms.one_hot, target_grad, others);
  return {g.reshape(g.convert(grad, out(ctx).dtype), out(ctx).dims)};
}

struct MultilabelTerms {
  Value labels;     // bool [N, K, C]: label slot k (before the first -1) names class c
  Value is_target;  // bool [N, C]
  Value active;     // bool [N, K, C]: the hinge 1 - x[label k] + x[j] is positive at a non-target j
  Value hinge;      // [N, K, C]
};

// Label slot k of a sample is valid while no earlier slot (nor k itself) holds -1.
MultilabelTerms multilabel_terms(Graph& g, const MarginRows& r, DType accumulate) {
  const int64_t n = r.n, c = r.c;
  const std::vector<int64_t> cube{n, c, c};  // [N, K = C, C]
  Value slots = g.iota(Type{DType::kI64, {n, c}}, 1);
  Value end_marker = g.compare(r.target, g.constant_int(-1, DType::kI64, {n, c}), Comparison::kEQ);
  Value first_end = g.reduce(g.select(end_marker, slots, g.constant_int(c, DType::kI64, {n, c})),
                             g.constant_int(c, DType::kI64), {1}, Reducer::kMin);
  Value valid = g.compare(slots, g.broadcast_in_dim(first_end, {n, c}, {0}), Comparison::kLT);
  Value classes = g.iota(Type{DType::kI64, cube}, 2);
  Value labels = g.binary("and", g.compare(classes, g.broadcast_in_dim(r.target, cube, {0, 1}), Comparison::kEQ),
                          g.broadcast_in_dim(valid, cube, {0, 1}));
  Value is_target = g.reduce(labels, g.constant_int(0, DType::kBool), {1}, Reducer::kOr);
  Value zeros = g.constant(0, accumulate, cube);
  Value x_full = g.broadcast_in_dim(r.x, cube, {0, 2});
  Value label_x = sum_over(g, g.select(labels, x_full, zeros), {2});  // [N, K]
  Value hinge = g.binary("add", g.binary("subtract", g.constant(1, accumulate, cube), g.broadcast_in_dim(label_x, cube, {0, 1})), x_full);
  Value active = g.binary("and", g.broadcast_in_dim(valid, cube, {0, 1}),
                          g.binary("and", g.unary("not", g.broadcast_in_dim(is_target, cube, {0, 2})),
                                   g.compare(hinge, zeros, Comparison::kGT)));
  return {labels, is_target, active, hinge};
}

// multilabel_margin_loss_forward(self, target, reduction) -> (output, is_target): per sample,
// sum over its labels y and non-target classes j of max(0, 1 - x[y] + x[j]), over C.
std::vector<Value> lower_multilabel_margin_loss_forward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  MarginRows r = margin_rows(ctx, 0, accumulate, true);
  MultilabelTerms terms = multilabel_terms(g, r, accumulate);
  Value per_sample = sum_over(g, g.select(terms.active, terms.hinge, like(g, terms.hinge, 0)), {1, 2});
  per_sample = g.binary("divide", per_sample, like(g, per_sample, static_cast<double>(r.c)));
  return {reduce_loss(ctx, per_sample, ctx.integer(2)),
          g.reshape(g.convert(terms.is_target, out(ctx, 1).dtype), out(ctx, 1).dims)};
}

// multilabel_margin_loss_backward(grad_output, self, target, reduction, is_target): each active hinge adds
// grad / C to x[j] and takes it from x[label].
std::vector<Value> lower_multilabel_margin_loss_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType accumulate = accumulation_dtype(out(ctx).dtype);
  MarginRows r = margin_rows(ctx, 1, accumulate, true);
  MultilabelTerms terms = multilabel_terms(g, r, accumulate);
  const std::vector<int64_t> cube{r.n, r.c, r.c};
  Value zeros = g.constant(0, accumulate, cube);
  Value active = g.select(terms.active, g.constant(1, accumulate, cube), zeros);
  Value per_slot = g.broadcast_in_dim(sum_over(g, active, {2}), cube, {0, 1});  // active hinges of label k
  Value moves = g.binary("subtract", sum_over(g, active, {1}),
                         sum_over(g, g.select(terms.labels, per_slot, zeros), {1}));  // [N, C]
  Value per_sample = per_sample_grad(ctx, r.n, ctx.integer(3), accumulate);
  per_sample = g.binary("divide", per_sample, like(g, per_sample, static_cast<double>(r.c)));
  Value grad = g.binary("multiply", moves, g.broadcast_in_dim(per_sample, {r.n, r.c}, {0}));
  return {g.reshape(g.convert(grad, out(ctx).dtype), out(ctx).dims)};
}

// ---- embedding --------------------------------------------------------------------------------------

// embedding_dense_backward(grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
// the rows of grad_output summed into the rows their indices name; the padding row gets nothing.
std::vector<Value> lower_embedding_dense_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = out(ctx);
  const DType accumulate = accumulation_dtype(result.dtype);
  const int64_t rows = result.dims[0], width = result.dims[1];
  const int64_t count = ctx.type_of(1).numel();
  Value indices = g.reshape(ctx.tensor(1), {count, 1});
  Value updates = g.reshape(g.convert(ctx.tensor(0), accumulate), {count, width});
  const int64_t padding_idx = ctx.integer(3);
  if (padding_idx >= 0) {
    const DType index_dtype = g.type(indices).dtype;
    Value keep = g.compare(g.reshape(indices, {count}), g.constant_int(padding_idx, index_dtype, {count}), Comparison::kNE);
    updates = g.select(g.broadcast_in_dim(keep, {count, width}, {0}), updates, g.constant(0, accumulate, {count, width}));
  }
  Value grad = scatter_add_rows(g, g.constant(0, accumulate, {rows, width}), indices, updates);
  if (ctx.boolean(4)) {
    // Each row's sum divided by how often its index occurs.
    Value counts = scatter_add_rows(g, g.constant(0, accumulate, {rows}), indices, g.constant(1, accumulate, {count}));
    counts = g.binary("maximum", counts, like(g, counts, 1));
    grad = g.binary("divide", grad, g.broadcast_in_dim(counts, {rows, width}, {0}));
  }
  return {g.convert(grad, result.dtype)};
}

// embedding_renorm(self [V, D], indices, max_norm, norm_type): each row named by an index whose norm
// exceeds max_norm is scaled by max_norm / (norm + 1e-7), as CPU does: the norm is rounded to self's
// dtype and the scale computed in double.
std::vector<Value> lower_embedding_renorm(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type self = ctx.type_of(0);
  const DType accumulate = accumulation_dtype(self.dtype);
  const int64_t rows = self.dims[0], width = self.dims[1];
  const int64_t count = ctx.type_of(1).numel();
  const double max_norm = ctx.real(2);
  if (count == 0) return {ctx.tensor(0)};
  Value x = g.convert(ctx.tensor(0), accumulate);
  Value norm = g.convert(g.convert(p_norm_last(g, x, ctx.real(3)), self.dtype), DType::kF64);
  Value hits = scatter_along(g, g.constant_int(0, DType::kI64, {rows}), 0, g.reshape(ctx.tensor(1), {count}),
                             g.constant_int(1, DType::kI64, {count}), Reducer::kAdd);
  Value renormed = g.binary("and", g.compare(hits, g.constant_int(0, DType::kI64, {rows}), Comparison::kGT),
                            g.compare(norm, g.constant(max_norm, DType::kF64, {rows}), Comparison::kGT));
  Value scale = g.binary("divide", g.constant(max_norm, DType::kF64, {rows}),
                         g.binary("add", norm, g.constant(1e-7, DType::kF64, {rows})));
  // The scale is rounded to self's dtype, then multiplies in the accumulation type.
  scale = g.convert(g.convert(scale, self.dtype), accumulate);
  scale = g.select(renormed, scale, g.constant(1, accumulate, {rows}));
  Value scaled = g.binary("multiply", x, g.broadcast_in_dim(scale, {rows, width}, {0}));
  return {g.convert(scaled, self.dtype)};
}

// ---- embedding_bag ------------------------------------------------------------------------------------
//
// Bags are runs of `indices` starting at each offset; index i belongs to bag (number of bag offsets
// <= i) - 1, which also handles empty bags. Indices equal to padding_idx take no part. The sums and
// counts are scatters into the bags. With include_last_offset PyTorch expects the last offset to be
// len(indices); for other offsets CPU's kernels disagree among themselves, and here indices past the last
// offset join the last bag, as in CPU's offset2bag. Mode "max" follows PyTorch's kernel, which keeps a bag's first
// element and replaces it only by a strictly greater one: a NaN first element stays, later NaNs are
// ignored, and the earliest position of the maximum wins.

constexpr int64_t kBagSum = 0;
constexpr int64_t kBagMean = 1;
constexpr int64_t kBagMax = 2;

// The bag of each of `count` indices: offsets [B'] (only the first `bags` count as bag starts).
Value bag_of_index(Graph& g, Value offsets, int64_t bags, int64_t count) {
  Value starts = g.slice(g.convert(offsets, DType::kI64), {0}, {bags}, {1});
  const Type pairs{DType::kI64, {count, bags}};
  Value started = g.compare(g.broadcast_in_dim(starts, pairs.dims, {1}), g.iota(pairs, 0), Comparison::kLE);
  Value begun = sum_over(g, g.convert(started, DType::kI64), {1});
  return g.binary("subtract", begun, g.constant_int(1, DType::kI64, {count}));
}

// Whether each index takes part (is not padding_idx; a negative padding_idx means none).
Value bag_member(Graph& g, Value indices, int64_t padding_idx) {
  const std::vector<int64_t> dims = g.type(indices).dims;
  if (padding_idx < 0) return g.constant_int(1, DType::kBool, dims);
  return g.compare(indices, g.constant_int(padding_idx, g.type(indices).dtype, dims), Comparison::kNE);
}

// _embedding_bag(weight, indices, offsets, scale_grad_by_freq, mode, sparse, per_sample_weights?,
//                include_last_offset, padding_idx) -> (output, offset2bag, bag_size, max_indices)
std::vector<Value> lower_embedding_bag(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = out(ctx, 0);
  const DType accumulate = accumulation_dtype(result.dtype);
  const int64_t bags = result.dims[0], width = result.dims[1];
  const int64_t count = ctx.type_of(1).numel();
  const int64_t mode = ctx.integer(4);
  if (count == 0) {
    std::vector<Value> zeros;
    for (const Type& t : ctx.outputs) zeros.push_back(g.constant_int(0, t.dtype, t.dims));
    return zeros;
  }
  Value indices = g.reshape(ctx.tensor(1), {count});
  const int64_t rows_in_weight = ctx.type_of(0).dims[0];
  ctx.check(CheckKind::kBagIndex, outside_range(g, indices, 0, rows_in_weight), indices, {rows_in_weight});
  Value bag = bag_of_index(g, ctx.tensor(2), bags, count);
  Value member = bag_member(g, indices, ctx.integer(8));
  Value rows = take_along(g, g.convert(ctx.tensor(0), accumulate), 0, indices);
  if (!ctx.is_none(6)) {
    Value scale = g.convert(g.reshape(ctx.tensor(6), {count}), accumulate);
    rows = g.binary("multiply", rows, g.broadcast_in_dim(scale, {count, width}, {0}));
  }
  const std::vector<int64_t> row_dims = {count, width}, bag_dims = {bags, width};
  Value member_rows = g.broadcast_in_dim(member, row_dims, {0});
  Value bag_size = scatter_along(g, g.constant_int(0, DType::kI64, {bags}), 0, bag, g.convert(member, DType::kI64),
                                 Reducer::kAdd);
  Value empty = g.broadcast_in_dim(g.compare(bag_size, g.constant_int(0, DType::kI64, {bags}), Comparison::kEQ),
                                   bag_dims, {0});
  Value output, max_indices;
  if (mode == kBagMax) {
    const double inf = std::numeric_limits<double>::infinity();
    Value position = g.iota(Type{DType::kI64, {count}}, 0);
    Value past_end = g.constant_int(count, DType::kI64, {count});
    // The bag's first member, and the earliest position of its largest non-NaN member.
    Value first = scatter_along(g, g.constant_int(count, DType::kI64, {bags}), 0, bag,
                                g.select(member, position, past_end), Reducer::kMin);
    Value comparable = g.binary("and", member_rows, g.compare(rows, rows, Comparison::kEQ));
    Value largest = scatter_along(g, g.constant(-inf, accumulate, bag_dims), 0, bag,
                                  g.select(comparable, rows, g.constant(-inf, accumulate, row_dims)), Reducer::kMax);
    Value is_largest = g.binary("and", comparable, g.compare(rows, take_along(g, largest, 0, bag), Comparison::kEQ));
    Value row_position = g.broadcast_in_dim(position, row_dims, {0});
    Value earliest = scatter_along(g, g.constant_int(count, DType::kI64, bag_dims), 0, bag,
                                   g.select(is_largest, row_position, g.broadcast_in_dim(past_end, row_dims, {0})),
                                   Reducer::kMin);
    Value last = g.constant_int(count - 1, DType::kI64, {bags});
    Value first_rows = take_along(g, rows, 0, g.binary("minimum", first, last));
    Value first_nan = g.compare(first_rows, first_rows, Comparison::kNE);
    Value chosen = g.select(first_nan, g.broadcast_in_dim(first, bag_dims, {0}), earliest);
    Value chosen_flat = g.reshape(g.binary("minimum", chosen, g.constant_int(count - 1, DType::kI64, bag_dims)),
                                  {bags * width, 1});
    Value chosen_index = g.reshape(g.gather_flat(g.convert(indices, DType::kI64), chosen_flat), bag_dims);
    output = g.select(first_nan, first_rows, largest);
    max_indices = g.select(empty, g.constant_int(0, DType::kI64, bag_dims), chosen_index);
  } else {
    output = scatter_along(g, g.constant(0, accumulate, bag_dims), 0, bag,
                           g.select(member_rows, rows, g.constant(0, accumulate, row_dims)), Reducer::kAdd);
    if (mode == kBagMean) {
      Value divisor = g.convert(g.binary("maximum", bag_size, g.constant_int(1, DType::kI64, {bags})), accumulate);
      output = g.binary("divide", output, g.broadcast_in_dim(divisor, bag_dims, {0}));
    }
  }
  output = g.select(empty, g.constant(0, accumulate, bag_dims), output);
  // PyTorch's auxiliary results: bag sizes for mean and max (sum reports zeros); max_indices holds the
  // chosen rows for max and repeats bag_size for mean.
  auto shaped = [&](Value v, size_t i) {
    const Type& t = out(ctx, i);
    if (t.numel() == 0 || !v.valid()) return g.constant_int(0, t.dtype, t.dims);
    v = g.convert(v, t.dtype);
    // The meta kernel sizes bag_size by the offsets, one more than the bags with include_last_offset.
    const int64_t extra = t.dims[0] - g.type(v).dims[0];
    if (extra > 0) {
      std::vector<int64_t> high(static_cast<size_t>(g.type(v).rank()), 0);
      high[0] = extra;
      v = g.pad(v, g.constant_int(0, t.dtype), std::vector<int64_t>(high.size(), 0), high);
    }
    return g.reshape(v, t.dims);
  };
  Value reported_size = mode == kBagSum ? Value{} : bag_size;
  Value reported_max = mode == kBagMax ? max_indices : reported_size;
  return {g.convert(output, result.dtype), shaped(bag, 1), shaped(reported_size, 2), shaped(reported_max, 3)};
}

// scale_grad_by_freq for embedding_bag, as CPU's kernel computes it: the gradient of the k-th distinct
// index (ascending) is divided by the number of occurrences of the k-th smallest entry of `indices`
// (repeats counted), which is that index's own count only while no smaller index repeats. Returns the
// divisor of each position of `indices` ([count], any integer dtype).
Value bag_frequency_divisor(Graph& g, Value indices, int64_t rows, DType dtype) {
  const int64_t count = g.type(indices).dims[0];
  Value index = g.convert(indices, DType::kI64);
  Value occurrences = scatter_along(g, g.constant(0, dtype, {rows}), 0, index, g.constant(1, dtype, {count}), Reducer::kAdd);
  const Type scalar{DType::kI64, {}};
  Value sorted = g.op_multi("stablehlo.sort", {index}, {Type{DType::kI64, {count}}}, "dimension = 0 : i64, is_stable = true",
                            g.region({scalar, scalar}, [&](const std::vector<Value>& a) {
                              return std::vector<Value>{g.compare(a[0], a[1], Comparison::kLT)};
                            }))[0];
  Value previous = g.concatenate({g.constant_int(-1, DType::kI64, {1}), g.slice(sorted, {0}, {count - 1}, {1})}, 0);
  Value starts = g.compare(sorted, previous, Comparison::kNE);
  // k of each position: the distinct indices smaller than its own.
  const std::vector<int64_t> pairs = {count, count};
  Value smaller = g.binary("and", g.broadcast_in_dim(starts, pairs, {1}),
                           g.compare(g.broadcast_in_dim(sorted, pairs, {1}), g.broadcast_in_dim(index, pairs, {0}),
                                     Comparison::kLT));
  Value rank = sum_over(g, g.convert(smaller, DType::kI64), {1});
  return take_along(g, occurrences, 0, take_along(g, sorted, 0, rank));
}

// Where the embedding_bag backward ops keep their arguments (grad and indices are 0 and 1 in both).
struct BagBackwardArgs {
  size_t offsets;  // 0: none (the dense backward receives offset2bag only)
  size_t offset2bag, bag_size, maximum_indices, scale_grad_by_freq, mode, per_sample_weights, padding_idx;
};

// The weight gradient of embedding_bag: each index's bag gradient (divided by the bag size for mean,
// scaled by its per-sample weight) added to its row; for max, each bag's gradient added to the rows its
// maxima came from.
std::vector<Value> embedding_bag_backward(LoweringContext& ctx, const BagBackwardArgs& a) {
  Graph& g = ctx.graph;
  const Type& result = out(ctx);
  const DType accumulate = accumulation_dtype(result.dtype);
  const int64_t rows = result.dims[0], width = result.dims[1];
  const int64_t bags = ctx.type_of(0).dims[0];
  const int64_t count = ctx.type_of(1).numel();
  Value grad = g.convert(ctx.tensor(0), accumulate);
  // bag_size may have one entry more than there are bags (see lower_embedding_bag).
  Value bag_size = g.slice(g.convert(ctx.tensor(a.bag_size), DType::kI64), {0}, {bags}, {1});
  if (ctx.integer(a.mode) == kBagMax) {
    // Each bag's gradient goes to the rows its maxima came from; empty bags give nothing.
    Value nonempty = g.compare(bag_size, g.constant_int(0, DType::kI64, {bags}), Comparison::kGT);
    Value share = g.select(g.broadcast_in_dim(nonempty, {bags, width}, {0}), grad, g.constant(0, accumulate, {bags, width}));
    Value source_row = g.convert(ctx.tensor(a.maximum_indices), DType::kI64);
    Value flat = g.binary("add", g.binary("multiply", source_row, g.constant_int(width, DType::kI64, {bags, width})),
                          g.iota(Type{DType::kI64, {bags, width}}, 1));
    Value total = scatter_add_rows(g, g.constant(0, accumulate, {rows * width}), g.reshape(flat, {bags * width, 1}),
                                   g.reshape(share, {bags * width}));
    return {g.convert(g.reshape(total, {rows, width}), result.dtype)};
  }
  Value indices = g.reshape(ctx.tensor(1), {count});
  // offset2bag is empty when the forward took PyTorch's fast path; the offsets give the same bags.
  Value bag = ctx.type_of(a.offset2bag).numel() == count || a.offsets == 0
                  ? g.convert(g.reshape(ctx.tensor(a.offset2bag), {count}), DType::kI64)
                  : bag_of_index(g, ctx.tensor(a.offsets), bags, count);
  const std::vector<int64_t> row_dims = {count, width};
  Value share = take_along(g, grad, 0, bag);
  if (ctx.integer(a.mode) == kBagMean) {
    Value size = g.convert(g.binary("maximum", bag_size, g.constant_int(1, DType::kI64, {bags})), accumulate);
    share = g.binary("divide", share, g.broadcast_in_dim(take_along(g, size, 0, bag), row_dims, {0}));
  }
  if (!ctx.is_none(a.per_sample_weights)) {
    Value scale = g.convert(ctx.tensor(a.per_sample_weights), accumulate);
    share = g.binary("multiply", share, g.broadcast_in_dim(scale, row_dims, {0}));
  }
  if (ctx.boolean(a.scale_grad_by_freq)) {
    share = g.binary("divide", share, g.broadcast_in_dim(bag_frequency_divisor(g, indices, rows, accumulate), row_dims, {0}));
  }
  Value member = g.broadcast_in_dim(bag_member(g, indices, ctx.integer(a.padding_idx)), row_dims, {0});
  share = g.select(member, share, g.constant(0, accumulate, row_dims));
  Value total = scatter_along(g, g.constant(0, accumulate, {rows, width}), 0, indices, share, Reducer::kAdd);
  return {g.convert(total, result.dtype)};
}

// _embedding_bag_dense_backward(grad, indices, offset2bag, bag_size, maximum_indices, num_weights,
//                               scale_grad_by_freq, mode, per_sample_weights?, padding_idx)
std::vector<Value> lower_embedding_bag_dense_backward(LoweringContext& ctx) {
  return embedding_bag_backward(ctx, {0, 2, 3, 4, 6, 7, 8, 9});
}

// _embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
//                         scale_grad_by_freq, mode, sparse, per_sample_weights?, padding_idx); the
// sparse layout is the meta kernel's to reject.
std::vector<Value> lower_embedding_bag_backward_dense(LoweringContext& ctx) {
  return embedding_bag_backward(ctx, {2, 3, 4, 5, 7, 8, 10, 11});
}

// _embedding_bag_per_sample_weights_backward(grad, weight, indices, offsets, offset2bag, mode, padding_idx):
// d output / d per_sample_weights[i] = <grad[bag of i], weight[indices[i]]>.
std::vector<Value> lower_embedding_bag_per_sample_weights_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = out(ctx);
  const DType accumulate = accumulation_dtype(result.dtype);
  const int64_t bags = ctx.type_of(0).dims[0];
  const int64_t count = ctx.type_of(2).numel();
  Value indices = g.reshape(ctx.tensor(2), {count});
  // offset2bag is empty when the forward took PyTorch's fast path; the offsets give the same bags.
  Value bag = ctx.type_of(4).numel() == count ? g.convert(g.reshape(ctx.tensor(4), {count}), DType::kI64)
                                              : bag_of_index(g, ctx.tensor(3), bags, count);
  Value rows = take_along(g, g.convert(ctx.tensor(1), accumulate), 0, indices);
  Value grads = take_along(g, g.convert(ctx.tensor(0), accumulate), 0, bag);
  Value dot = sum_over(g, g.binary("multiply", grads, rows), {1});
  Value member = bag_member(g, indices, ctx.integer(6));
  return {g.convert(g.select(member, dot, g.constant(0, accumulate, {count})), result.dtype)};
}

// ---- channel_shuffle ----------------------------------------------------------------------------------

// channel_shuffle(self, groups): channels [g, C/g] regrouped as [C/g, g], i.e. channel i * (C/g) + j
// moves to j * g + i.
std::vector<Value> lower_channel_shuffle(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type in = ctx.type_of(0);
  const int64_t groups = ctx.integer(1);
  std::vector<int64_t> split = in.dims;
  split[1] = in.dims[1] / groups;
  split.insert(split.begin() + 1, groups);
  std::vector<int64_t> permutation = dim_range(0, static_cast<int64_t>(split.size()));
  std::swap(permutation[1], permutation[2]);
  return {g.reshape(g.transpose(g.reshape(ctx.tensor(0), split), permutation), in.dims)};
}

}  // namespace

void add_nn_rules(std::vector<Rule>& table) {
  table.push_back({"aten::binary_cross_entropy", &lower_binary_cross_entropy});
  table.push_back({"aten::binary_cross_entropy_backward", &lower_binary_cross_entropy_backward});
  table.push_back({"aten::_embedding_bag", &lower_embedding_bag});
  table.push_back({"aten::_embedding_bag_backward", &lower_embedding_bag_backward_dense});
  table.push_back({"aten::_embedding_bag_dense_backward", &lower_embedding_bag_dense_backward});
  table.push_back({"aten::_embedding_bag_forward_only", &lower_embedding_bag});
  table.push_back({"aten::_embedding_bag_per_sample_weights_backward", &lower_embedding_bag_per_sample_weights_backward});
  table.push_back({"aten::channel_shuffle", &lower_channel_shuffle});
  table.push_back({"aten::embedding_renorm", &lower_embedding_renorm});
  table.push_back({"aten::embedding_dense_backward", &lower_embedding_dense_backward});
  table.push_back({"aten::huber_loss", &lower_huber_loss});
  table.push_back({"aten::huber_loss_backward", &lower_huber_loss_backward});
  table.push_back({"aten::mse_loss", &lower_mse_loss});
  table.push_back({"aten::mse_loss_backward", &lower_mse_loss_backward});
  table.push_back({"aten::multi_margin_loss", &lower_multi_margin_loss});
  table.push_back({"aten::multi_margin_loss_backward", &lower_multi_margin_loss_backward});
  table.push_back({"aten::multilabel_margin_loss_backward", &lower_multilabel_margin_loss_backward});
  table.push_back({"aten::multilabel_margin_loss_forward", &lower_multilabel_margin_loss_forward});
  table.push_back({"aten::nll_loss2d_backward", &lower_nll_loss_backward});
  table.push_back({"aten::nll_loss2d_forward", &lower_nll_loss_forward});
  table.push_back({"aten::nll_loss_backward", &lower_nll_loss_backward});
  table.push_back({"aten::nll_loss_forward", &lower_nll_loss_forward});
  table.push_back({"aten::smooth_l1_loss", &lower_smooth_l1_loss});
  table.push_back({"aten::smooth_l1_loss_backward", &lower_smooth_l1_loss_backward});
  add_nn_activation_rules(table);
  add_nn_norm_rules(table);
  add_nn_conv_rules(table);
  add_nn_pool_rules(table);
  add_upsample_rules(table);
  add_nn_distance_rules(table);
}

}  // namespace torchtpu::lowering
