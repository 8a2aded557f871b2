// Fused optimizer steps (`fused=True` in torch.optim): Adam, AdamW and SGD over whole parameter lists, one
// program per step. The hyperparameters are runtime operands, so a scheduler changing the learning rate
// reuses the program; the step counts are read from the state_steps tensors on the device.
//
// Outputs follow the op's mutated lists: params, grads, then the optimizer state lists. A grad the step
// leaves unchanged is returned as read, and the caller writes nothing back for it.
#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

Value scalar_like(Graph& g, Value like, double value) {
  const Type& t = g.type(like);
  return g.constant(value, t.dtype, t.dims);
}

// A hyperparameter: a float operand, or (the tensor_lr overloads) a 0-d tensor, broadcast to `t`.
Value hyper(LoweringContext& ctx, size_t i, const Type& t) {
  if (ctx.args[i].kind == Arg::Kind::kTensor) return cast_to(ctx.graph, ctx.tensor(i), t);
  return ctx.scalar(i, t.dtype, t.dims);
}

// Where found_inf is nonzero the step is skipped: every state keeps its old value.
Value unless_inf(LoweringContext& ctx, size_t found_inf_arg, Value updated, Value old) {
  if (ctx.is_none(found_inf_arg)) return updated;
  Graph& g = ctx.graph;
  const Type& t = g.type(updated);
  Value inf = cast_to(g, ctx.tensor(found_inf_arg), Type{DType::kF32, t.dims});
  Value skip = g.compare(inf, g.constant(0, DType::kF32, t.dims), ir::Comparison::kNE);
  return g.select(skip, old, updated);
}

// grad + weight_decay * param, left out where weight_decay is 0, as CPU's kernels skip it: 0 * an infinite
// parameter would make the gradient NaN.
Value plus_weight_decay(Graph& g, Value grad, Value param, Value weight_decay) {
  Value decayed = g.binary("add", grad, g.binary("multiply", weight_decay, param));
  return g.select(g.compare(weight_decay, scalar_like(g, weight_decay, 0.0), ir::Comparison::kNE), decayed, grad);
}

Value element(LoweringContext& ctx, size_t list, size_t k, DType compute) {
  Value v = ctx.args.at(list).tensors.at(k);
  return ctx.graph.convert(v, compute);
}

// _fused_adam(w)(self[], grads[], exp_avgs[], exp_avg_sqs[], max_exp_avg_sqs[], state_steps[], *, lr, beta1,
//   beta2, weight_decay, eps, amsgrad, maximize, grad_scale, found_inf)
std::vector<Value> fused_adam(LoweringContext& ctx, bool decoupled_weight_decay) {
  Graph& g = ctx.graph;
  const size_t n = ctx.args[0].tensors.size();
  const bool amsgrad = ctx.boolean(11);
  const bool maximize = ctx.boolean(12);
  std::vector<Value> params, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs;
  for (size_t k = 0; k < n; ++k) {
    const DType compute = accumulation_dtype(g.type(ctx.args[0].tensors[k]).dtype);
    const Type t{compute, g.type(ctx.args[0].tensors[k]).dims};
    Value param = element(ctx, 0, k, compute);
    Value grad = element(ctx, 1, k, compute);
    Value m = element(ctx, 2, k, compute);
    Value v = element(ctx, 3, k, compute);
    Value step = cast_to(g, ctx.args[5].tensors.at(k), t);
    Value lr = hyper(ctx, 6, t), beta1 = hyper(ctx, 7, t), beta2 = hyper(ctx, 8, t);
    Value weight_decay = hyper(ctx, 9, t), eps = hyper(ctx, 10, t);
    Value one = scalar_like(g, param, 1.0);

    Value stored_grad = ctx.args[1].tensors[k];
    if (!ctx.is_none(13)) {
      grad = g.binary("divide", grad, cast_to(g, ctx.tensor(13), t));
      stored_grad = unless_inf(ctx, 14, grad, element(ctx, 1, k, compute));
    }
    if (maximize) grad = g.unary("negate", grad);
    Value new_param = param;
    if (decoupled_weight_decay) {
      new_param = g.binary("multiply", param, g.binary("subtract", one, g.binary("multiply", lr, weight_decay)));
    } else {
      grad = plus_weight_decay(g, grad, param, weight_decay);
    }
    Value new_m = g.binary("add", m, g.binary("multiply", g.binary("subtract", grad, m), g.binary("subtract", one, beta1)));
    Value new_v = g.binary("add", g.binary("multiply", v, beta2),
                           g.binary("multiply", g.binary("subtract", one, beta2), g.binary("multiply", grad, grad)));
    Value bias_correction1 = g.binary("subtract", one, g.binary("power", beta1, step));
    Value bias_correction2_sqrt = g.unary("sqrt", g.binary("subtract", one, g.binary("power", beta2, step)));
    Value second = new_v;
    if (amsgrad) {
      second = g.binary("maximum", element(ctx, 4, k, compute), new_v);
      max_exp_avg_sqs.push_back(unless_inf(ctx, 14, second, element(ctx, 4, k, compute)));
    }
    Value denom = g.binary("add", g.binary("divide", g.unary("sqrt", second), bias_correction2_sqrt), eps);
    Value step_size = g.binary("divide", lr, bias_correction1);
    new_param = g.binary("subtract", new_param, g.binary("multiply", step_size, g.binary("divide", new_m, denom)));

    params.push_back(unless_inf(ctx, 14, new_param, param));
    grads.push_back(stored_grad);
    exp_avgs.push_back(unless_inf(ctx, 14, new_m, m));
    exp_avg_sqs.push_back(unless_inf(ctx, 14, new_v, v));
  }
  std::vector<Value> out = params;
  for (const auto* list : {&grads, &exp_avgs, &exp_avg_sqs, &max_exp_avg_sqs}) out.insert(out.end(), list->begin(), list->end());
  return out;
}

