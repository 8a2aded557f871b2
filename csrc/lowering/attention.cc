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

// Grouped-query attention (`enable_gqa`): key and value carry fewer heads than the query, each shared by
// a group of consecutive query heads (PyTorch repeats them with repeat_interleave). [B, Hkv, S, E] ->
// [B, H, S, E]; unchanged when the heads already match.
Value repeat_heads(Graph& g, Value kv, int64_t heads) {
  const Type& t = g.type(kv);
  if (t.rank() != 4 || t.dims[1] == heads) return kv;
  const int64_t groups = heads / t.dims[1];
  std::vector<int64_t> grouped = {t.dims[0], t.dims[1], groups, t.dims[2], t.dims[3]};
  return g.reshape(g.broadcast_in_dim(kv, grouped, {0, 1, 3, 4}), {t.dims[0], heads, t.dims[2], t.dims[3]});
}

// The gradient of repeat_heads: [B, H, S, E] summed over each group back to [B, kv_heads, S, E].
Value sum_head_groups(Graph& g, Value grad, int64_t kv_heads) {
  const Type& t = g.type(grad);
  if (t.rank() != 4 || t.dims[1] == kv_heads) return grad;
  std::vector<int64_t> grouped = {t.dims[0], kv_heads, t.dims[1] / kv_heads, t.dims[2], t.dims[3]};
  return g.reduce(g.reshape(grad, grouped), g.constant(0, t.dtype), {2}, ir::Reducer::kAdd);
}

// q k^T * scale (+ bias, causal mask, keys at or past `key_limit` hidden). q and k are already in the
// compute dtype with matching heads; `scale` is a rank-0 compute value; `key_limit` (rank-0 i64) may be
// invalid.
Scores scores(Graph& g, Value q, Value k, Value bias, bool causal, Value scale, Value key_limit) {
  const Type& qt = g.type(q);
  const DType compute = qt.dtype;
  const int64_t rank = qt.rank();
  const std::vector<int64_t> batch = batch_dims(qt);
  Value s = g.dot_general(q, k, batch, batch, {rank - 1}, {rank - 1}, compute);
  const Type& st = g.type(s);
  s = g.binary("multiply", s, g.broadcast_in_dim(scale, st.dims, {}));
  if (bias.valid()) s = g.binary("add", s, cast_to(g, bias, st));
  Value col = g.iota(Type{DType::kI64, st.dims}, rank - 1);
  Value hidden;
  if (causal) hidden = g.compare(col, g.iota(Type{DType::kI64, st.dims}, rank - 2), Comparison::kGT);
  if (key_limit.valid()) {
    Value past = g.compare(col, g.broadcast_in_dim(key_limit, st.dims, {}), Comparison::kGE);
    hidden = hidden.valid() ? g.binary("or", hidden, past) : past;
  }
  if (hidden.valid()) {
    s = g.select(hidden, g.constant(-std::numeric_limits<double>::infinity(), compute, st.dims), s);
  }
  return {s, compute};
}

