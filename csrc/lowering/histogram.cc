// Histograms over the flattened input: histogram.bin_ct (equal-width bins over a range or the data's
// extent) and histogram.bins_tensor (given edges). Output shapes are static; the bin edges of bin_ct may
// depend on the data, which the device computes like any other value.
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

// Counts (or sums `weight`, when valid) of the 1-d `x` in the bins of the 1-d `edges`, both of x's dtype;
// with `density`, each count is divided by the total and its bin's width.
Value bin_counts(Graph& g, Value x, Value edges, Value weight, bool density) {
  const DType dtype = g.type(x).dtype;
  const DType accumulate = accumulation_dtype(dtype);
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
  // Elements outside the edges go to row `bins`, which the scatter drops.
  bin = g.select(inside, bin, g.constant_int(bins, DType::kI64, {n}));
  Value amount = weight.valid() ? g.convert(weight, accumulate) : g.constant(1.0, accumulate, {n});
  Value hist = scatter_add_rows(g, g.constant(0.0, accumulate, {bins}), g.reshape(bin, {n, 1}), amount);
  if (density) {
    Value total = g.reduce(hist, g.constant(0.0, accumulate), {0}, Reducer::kAdd);
    Value edges_wide = g.convert(edges, accumulate);
    Value widths =
        g.binary("subtract", g.slice(edges_wide, {1}, {edge_count}, {1}), g.slice(edges_wide, {0}, {bins}, {1}));
    hist = g.binary("divide", hist, g.binary("multiply", broadcast_to(g, total, {bins}), widths));
  }
  return g.convert(hist, dtype);
}

Value flattened(LoweringContext& ctx, size_t i) {
  if (ctx.is_none(i)) return Value{};
  return ctx.graph.reshape(ctx.tensor(i), {ctx.type_of(i).numel()});
}

// histogram.bin_ct(self, bins, *, range?, weight?, density) -> (hist, bin_edges). Without a range the edges
// span the data's min and max, widened by 0.5 each way when those are equal, and [0, 1] for empty input.
std::vector<Value> lower_histogram_bin_count(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& edges_type = ctx.outputs.at(1);
  const DType dtype = edges_type.dtype;
  const int64_t bins = ctx.integer(1);
  Value x = flattened(ctx, 0);
  const int64_t n = g.type(x).dims[0];
  Value left, right;
  if (!ctx.is_none(2)) {
    left = g.constant(ctx.reals(2).at(0), DType::kF64);
    right = g.constant(ctx.reals(2).at(1), DType::kF64);
  } else if (n == 0) {
    left = g.constant(0.0, DType::kF64);
    right = g.constant(1.0, DType::kF64);
  } else {
    const double inf = std::numeric_limits<double>::infinity();
    left = g.convert(g.reduce(x, g.constant(inf, dtype), {0}, Reducer::kMin), DType::kF64);
    right = g.convert(g.reduce(x, g.constant(-inf, dtype), {0}, Reducer::kMax), DType::kF64);
    Value equal = g.compare(left, right, Comparison::kEQ);
    left = g.select(equal, g.binary("subtract", left, g.constant(0.5, DType::kF64)), left);
    right = g.select(equal, g.binary("add", right, g.constant(0.5, DType::kF64)), right);
  }
  Value edges = g.convert(symmetric_ramp(g, edges_type.dims, left, right, bins + 1), dtype);
  return {bin_counts(g, x, edges, flattened(ctx, 3), ctx.boolean(4)), edges};
}

// histogram.bins_tensor(self, bins, *, weight?, density) -> (hist, bin_edges): `bins` holds the edges.
std::vector<Value> lower_histogram_bin_edges(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value edges = g.convert(ctx.tensor(1), ctx.outputs.at(1).dtype);
  return {bin_counts(g, flattened(ctx, 0), edges, flattened(ctx, 2), ctx.boolean(3)), edges};
}

}  // namespace

void add_histogram_rules(std::vector<Rule>& table) {
  table.push_back({"aten::histogram.bin_ct", &lower_histogram_bin_count});
  table.push_back({"aten::histogram.bins_tensor", &lower_histogram_bin_edges});
}

}  // namespace torchtpu::lowering
