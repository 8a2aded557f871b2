// Scaled dot-product attention as one program each way: `_scaled_dot_product_fused_attention_overrideable`
// and its backward, which PyTorch calls for `F.scaled_dot_product_attention` when the device picks the
// "overrideable" backend (aten/attention.cc decides). Without it the math decomposition runs as a dozen
// programs over the [.., L, S] score tensor (mask building, NaN guards, softmax, two matmuls).
//
// q [.., L, E], k [.., S, E], v [.., S, Ev]; the causal mask is PyTorch's (top-left aligned: query i sees
// keys j <= i); an attention bias adds to the scores (PyTorch turns a bool mask into one with -inf). Scores
// and softmax statistics are float32 for 16-bit inputs. A row whose every key is masked gives 0, as the
// math path's safe softmax does.
#include <cmath>
#include <limits>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;

struct Scores {
  Value logits;  // [.., L, S] in `compute`, masked entries -inf
  DType compute;
};

std::vector<int64_t> batch_dims(const Type& t) { return dim_range(0, t.rank() - 2); }

// q k^T * scale (+ bias, causal mask). `scale_arg`: the optional `float? scale`; `bias_arg` the attn bias.
Scores scores(LoweringContext& ctx, size_t q_arg, size_t k_arg, size_t bias_arg, bool causal, size_t scale_arg) {
  Graph& g = ctx.graph;
  const Type& qt = ctx.type_of(q_arg);
  const DType compute = accumulation_dtype(qt.dtype);
  Value q = g.convert(ctx.tensor(q_arg), compute);
  Value k = g.convert(ctx.tensor(k_arg), compute);
  const int64_t rank = qt.rank();
  const std::vector<int64_t> batch = batch_dims(qt);
  Value s = g.dot_general(q, k, batch, batch, {rank - 1}, {rank - 1}, compute);
  const Type& st = g.type(s);
  Value scale = ctx.is_none(scale_arg) ? g.constant(1.0 / std::sqrt(static_cast<double>(qt.dims.back())), compute, st.dims)
                                       : ctx.scalar(scale_arg, compute, st.dims);
  s = g.binary("multiply", s, scale);
  if (!ctx.is_none(bias_arg)) s = g.binary("add", s, cast_to(g, ctx.tensor(bias_arg), st));
  if (causal) {
    Value row = g.iota(Type{DType::kI64, st.dims}, rank - 2);
    Value col = g.iota(Type{DType::kI64, st.dims}, rank - 1);
    Value hidden = g.compare(col, row, Comparison::kGT);
    s = g.select(hidden, g.constant(-std::numeric_limits<double>::infinity(), compute, st.dims), s);
  }
  return {s, compute};
}

// Broadcasts a [.., L] statistic back over the keys dim.
Value over_keys(Graph& g, Value stat, const Type& scores_type) {
  std::vector<int64_t> kept = dim_range(0, scores_type.rank() - 1);
  return g.broadcast_in_dim(stat, scores_type.dims, kept);
}

// exp(s - lse) with lse = -inf rows (every key masked) giving 0.
Value probabilities(Graph& g, Value s, Value lse) {
  const Type& st = g.type(s);
  Value finite = g.op("is_finite", {lse}, Type{DType::kBool, g.type(lse).dims});
  Value safe_lse = g.select(finite, lse, g.constant(0, st.dtype, g.type(lse).dims));
  Value p = g.unary("exponential", g.binary("subtract", s, over_keys(g, safe_lse, st)));
  return g.select(over_keys(g, finite, st), p, g.constant(0, st.dtype, st.dims));
}

