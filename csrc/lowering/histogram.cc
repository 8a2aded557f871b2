// Histograms: histogram over the flattened input and histogramdd over rows of d coordinates, each with
// equal-width bins over a range or the data's extent, or with given edges. Output shapes are static; the
// equal-width edges may depend on the data, which the device computes like any other value.
//
// Element x falls in bin i when edges[i] <= x < edges[i + 1]; the last bin includes its right edge, and
// elements outside [edges[0], edges[-1]] (and NaN) are not counted. Binning against the edges themselves,
// rather than by dividing, gives PyTorch's assignment for elements that sit on an edge.
#include <limits>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;
using ir::Reducer;

// The bin of each element of the 1-d `x` among the 1-d `edges` (of x's dtype), i64 [n], and whether the
// element lies within the edges (NaN does not).
std::pair<Value, Value> bin_of(Graph& g, Value x, Value edges) {
  const int64_t n = g.type(x).dims[0], edge_count = g.type(edges).dims[0], bins = edge_count - 1;
  auto edge = [&](int64_t i) { return g.reshape(g.slice(edges, {i}, {i + 1}, {1}), {}); };
  // Bin = number of edges <= x, minus one; the right edge belongs to the last bin.
  Value at_or_below = g.compare(g.broadcast_in_dim(edges, {n, edge_count}, {1}),
                                g.broadcast_in_dim(x, {n, edge_count}, {0}), Comparison::kLE);
  Value edges_at_or_below =
      g.reduce(g.convert(at_or_below, DType::kI64), g.constant_int(0, DType::kI64), {1}, Reducer::kAdd);
  Value bin = g.binary("subtract", edges_at_or_below, g.constant_int(1, DType::kI64, {n}));
  bin = g.binary("minimum", bin, g.constant_int(bins - 1, DType::kI64, {n}));
  Value inside = g.binary("and", g.compare(x, broadcast_to(g, edge(0), {n}), Comparison::kGE),
                          g.compare(x, broadcast_to(g, edge(bins), {n}), Comparison::kLE));
  return {bin, inside};
}

// The widths of the bins `edges` bound, in `dtype`.
Value bin_widths(Graph& g, Value edges, DType dtype) {
  const int64_t edge_count = g.type(edges).dims[0];
  Value wide = g.convert(edges, dtype);
  return g.binary("subtract", g.slice(wide, {1}, {edge_count}, {1}), g.slice(wide, {0}, {edge_count - 1}, {1}));
}

// The histogram over the cartesian product of the bins of each of the columns of `x` [n, d] among
// `edges[j]`: counts (or sums of `weight` [n], when valid) of shape [bins_0, ..., bins_{d-1}], in x's dtype;
// with `density`, each divided by the total and its cell's volume. An element outside any dim's edges is
// not counted.
Value histogram(Graph& g, Value x, const std::vector<Value>& edges, Value weight, bool density) {
  const DType dtype = g.type(x).dtype;
  const DType accumulate = accumulation_dtype(dtype);
  const int64_t n = g.type(x).dims[0];
  std::vector<int64_t> bins;
  int64_t cells = 1;
  for (Value e : edges) {
    bins.push_back(g.type(e).dims[0] - 1);
    cells *= bins.back();
  }
  Value cell = g.constant_int(0, DType::kI64, {n});
  Value inside = g.constant_int(1, DType::kBool, {n});
  for (size_t j = 0; j < edges.size(); ++j) {
    const int64_t column = static_cast<int64_t>(j);
    auto [bin, within] = bin_of(g, g.reshape(g.slice(x, {0, column}, {n, column + 1}, {1, 1}), {n}), edges[j]);
    cell = g.binary("add", g.binary("multiply", cell, g.constant_int(bins[j], DType::kI64, {n})), bin);
    inside = g.binary("and", inside, within);
  }
  // Elements outside the edges go to row `cells`, which the scatter drops.
  cell = g.select(inside, cell, g.constant_int(cells, DType::kI64, {n}));
  Value amount = weight.valid() ? g.convert(weight, accumulate) : g.constant(1.0, accumulate, {n});
  Value hist = g.reshape(scatter_add_rows(g, g.constant(0.0, accumulate, {cells}), g.reshape(cell, {n, 1}), amount),
                         bins);
  if (density) {
    Value total = g.reduce(hist, g.constant(0.0, accumulate), dim_range(0, static_cast<int64_t>(bins.size())),
                           Reducer::kAdd);
    Value volume = broadcast_to(g, total, bins);
    for (size_t j = 0; j < edges.size(); ++j) {
      volume = g.binary("multiply", volume,
                        g.broadcast_in_dim(bin_widths(g, edges[j], accumulate), bins, {static_cast<int64_t>(j)}));
    }
    hist = g.binary("divide", hist, volume);
  }
  return g.convert(hist, dtype);
}

Value flattened(LoweringContext& ctx, size_t i) {
  if (ctx.is_none(i)) return Value{};
  return ctx.graph.reshape(ctx.tensor(i), {ctx.type_of(i).numel()});
}