// The softmax scale: the `float? scale` argument, else 1/sqrt(E).
Value softmax_scale(LoweringContext& ctx, size_t scale_arg, int64_t head_dim, DType compute) {
  if (!ctx.is_none(scale_arg)) return ctx.scalar(scale_arg, compute);
  return ctx.graph.constant(1.0 / std::sqrt(static_cast<double>(head_dim)), compute);
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

// The forward pass on values: returns {output [.., L, Ev] in compute, logsumexp [.., L]}.
std::pair<Value, Value> attend(Graph& g, Value q, Value k, Value v, Value bias, bool causal, Value scale,
                               Value key_limit) {
  const int64_t heads = g.type(q).rank() == 4 ? g.type(q).dims[1] : 0;
  const Scores sc = scores(g, q, repeat_heads(g, k, heads), bias, causal, scale, key_limit);
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
  Value vr = repeat_heads(g, v, heads);
  const std::vector<int64_t> batch = batch_dims(g.type(vr));
  Value out = g.dot_general(p, vr, batch, batch, {keys}, {g.type(vr).rank() - 2}, sc.compute);
  return {out, lse};
}

// _scaled_dot_product_fused_attention_overrideable(query, key, value, attn_bias, dropout_p, is_causal,
//   return_debug_mask, *, scale) -> (output, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, philox_seed,
//   philox_offset, debug_attn_mask)
std::vector<Value> lower_attention(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& qt = ctx.type_of(0);
  const DType compute = accumulation_dtype(qt.dtype);
  Value bias = ctx.is_none(3) ? Value{} : ctx.tensor(3);
  auto [out, lse] = attend(g, g.convert(ctx.tensor(0), compute), g.convert(ctx.tensor(1), compute),
                           g.convert(ctx.tensor(2), compute), bias, ctx.boolean(5),
                           softmax_scale(ctx, 7, qt.dims.back(), compute), Value{});
  // The other results: no sequence offsets, no debug mask, a zero RNG state (no dropout on this path).
  return {out, lse, Value{}, Value{}, g.constant_int(0, DType::kI64), g.constant_int(0, DType::kI64), Value{}};
}

// Rows [0, rows) of a [outer, rows, inner] array laid out contiguously at the start of `flat`, padded with
// zeros to [outer, capacity, inner]; `rows` is a runtime rank-0 i64.
Value unpack_rows(Graph& g, Value flat, Value rows, int64_t outer, int64_t capacity, int64_t inner) {
  const Type index_type{DType::kI64, {outer, capacity, inner}};
  auto dims_of = [&](Value x) { return g.broadcast_in_dim(x, index_type.dims, {}); };
  Value o = g.iota(index_type, 0);
  Value r = g.iota(index_type, 1);
  Value e = g.iota(index_type, 2);
  Value inner_v = g.constant_int(inner, DType::kI64, index_type.dims);
  Value index = g.binary("add", g.binary("multiply", g.binary("add", g.binary("multiply", o, dims_of(rows)), r), inner_v), e);
  const int64_t last = g.type(flat).dims[0] - 1;
  index = g.op("clamp", {g.constant_int(0, DType::kI64), index, g.constant_int(last, DType::kI64)}, index_type);
  Value values = g.gather_flat(flat, g.reshape(index, {outer, capacity, inner, 1}));
  Value present = g.compare(r, dims_of(rows), Comparison::kLT);
  return g.select(present, values, g.constant(0, g.type(flat).dtype, index_type.dims));
}

// torchtpu::_attention_prefix(query, key_storage, value_storage, kv_len, kv_heads, capacity, is_causal, scale)
//   -> (output, logsumexp, philox_seed, philox_offset)
// Attention over the first `kv_len` keys of key and value tensors [B, kv_heads, kv_len, E] stored
// contiguously at the start of larger 1-d storages (the spare capacity a growing cat leaves, aten/append.cc).
// The storages come whole and kv_len is an operand, so one program serves every length up to `capacity`.
std::vector<Value> lower_attention_prefix(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& qt = ctx.type_of(0);
  const DType compute = accumulation_dtype(qt.dtype);
  const int64_t outer = qt.dims[0] * ctx.integer(4);
  const int64_t capacity = ctx.integer(5);
  Value rows = ctx.scalar(3, DType::kI64);
  auto kv = [&](size_t arg, int64_t inner) {
    Value x = unpack_rows(g, ctx.tensor(arg), rows, outer, capacity, inner);
    return g.convert(g.reshape(x, {qt.dims[0], outer / qt.dims[0], capacity, inner}), compute);
  };
  auto [out, lse] = attend(g, g.convert(ctx.tensor(0), compute), kv(1, qt.dims[3]), kv(2, ctx.outputs[0].dims[3]),
                           Value{}, ctx.boolean(6), softmax_scale(ctx, 7, qt.dims.back(), compute), rows);
  return {out, lse, g.constant_int(0, DType::kI64), g.constant_int(0, DType::kI64)};  // no dropout: zero RNG state
}

// _scaled_dot_product_fused_attention_overrideable_backward(grad_out, query, key, value, attn_bias,
//   grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q, max_k, dropout_p, is_causal, philox_seed,
//   philox_offset, *, scale) -> (grad_query, grad_key, grad_value, grad_attn_bias)
std::vector<Value> lower_attention_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& qt = ctx.type_of(1);
  const DType compute = accumulation_dtype(qt.dtype);
  const int64_t heads = qt.rank() == 4 ? qt.dims[1] : 0;
  const int64_t kv_heads = qt.rank() == 4 ? ctx.type_of(2).dims[1] : 0;
  Value q = g.convert(ctx.tensor(1), compute);
  Value k = repeat_heads(g, g.convert(ctx.tensor(2), compute), heads);
  Value v = repeat_heads(g, g.convert(ctx.tensor(3), compute), heads);
  Value scale = softmax_scale(ctx, 16, qt.dims.back(), compute);
  Value bias = ctx.is_none(4) ? Value{} : ctx.tensor(4);
  const Scores sc = scores(g, q, k, bias, ctx.boolean(13), scale, Value{});
  const Type& st = g.type(sc.logits);
  const int64_t rank = st.rank();
  const std::vector<int64_t> batch = batch_dims(st);
  Value lse = g.convert(ctx.tensor(7), sc.compute);
  Value p = probabilities(g, sc.logits, lse);
  Value d_out = g.convert(ctx.tensor(0), sc.compute);
  Value out = g.convert(ctx.tensor(6), sc.compute);
  // dV = P^T dO; dP = dO V^T; dS = P * (dP - rowsum(dO * O)); dQ = dS K * scale; dK = dS^T Q * scale.
  Value d_v = g.dot_general(p, d_out, batch, batch, {rank - 2}, {rank - 2}, sc.compute);
  Value d_p = g.dot_general(d_out, v, batch, batch, {rank - 1}, {rank - 1}, sc.compute);
  Value row_dot = g.reduce(g.binary("multiply", d_out, out), g.constant(0, sc.compute), {rank - 1}, ir::Reducer::kAdd);
  Value d_s = g.binary("multiply", p, g.binary("subtract", d_p, over_keys(g, row_dot, st)));
  Value d_q = g.dot_general(d_s, k, batch, batch, {rank - 1}, {rank - 2}, sc.compute);
  d_q = g.binary("multiply", d_q, g.broadcast_in_dim(scale, g.type(d_q).dims, {}));
  Value d_k = g.dot_general(d_s, q, batch, batch, {rank - 2}, {rank - 2}, sc.compute);
  d_k = g.binary("multiply", d_k, g.broadcast_in_dim(scale, g.type(d_k).dims, {}));
  d_k = sum_head_groups(g, d_k, kv_heads);
  d_v = sum_head_groups(g, d_v, kv_heads);
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
  table.push_back({"torchtpu::_attention_prefix", &lower_attention_prefix});
}

}  // namespace torchtpu::lowering