std::vector<Value> lower_fused_adam(LoweringContext& ctx) { return fused_adam(ctx, false); }
std::vector<Value> lower_fused_adamw(LoweringContext& ctx) { return fused_adam(ctx, true); }

// _fused_sgd(self[], grads[], momentum_buffer_list[], *, weight_decay, momentum, lr, dampening, nesterov,
//   maximize, is_first_step, grad_scale, found_inf)
std::vector<Value> lower_fused_sgd(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const size_t n = ctx.args[0].tensors.size();
  const bool has_momentum = !ctx.args[2].tensors.empty();
  const bool nesterov = ctx.boolean(7), maximize = ctx.boolean(8), is_first_step = ctx.boolean(9);
  std::vector<Value> params, grads, buffers;
  for (size_t k = 0; k < n; ++k) {
    const DType compute = accumulation_dtype(g.type(ctx.args[0].tensors[k]).dtype);
    const Type t{compute, g.type(ctx.args[0].tensors[k]).dims};
    Value param = element(ctx, 0, k, compute);
    Value grad = element(ctx, 1, k, compute);
    Value weight_decay = hyper(ctx, 3, t), momentum = hyper(ctx, 4, t), lr = hyper(ctx, 5, t);
    Value dampening = hyper(ctx, 6, t);
    Value stored_grad = ctx.args[1].tensors[k];
    if (!ctx.is_none(10)) {
      grad = g.binary("divide", grad, cast_to(g, ctx.tensor(10), t));
      stored_grad = unless_inf(ctx, 11, grad, element(ctx, 1, k, compute));
    }
    if (maximize) grad = g.unary("negate", grad);
    grad = plus_weight_decay(g, grad, param, weight_decay);
    if (has_momentum) {
      Value buffer = element(ctx, 2, k, compute);
      Value new_buffer = is_first_step
                             ? grad
                             : g.binary("add", g.binary("multiply", momentum, buffer),
                                        g.binary("multiply", g.binary("subtract", scalar_like(g, grad, 1.0), dampening), grad));
      buffers.push_back(unless_inf(ctx, 11, new_buffer, buffer));
      grad = nesterov ? g.binary("add", grad, g.binary("multiply", momentum, new_buffer)) : new_buffer;
    }
    params.push_back(unless_inf(ctx, 11, g.binary("subtract", param, g.binary("multiply", lr, grad)), param));
    grads.push_back(stored_grad);
  }
  std::vector<Value> out = params;
  out.insert(out.end(), grads.begin(), grads.end());
  out.insert(out.end(), buffers.begin(), buffers.end());
  return out;
}

