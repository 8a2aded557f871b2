// Embedding backward, embedding_bag, channel_shuffle, and the helpers shared by the nn rule files
// (nn_activation.cc, nn_norm.cc, nn_conv.cc, nn_pool.cc, nn_distance.cc, nn_loss.cc, nn_ctc.cc, upsample.cc),
// whose rules add_nn_rules collects.
#include <algorithm>
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

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

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

// CPU's checks of embedding_bag's offsets (1-d, i64): they start at 0, end within the `count` indices and
// never decrease.
void check_offsets(LoweringContext& ctx, Value offsets, int64_t count) {
  Graph& g = ctx.graph;
  const int64_t n = g.type(offsets).dims[0];
  if (n == 0) return;
  offsets = g.convert(offsets, DType::kI64);
  Value first = g.reshape(g.slice(offsets, {0}, {1}, {1}), {});
  Value last = g.reshape(g.slice(offsets, {n - 1}, {n}, {1}), {});
  ctx.check(CheckKind::kBagFirstOffset, g.compare(first, g.constant_int(0, DType::kI64), Comparison::kNE), first);
  ctx.check(CheckKind::kBagLastOffset, g.compare(last, g.constant_int(count, DType::kI64), Comparison::kGT), last,
            {count});
  if (n > 1) {
    Value decreasing = g.compare(g.slice(offsets, {1}, {n}, {1}), g.slice(offsets, {0}, {n - 1}, {1}), Comparison::kLT);
    ctx.check(CheckKind::kBagOffsetsOrder, decreasing);
  }
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
  check_offsets(ctx, ctx.tensor(2), count);
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
  table.push_back({"aten::_embedding_bag", &lower_embedding_bag});
  table.push_back({"aten::_embedding_bag_backward", &lower_embedding_bag_backward_dense});
  table.push_back({"aten::_embedding_bag_dense_backward", &lower_embedding_bag_dense_backward});
  table.push_back({"aten::_embedding_bag_forward_only", &lower_embedding_bag});
  table.push_back({"aten::_embedding_bag_per_sample_weights_backward", &lower_embedding_bag_per_sample_weights_backward});
  table.push_back({"aten::channel_shuffle", &lower_channel_shuffle});
  table.push_back({"aten::embedding_renorm", &lower_embedding_renorm});
  table.push_back({"aten::embedding_dense_backward", &lower_embedding_dense_backward});
  add_nn_activation_rules(table);
  add_nn_norm_rules(table);
  add_nn_conv_rules(table);
  add_nn_pool_rules(table);
  add_upsample_rules(table);
  add_nn_distance_rules(table);
  add_nn_loss_rules(table);
  add_nn_ctc_rules(table);
}

}  // namespace torchtpu::lowering