// _scaled_dot_product_fused_attention_overrideable(query, key, value, attn_bias, dropout_p, is_causal,
//   return_debug_mask, *, scale) -> (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed,
//   philox_offset, debug_attn_mask)
std::vector<Value> lower_attention(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Scores sc = scores(ctx, 0, 1, 3, ctx.boolean(5), 7);
  const Type& st = g.type(sc.logits);
  const int64_t keys = st.rank() - 1;
  Value neg_inf = g.constant(-std::numeric_limits<double>::infinity(), sc.compute);
  Value row_max = g.reduce(sc.logits, neg_inf, {keys}, ir::Reducer::kMax);
  Value finite_max = g.op("is_finite", {row_max}, Type{DType::kBool, g.type(row_max).dims});
  Value shift = g.select(finite_max, row_max, g.constant(0, sc.compute, g.type(row_max).dims));
  Value e = g.unary("exponential", g.binary("subtract", sc.logits, over_keys(g, shift, st)));
  Value total = g.reduce(e, g.constant(0, sc.compute), {keys}, ir::Reducer::kAdd);
  Value lse = g.binary("add", shift, g.unary("log", total));  // -inf where every key is masked
  Value p = probabilities(g, sc.logits, lse);
  const Type& vt = ctx.type_of(2);
  const std::vector<int64_t> batch = batch_dims(vt);
  Value v = g.convert(ctx.tensor(2), sc.compute);
  Value out = g.dot_general(p, v, batch, batch, {keys}, {vt.rank() - 2}, sc.compute);
  // The other results: no sequence offsets, no debug mask, a zero RNG state (no dropout on this path).
  return {out, lse, Value{}, Value{}, g.constant_int(0, DType::kI64), g.constant_int(0, DType::kI64), Value{}};
}

// _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query, key, value, attn_bias,
//   grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
//   philox_offset, *, scale) -> (grad_query, grad_key, grad_value, grad_attn_bias)
std::vector<Value> lower_attention_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Scores sc = scores(ctx, 1, 2, 4, ctx.boolean(13), 16);
  const Type& st = g.type(sc.logits);
  const int64_t rank = st.rank();
  const std::vector<int64_t> batch = batch_dims(st);
  Value lse = g.convert(ctx.tensor(7), sc.compute);
  Value p = probabilities(g, sc.logits, lse);
  Value d_out = g.convert(ctx.tensor(0), sc.compute);
  Value q = g.convert(ctx.tensor(1), sc.compute);
  Value k = g.convert(ctx.tensor(2), sc.compute);
  Value v = g.convert(ctx.tensor(3), sc.compute);
  Value out = g.convert(ctx.tensor(6), sc.compute);
  // dV = P^T dO; dP = dO V^T; dS = P * (dP - rowsum(dO * O)); dQ = dS K * scale; dK = dS^T Q * scale.
  Value d_v = g.dot_general(p, d_out, batch, batch, {rank - 2}, {rank - 2}, sc.compute);
  Value d_p = g.dot_general(d_out, v, batch, batch, {rank - 1}, {rank - 1}, sc.compute);
  Value row_dot = g.reduce(g.binary("multiply", d_out, out), g.constant(0, sc.compute), {rank - 1}, ir::Reducer::kAdd);
  Value d_s = g.binary("multiply", p, g.binary("subtract", d_p, over_keys(g, row_dot, st)));
  const Type& qt = ctx.type_of(1);
  Value scale = ctx.is_none(16) ? g.constant(1.0 / std::sqrt(static_cast<double>(qt.dims.back())), sc.compute)
                                : ctx.scalar(16, sc.compute);
  Value d_q = g.dot_general(d_s, k, batch, batch, {rank - 1}, {rank - 2}, sc.compute);
  d_q = g.binary("multiply", d_q, g.broadcast_in_dim(scale, g.type(d_q).dims, {}));
  Value d_k = g.dot_general(d_s, q, batch, batch, {rank - 2}, {rank - 2}, sc.compute);
  d_k = g.binary("multiply", d_k, g.broadcast_in_dim(scale, g.type(d_k).dims, {}));
  Value d_bias;
  if (!ctx.is_none(4)) {  // PyTorch's shape inference gives a bias gradient whenever there is a bias
    // The bias may broadcast over leading dims: sum the gradient back to its shape.
    const Type& bt = ctx.type_of(4);
    std::vector<int64_t> summed;
    const int64_t lead = st.rank() - bt.rank();
    for (int64_t d = 0; d < st.rank(); ++d) {
      if (d < lead || bt.dims[static_cast<size_t>(d - lead)] == 1) summed.push_back(d);
    }
    d_bias = summed.empty() ? d_s : g.reduce(d_s, g.constant(0, sc.compute), summed, ir::Reducer::kAdd);
    d_bias = g.reshape(d_bias, bt.dims);
  }
  return {d_q, d_k, d_v, d_bias};
}

}  // namespace

void add_attention_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_scaled_dot_product_fused_attention_overrideable", &lower_attention});
  table.push_back({"aten::_scaled_dot_product_fused_attention_overrideable_backward", &lower_attention_backward});
}

}  // namespace torchtpu::lowering