// GradScaler's two steps (torch.amp.GradScaler("tpu"), fp16 mixed precision).

// _amp_foreach_non_finite_check_and_unscale(self[], found_inf, inv_scale) -> (self_out[], found_inf_out):
// every grad times inv_scale (unchanged where inv_scale is 1, as CUDA does); found_inf becomes 1 where any
// element of any grad (before scaling) is inf or NaN, and otherwise keeps its value.
std::vector<Value> lower_amp_non_finite_check_and_unscale(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value found_inf = ctx.tensor(1);
  const Type& flag_type = g.type(found_inf);
  Value any_bad = g.constant_int(0, DType::kBool);
  std::vector<Value> out;
  for (Value grad : ctx.args[0].tensors) {
    const Type& t = g.type(grad);
    const DType compute = accumulation_dtype(t.dtype);
    Value wide = g.convert(grad, compute);
    Value finite = g.op("is_finite", {wide}, Type{DType::kBool, t.dims});
    Value all_finite = g.reduce(finite, g.constant_int(1, DType::kBool), dim_range(0, t.rank()), ir::Reducer::kAnd);
    any_bad = g.binary("or", any_bad, g.unary("not", all_finite));
    Value inv_scale = cast_to(g, g.reshape(ctx.tensor(2), {}), Type{compute, {}});
    Value scaled = g.binary("multiply", wide, broadcast_to(g, inv_scale, t.dims));
    Value is_one = g.compare(inv_scale, g.constant(1.0, compute), ir::Comparison::kEQ);
    out.push_back(g.convert(g.select(broadcast_to(g, is_one, t.dims), wide, scaled), t.dtype));
  }
  Value one = g.constant(1.0, flag_type.dtype, flag_type.dims);
  out.push_back(g.select(broadcast_to(g, any_bad, flag_type.dims), one, found_inf));
  return out;
}

// _amp_update_scale(self, growth_tracker, found_inf, growth_factor, backoff_factor, growth_interval)
//   -> (scale, growth_tracker_out), CUDA's rule: after an overflow the scale backs off and the count restarts;
// after growth_interval clean steps in a row it grows (unless that overflows float) and the count restarts.
std::vector<Value> lower_amp_update_scale(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value scale = ctx.tensor(0), tracker = ctx.tensor(1);
  const Type st = g.type(scale), tt = g.type(tracker);
  Value found = g.compare(cast_to(g, ctx.tensor(2), Type{DType::kF32, st.dims}), g.constant(0, DType::kF32, st.dims),
                          ir::Comparison::kNE);
  Value growth = ctx.scalar(3, st.dtype, st.dims), backoff = ctx.scalar(4, st.dtype, st.dims);
  Value interval = g.constant_int(ctx.integer(5), tt.dtype, tt.dims);  // an int: static, keys the program
  Value successful = g.binary("add", tracker, g.constant_int(1, tt.dtype, tt.dims));
  Value grow = g.compare(successful, interval, ir::Comparison::kEQ);
  Value grown = g.binary("multiply", scale, growth);
  Value grown_ok = g.select(g.op("is_finite", {grown}, Type{DType::kBool, st.dims}), grown, scale);
  Value zero = g.constant_int(0, tt.dtype, tt.dims);
  Value new_scale = g.select(found, g.binary("multiply", scale, backoff), g.select(grow, grown_ok, scale));
  Value new_tracker = g.select(found, zero, g.select(grow, zero, successful));
  return {new_scale, new_tracker};
}

}  // namespace

void add_optimizer_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_amp_foreach_non_finite_check_and_unscale", &lower_amp_non_finite_check_and_unscale});
  table.push_back({"aten::_amp_update_scale", &lower_amp_update_scale});
  table.push_back({"aten::_fused_adam", &lower_fused_adam});
  table.push_back({"aten::_fused_adam.tensor_lr", &lower_fused_adam});
  table.push_back({"aten::_fused_adamw", &lower_fused_adamw});
  table.push_back({"aten::_fused_adamw.tensor_lr", &lower_fused_adamw});
  table.push_back({"aten::_fused_sgd", &lower_fused_sgd});
  table.push_back({"aten::_fused_sgd.tensor_lr", &lower_fused_sgd});
}

}  // namespace torchtpu::lowering
