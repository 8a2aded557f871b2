// Fused recurrent cells. PyTorch sends LSTM and GRU steps on accelerators (cuda, xpu, privateuse1) to
// _thnn_fused_lstm_cell / _thnn_fused_gru_cell, which have no CPU kernel, so the CPU fallback cannot serve
// them. RNN (tanh, relu) steps decompose into linear and the activation, which are lowered already.
#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

// Block k of a [batch, blocks * hidden] value: a gate of the packed gates (LSTM: input, forget, cell,
// output; GRU: reset, update, new) or a slot of a cell's workspace.
Value block(Graph& g, Value packed, int64_t k, int64_t blocks) {
  const Type& t = g.type(packed);
  const int64_t hidden = t.dims[1] / blocks;
  return g.slice(packed, {0, k * hidden}, {t.dims[0], (k + 1) * hidden}, {1, 1});
}

// Gate k of an LSTM's packed gates or workspace.
Value gate(Graph& g, Value gates, int64_t k) { return block(g, gates, k, 4); }

// The sum over the batch of a [batch, n] gradient: the bias gradient, shaped as the bias.
Value bias_gradient(Graph& g, Value grad_gates, const Type& bias_type) {
  const DType dtype = g.type(grad_gates).dtype;
  return g.reshape(g.convert(g.reduce(grad_gates, g.constant(0.0, dtype), {0}, ir::Reducer::kAdd), bias_type.dtype),
                   bias_type.dims);
}

Value one_minus(Graph& g, Value x) {
  return g.binary("subtract", g.constant(1.0, g.type(x).dtype, g.type(x).dims), x);
}

// _thnn_fused_lstm_cell(input_gates, hidden_gates, cx, input_bias?, hidden_bias?) -> (hy, cy, workspace)
// The workspace keeps the activated gates for the backward.
std::vector<Value> lower_fused_lstm_cell(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& gates_type = ctx.outputs.at(2);
  const DType compute = accumulation_dtype(gates_type.dtype);
  const Type gates_compute{compute, gates_type.dims};
  Value gates = g.binary("add", cast_to(g, ctx.tensor(0), gates_compute), cast_to(g, ctx.tensor(1), gates_compute));
  for (size_t bias = 3; bias <= 4; ++bias) {
    if (!ctx.is_none(bias)) gates = g.binary("add", gates, cast_to(g, ctx.tensor(bias), gates_compute));
  }
  Value in = g.unary("logistic", gate(g, gates, 0));
  Value forget = g.unary("logistic", gate(g, gates, 1));
  Value cell = g.unary("tanh", gate(g, gates, 2));
  Value out = g.unary("logistic", gate(g, gates, 3));
  const Type& state_type = ctx.outputs.at(1);
  Value cx = cast_to(g, ctx.tensor(2), Type{compute, state_type.dims});
  Value cy = g.binary("add", g.binary("multiply", forget, cx), g.binary("multiply", in, cell));
  Value hy = g.binary("multiply", out, g.unary("tanh", cy));
  Value workspace = g.concatenate({in, forget, cell, out}, 1);
  return {g.convert(hy, ctx.outputs[0].dtype), g.convert(cy, state_type.dtype), g.convert(workspace, gates_type.dtype)};
}

// _thnn_fused_lstm_cell_backward_impl(grad_hy?, grad_cy?, cx, cy, workspace, has_bias)
//   -> (grad_gates, grad_cx, grad_bias)
std::vector<Value> lower_fused_lstm_cell_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& gates_type = ctx.outputs.at(0);
  const DType compute = accumulation_dtype(gates_type.dtype);
  const Type state{compute, ctx.type_of(2).dims};
  Value workspace = g.convert(ctx.tensor(4), compute);
  Value in = gate(g, workspace, 0);
  Value forget = gate(g, workspace, 1);
  Value cell = gate(g, workspace, 2);
  Value out = gate(g, workspace, 3);
  Value zero = g.constant(0.0, compute, state.dims);
  Value grad_hy = ctx.is_none(0) ? zero : cast_to(g, ctx.tensor(0), state);
  Value grad_cy = ctx.is_none(1) ? zero : cast_to(g, ctx.tensor(1), state);
  Value cx = cast_to(g, ctx.tensor(2), state);
  Value tanh_cy = g.unary("tanh", cast_to(g, ctx.tensor(3), state));
  // d(cy) = d(hy) * out * (1 - tanh(cy)^2) + d(cy)
  Value grad_c = g.binary("add", g.binary("multiply", g.binary("multiply", grad_hy, out),
                                          one_minus(g, g.binary("multiply", tanh_cy, tanh_cy))),
                          grad_cy);
  Value grad_in = g.binary("multiply", g.binary("multiply", grad_c, cell), g.binary("multiply", in, one_minus(g, in)));
  Value grad_forget =
      g.binary("multiply", g.binary("multiply", grad_c, cx), g.binary("multiply", forget, one_minus(g, forget)));
  Value grad_cell = g.binary("multiply", g.binary("multiply", grad_c, in), one_minus(g, g.binary("multiply", cell, cell)));
  Value grad_out =
      g.binary("multiply", g.binary("multiply", grad_hy, tanh_cy), g.binary("multiply", out, one_minus(g, out)));
  Value grad_gates = g.concatenate({grad_in, grad_forget, grad_cell, grad_out}, 1);
  Value grad_cx = g.binary("multiply", grad_c, forget);
  Value grad_bias = ctx.boolean(5) ? bias_gradient(g, grad_gates, ctx.outputs.at(2)) : Value{};  // else undefined
  return {g.convert(grad_gates, gates_type.dtype), g.convert(grad_cx, ctx.outputs[1].dtype), grad_bias};
}

