// Losses: mse, nll (and nll2d), binary cross entropy, smooth L1, Huber, and the margin losses, forward and
// backward. CTC, which needs a recurrence over time, is in nn_ctc.cc.
#include "lowering/nn.h"

namespace torchtpu::lowering {

using ir::Comparison;
using ir::Reducer;

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
  Value valid;          // bool, target's shape: target != ignore_index
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
  return {class_dim, one_hot, weight, valid};
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
  const std::vector<int64_t> along_targets = kept_dims(in.rank(), {terms.class_dim});
  Value full = g.broadcast_in_dim(per_target, in.dims, along_targets);
  // An ignored target's gradient is 0 even when every target is ignored (total_weight 0: grad / 0 * 0 would
  // be NaN), as on CPU.
  Value picked = g.binary("and", terms.one_hot, g.broadcast_in_dim(terms.valid, in.dims, along_targets));
  return {g.convert(g.select(picked, full, g.constant(0, accumulate, in.dims)), out(ctx).dtype)};
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

}  // namespace

void add_nn_loss_rules(std::vector<Rule>& table) {
  table.push_back({"aten::binary_cross_entropy", &lower_binary_cross_entropy});
  table.push_back({"aten::binary_cross_entropy_backward", &lower_binary_cross_entropy_backward});
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
}

}  // namespace torchtpu::lowering
