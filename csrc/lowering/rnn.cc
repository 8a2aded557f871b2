// Fused recurrent cells. PyTorch sends LSTM steps on accelerators (cuda, xpu, privateuse1) to
// _thnn_fused_lstm_cell, which has no CPU kernel, so the CPU fallback cannot serve it.
#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

// Gate block k (of 4: input, forget, cell, output) of a [batch, 4 * hidden] value.
Value gate(Graph& g, Value gates, int64_t k) {
  const Type& t = g.type(gates);
  const int64_t hidden = t.dims[1] / 4;
  return g.slice(gates, {0, k * hidden}, {t.dims[0], (k + 1) * hidden}, {1, 1});
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
  const Type& bias_type = ctx.outputs.at(2);
  Value grad_bias = bias_type.numel() == g.type(grad_gates).dims[1]
                        ? g.reduce(grad_gates, g.constant(0.0, compute), {0}, ir::Reducer::kAdd)
                        : g.constant(0.0, bias_type.dtype, bias_type.dims);  // has_bias false: unused
  return {g.convert(grad_gates, gates_type.dtype), g.convert(grad_cx, ctx.outputs[1].dtype),
          g.reshape(g.convert(grad_bias, bias_type.dtype), bias_type.dims)};
}

}  // namespace

void add_rnn_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_thnn_fused_lstm_cell", &lower_fused_lstm_cell});
  table.push_back({"aten::_thnn_fused_lstm_cell_backward_impl", &lower_fused_lstm_cell_backward});
}

}  // namespace torchtpu::lowering