// _thnn_fused_gru_cell(input_gates, hidden_gates, hx, input_bias?, hidden_bias?) -> (hy, workspace)
// Gates in PyTorch's order (reset, update, new); the new gate adds the hidden part only after the reset
// gate scales it, so the two biases stay apart. The workspace keeps, per row, the reset, update and new
// gates, hx and the hidden part of the new gate for the backward (CUDA's layout, so shapes agree).
std::vector<Value> lower_fused_gru_cell(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& workspace_type = ctx.outputs.at(1);
  const DType compute = accumulation_dtype(workspace_type.dtype);
  const Type gates_compute{compute, ctx.type_of(0).dims};
  Value input_gates = cast_to(g, ctx.tensor(0), gates_compute);
  Value hidden_gates = cast_to(g, ctx.tensor(1), gates_compute);
  if (!ctx.is_none(3)) input_gates = g.binary("add", input_gates, cast_to(g, ctx.tensor(3), gates_compute));
  if (!ctx.is_none(4)) hidden_gates = g.binary("add", hidden_gates, cast_to(g, ctx.tensor(4), gates_compute));
  auto input_gate = [&](int64_t k) { return block(g, input_gates, k, 3); };
  auto hidden_gate = [&](int64_t k) { return block(g, hidden_gates, k, 3); };
  Value reset = g.unary("logistic", g.binary("add", input_gate(0), hidden_gate(0)));
  Value update = g.unary("logistic", g.binary("add", input_gate(1), hidden_gate(1)));
  Value hidden_new = hidden_gate(2);
  Value fresh = g.unary("tanh", g.binary("add", input_gate(2), g.binary("multiply", reset, hidden_new)));
  const Type& state_type = ctx.outputs.at(0);
  Value hx = cast_to(g, ctx.tensor(2), Type{compute, state_type.dims});
  // hy = n + z * (hx - n), as CUDA computes it
  Value hy = g.binary("add", fresh, g.binary("multiply", update, g.binary("subtract", hx, fresh)));
  Value workspace = g.concatenate({reset, update, fresh, hx, hidden_new}, 1);
  return {g.convert(hy, state_type.dtype), g.convert(workspace, workspace_type.dtype)};
}

// _thnn_fused_gru_cell_backward(grad_hy, workspace, has_bias)
//   -> (grad_input_gates, grad_hidden_gates, grad_hx, grad_input_bias, grad_hidden_bias)
std::vector<Value> lower_fused_gru_cell_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& gates_type = ctx.outputs.at(0);
  const DType compute = accumulation_dtype(gates_type.dtype);
  Value workspace = g.convert(ctx.tensor(1), compute);
  Value reset = block(g, workspace, 0, 5);
  Value update = block(g, workspace, 1, 5);
  Value fresh = block(g, workspace, 2, 5);
  Value hx = block(g, workspace, 3, 5);
  Value hidden_new = block(g, workspace, 4, 5);
  Value grad_hy = cast_to(g, ctx.tensor(0), g.type(hx));
  Value grad_update = g.binary("multiply", g.binary("multiply", grad_hy, g.binary("subtract", hx, fresh)),
                               g.binary("multiply", update, one_minus(g, update)));
  Value grad_hx = g.binary("multiply", grad_hy, update);
  // The new gate's pre-activation; its hidden part entered scaled by the reset gate.
  Value grad_fresh = g.binary("multiply", g.binary("multiply", grad_hy, one_minus(g, update)),
                              one_minus(g, g.binary("multiply", fresh, fresh)));
  Value grad_hidden_new = g.binary("multiply", grad_fresh, reset);
  Value grad_reset = g.binary("multiply", g.binary("multiply", grad_fresh, hidden_new),
                              g.binary("multiply", reset, one_minus(g, reset)));
  Value grad_input_gates = g.concatenate({grad_reset, grad_update, grad_fresh}, 1);
  Value grad_hidden_gates = g.concatenate({grad_reset, grad_update, grad_hidden_new}, 1);
  const bool has_bias = ctx.boolean(2);
  return {g.convert(grad_input_gates, gates_type.dtype), g.convert(grad_hidden_gates, ctx.outputs[1].dtype),
          g.convert(grad_hx, ctx.outputs[2].dtype),
          has_bias ? bias_gradient(g, grad_input_gates, ctx.outputs.at(3)) : Value{},
          has_bias ? bias_gradient(g, grad_hidden_gates, ctx.outputs.at(4)) : Value{}};
}

}  // namespace

void add_rnn_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_thnn_fused_lstm_cell", &lower_fused_lstm_cell});
  table.push_back({"aten::_thnn_fused_lstm_cell_backward_impl", &lower_fused_lstm_cell_backward});
  table.push_back({"aten::_thnn_fused_gru_cell", &lower_fused_gru_cell});
  table.push_back({"aten::_thnn_fused_gru_cell_backward", &lower_fused_gru_cell_backward});
}

}  // namespace torchtpu::lowering