// The bins + 1 equal-width edges, in `dtype`, over [left, right] or, without a range, over the extent of the
// 1-d `x`: widened by 0.5 each way when its min and max are equal, and [0, 1] when it is empty.
// Without a range, CPU refuses data whose extent is not finite, naming the dim (`dim`).
Value equal_width_edges(LoweringContext& ctx, Value x, DType dtype, const double* range, int64_t bins, int64_t dim) {
  Graph& g = ctx.graph;
  const int64_t n = g.type(x).dims[0];
  Value left, right;
  if (range != nullptr) {
    left = g.constant(range[0], DType::kF64);
    right = g.constant(range[1], DType::kF64);
  } else if (n == 0) {
    left = g.constant(0.0, DType::kF64);
    right = g.constant(1.0, DType::kF64);
  } else {
    const double inf = std::numeric_limits<double>::infinity();
    const DType x_dtype = g.type(x).dtype;
    left = g.convert(g.reduce(x, g.constant(inf, x_dtype), {0}, Reducer::kMin), DType::kF64);
    right = g.convert(g.reduce(x, g.constant(-inf, x_dtype), {0}, Reducer::kMax), DType::kF64);
    check_finite_data_range(ctx, x, left, right, CheckKind::kHistogramRange, {dim}, false);
    Value equal = g.compare(left, right, Comparison::kEQ);
    left = g.select(equal, g.binary("subtract", left, g.constant(0.5, DType::kF64)), left);
    right = g.select(equal, g.binary("add", right, g.constant(0.5, DType::kF64)), right);
  }
  return g.convert(symmetric_ramp(g, {bins + 1}, left, right, bins + 1), dtype);
}

// histogram.bin_ct(self, bins, *, range?, weight?, density) -> (hist, bin_edges)
std::vector<Value> lower_histogram_bin_count(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = flattened(ctx, 0);
  const double* range = ctx.is_none(2) ? nullptr : ctx.reals(2).data();
  Value edges = equal_width_edges(ctx, x, ctx.outputs.at(1).dtype, range, ctx.integer(1), 0);
  return {histogram(g, g.reshape(x, {g.type(x).dims[0], 1}), {edges}, flattened(ctx, 3), ctx.boolean(4)), edges};
}

// histogram.bins_tensor(self, bins, *, weight?, density) -> (hist, bin_edges): `bins` holds the edges.
std::vector<Value> lower_histogram_bin_edges(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value edges = g.convert(ctx.tensor(1), ctx.outputs.at(1).dtype);
  Value x = flattened(ctx, 0);
  return {histogram(g, g.reshape(x, {g.type(x).dims[0], 1}), {edges}, flattened(ctx, 2), ctx.boolean(3)), edges};
}

// histogramdd's input [..., d] as rows of d coordinates, [n, d].
Value points(LoweringContext& ctx) {
  const Type& t = ctx.type_of(0);
  const int64_t d = t.dims.back();
  return ctx.graph.reshape(ctx.tensor(0), {d == 0 ? 0 : t.numel() / d, d});
}

// The equal-width edges of each of the d dims of histogramdd(self, bins: int[], range?: 2d floats).
std::vector<Value> dd_edges(LoweringContext& ctx, DType dtype) {
  Graph& g = ctx.graph;
  Value x = points(ctx);
  const int64_t n = g.type(x).dims[0];
  const std::vector<int64_t>& bins = ctx.ints(1);
  std::vector<Value> edges;
  for (size_t j = 0; j < bins.size(); ++j) {
    const int64_t column = static_cast<int64_t>(j);
    Value coordinate = g.reshape(g.slice(x, {0, column}, {n, column + 1}, {1, 1}), {n});
    const double* range = ctx.is_none(2) ? nullptr : ctx.reals(2).data() + 2 * j;
    edges.push_back(equal_width_edges(ctx, coordinate, dtype, range, bins[j], column));
  }
  return edges;
}

// _histogramdd_bin_edges(self, bins, *, range?, weight?, density) -> Tensor[]
std::vector<Value> lower_histogramdd_bin_edges(LoweringContext& ctx) { return dd_edges(ctx, ctx.outputs.at(0).dtype); }

// _histogramdd_from_bin_cts(self, bins, *, range?, weight?, density)
std::vector<Value> lower_histogramdd_from_bin_counts(LoweringContext& ctx) {
  return {histogram(ctx.graph, points(ctx), dd_edges(ctx, ctx.outputs.at(0).dtype), flattened(ctx, 3),
                    ctx.boolean(4))};
}

// _histogramdd_from_bin_tensors(self, bins: Tensor[], *, weight?, density): `bins` hold each dim's edges.
std::vector<Value> lower_histogramdd_from_bin_tensors(LoweringContext& ctx) {
  std::vector<Value> edges;
  for (Value e : ctx.args.at(1).tensors) edges.push_back(ctx.graph.convert(e, ctx.outputs.at(0).dtype));
  return {histogram(ctx.graph, points(ctx), edges, flattened(ctx, 2), ctx.boolean(3))};
}

}  // namespace

void add_histogram_rules(std::vector<Rule>& table) {
  table.push_back({"aten::histogram.bin_ct", &lower_histogram_bin_count});
  table.push_back({"aten::histogram.bins_tensor", &lower_histogram_bin_edges});
  table.push_back({"aten::_histogramdd_bin_edges", &lower_histogramdd_bin_edges});
  table.push_back({"aten::_histogramdd_from_bin_cts", &lower_histogramdd_from_bin_counts});
  table.push_back({"aten::_histogramdd_from_bin_tensors", &lower_histogramdd_from_bin_tensors});
}

}  // namespace torchtpu::lowering
