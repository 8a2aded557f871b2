// Integer indexing: index_select, gather, the scatter family, advanced indexing (index / index_put),
// index_add, index_copy, index_fill, index_reduce, flat take / put, and one_hot.
//
// All of them but one_hot (a compare against an iota) become one StableHLO gather or scatter. Negative
// indices wrap as in PyTorch's index, index_put, index_fill, take and put. Every op states CPU's bounds check as a device-side value check
// (docs/value_checks.md), which also rejects the negative indices CPU rejects (gather, scatter,
// index_select, index_add, index_copy, index_reduce). With checks off, an out-of-range index is not
// reported: XLA clamps a gather's start indices and drops out-of-bounds scatter updates.
//
// Boolean (mask) indices have a data-dependent result shape and cannot be one static program: reading
// x[mask], and writing x[mask] = v with one value per selected element, go through aten/data_dependent.cc
// first (the device counts, the host reads the count, the mask becomes indices). Writing x[mask] = v is
// static when v does not depend on the number of selected elements, and becomes a select here.
#include <algorithm>
#include <functional>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;

const Type& out(const LoweringContext& ctx) { return ctx.outputs.at(0); }

// "name = [..], " or nothing: the attribute parser is happiest without empty lists.
std::string field(const char* name, const std::vector<int64_t>& values) {
  return values.empty() ? "" : std::string(name) + " = " + ir::bracket_list(values) + ", ";
}

// Index values as int64 with negative entries wrapped by `size`.
Value wrap_index(Graph& g, Value index, int64_t size) {
  const DType dtype = g.type(index).dtype;
  if (dtype == DType::kBool || dtype == DType::kU8) {
    throw std::invalid_argument("boolean mask indices have a data-dependent shape and are not supported on tpu; "
                                "use integer indices (mask.nonzero()) or torch.where");
  }
  if (is_floating(dtype)) throw std::invalid_argument("indices must be integers");
  Value i = g.convert(index, DType::kI64);
  const std::vector<int64_t> dims = g.type(i).dims;
  Value negative = g.compare(i, g.constant_int(0, DType::kI64, dims), Comparison::kLT);
  return g.select(negative, g.binary("add", i, g.constant_int(size, DType::kI64, dims)), i);
}

// States CPU's bounds check of integer `index` against a dim of `size`: indices must lie in [0, size), or
// in [-size, size) for the ops that wrap negative ones. `facts` complete CPU's message for `kind`.
void check_bounds(LoweringContext& ctx, Value index, int64_t size, bool wraps, CheckKind kind,
                  std::vector<int64_t> facts) {
  ctx.check(kind, outside_range(ctx.graph, index, wraps ? -size : 0, size), index, std::move(facts));
}

// stablehlo.gather; the caller supplies the dimension numbers and the result dims they imply.
Value gather(Graph& g, Value operand, Value indices, const std::vector<int64_t>& offset_dims,
             const std::vector<int64_t>& collapsed, int64_t index_vector_dim,
             const std::vector<int64_t>& slice_sizes, const std::vector<int64_t>& result_dims) {
  const std::string attributes = "dimension_numbers = #stablehlo.gather<" + field("offset_dims", offset_dims) +
                                 field("collapsed_slice_dims", collapsed) + field("start_index_map", collapsed) +
                                 "index_vector_dim = " + std::to_string(index_vector_dim) +
                                 ">, slice_sizes = " + ir::dense_i64_array(slice_sizes) +
                                 ", indices_are_sorted = false";
  return g.op("gather", {operand, indices}, Type{g.type(operand).dtype, result_dims}, attributes);
}

// How a scatter combines the current element with an update.
enum class Combine { kReplace, kAdd, kMul, kMax, kMin };

// max and min propagate NaN, as CPU's scatter_reduce and index_reduce do.
std::string combiner_region(Combine combine, DType dtype) {
  const bool is_bool = dtype == DType::kBool;
  switch (combine) {
    case Combine::kAdd: return ir::scalar_region(is_bool ? "stablehlo.or" : "stablehlo.add", dtype);
    case Combine::kMul: return ir::scalar_region(is_bool ? "stablehlo.and" : "stablehlo.multiply", dtype);
    case Combine::kMax: return ir::reducer_region(ir::Reducer::kMaxNaN, dtype);
    case Combine::kMin: return ir::reducer_region(ir::Reducer::kMinNaN, dtype);
    case Combine::kReplace: break;
  }
  const std::string t = ir::to_mlir(Type{dtype, {}});
  return ir::region_text({{"%old", dtype}, {"%new", dtype}}, "      \"stablehlo.return\"(%new) : (" + t + ") -> ()");
}

// stablehlo.scatter of `updates` (converted to the operand's dtype) into `operand`.
Value scatter(Graph& g, Value operand, Value indices, Value updates, const std::vector<int64_t>& update_window_dims,
              const std::vector<int64_t>& inserted, int64_t index_vector_dim, Combine combine) {
  const DType dtype = g.type(operand).dtype;
  const std::string attributes = "scatter_dimension_numbers = #stablehlo.scatter<" +
                                 field("update_window_dims", update_window_dims) +
                                 field("inserted_window_dims", inserted) +
                                 field("scatter_dims_to_operand_dims", inserted) +
                                 "index_vector_dim = " + std::to_string(index_vector_dim) +
                                 ">, indices_are_sorted = false, unique_indices = false";
  return g.op_multi("stablehlo.scatter", {operand, indices, g.convert(updates, dtype)}, {g.type(operand)},
                    attributes, combiner_region(combine, dtype))[0];
}

// ---- Along one dim with a 1-d index: index_select, index_add, index_copy, index_fill -------------------

// `index` (0-d or 1-d) as wrapped int64 indices shaped [k, 1].
Value dim_indices(Graph& g, Value index, int64_t size) {
  Value wrapped = wrap_index(g, index, size);
  return g.reshape(wrapped, {g.type(wrapped).numel(), 1});
}

// Rank-0 operands behave as 1-element vectors along dim 0.
Value at_least_1d(Graph& g, Value x) { return g.type(x).rank() == 0 ? g.reshape(x, {1}) : x; }

// index_select(self, dim, index): whole slices of self along `dim`, one per index.
std::vector<Value> lower_index_select(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = at_least_1d(g, ctx.tensor(0));
  const Type t = g.type(self);
  const int64_t dim = wrap_dim(ctx.integer(1), t.rank());
  const int64_t size = t.dims[static_cast<size_t>(dim)];
  Value indices = dim_indices(g, ctx.tensor(2), size);
  check_bounds(ctx, ctx.tensor(2), size, false, CheckKind::kIndexOutOfRange, {dim, size});
  std::vector<int64_t> slice_sizes = t.dims, result_dims = t.dims, offset_dims = dim_range(0, t.rank());
  slice_sizes[static_cast<size_t>(dim)] = 1;
  result_dims[static_cast<size_t>(dim)] = g.type(indices).dims[0];
  offset_dims.erase(offset_dims.begin() + dim);
  // Nothing to gather from an empty dim (every index fails the check above; StableHLO rejects the slice).
  if (out(ctx).numel() == 0 || size == 0) return {g.constant_int(0, t.dtype, out(ctx).dims)};
  Value result = gather(g, self, indices, offset_dims, {dim}, 1, slice_sizes, result_dims);
  return {g.reshape(result, out(ctx).dims)};
}

// index_add, index_copy, index_fill and index_reduce state CPU's check of their index against self's `dim`.
void check_dim_index(LoweringContext& ctx, Value self, int64_t dim, bool wraps, CheckKind kind) {
  const int64_t size = ctx.graph.type(self).dims[static_cast<size_t>(dim)];
  check_bounds(ctx, ctx.tensor(2), size, wraps, kind, {dim, size});
}

// Scatters whole slices `updates` (self's shape with `dim` of size k) into self along `dim`.
Value scatter_slices(Graph& g, Value self, int64_t dim, Value index, Value updates, Combine combine) {
  const Type t = g.type(self);
  Value indices = dim_indices(g, index, t.dims[static_cast<size_t>(dim)]);
  std::vector<int64_t> window = dim_range(0, t.rank());
  window.erase(window.begin() + dim);
  std::vector<int64_t> update_dims = t.dims;
  update_dims[static_cast<size_t>(dim)] = g.type(indices).dims[0];
  if (g.type(indices).dims[0] == 0) return self;
  return scatter(g, self, indices, g.reshape(updates, update_dims), window, {dim}, 1, combine);
}

// index_add(self, dim, index, source, alpha)
std::vector<Value> lower_index_add(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = at_least_1d(g, ctx.tensor(0));
  const DType dtype = g.type(self).dtype;
  Value source = g.convert(at_least_1d(g, ctx.tensor(3)), dtype);
  if (!ctx.is_none(4) && ctx.real(4) != 1.0) {
    source = g.binary("multiply", source, ctx.scalar(4, dtype, g.type(source).dims));
  }
  const int64_t dim = wrap_dim(ctx.integer(1), g.type(self).rank());
  check_dim_index(ctx, self, dim, false, CheckKind::kIndexBounds);
  return {g.reshape(scatter_slices(g, self, dim, ctx.tensor(2), source, Combine::kAdd), out(ctx).dims)};
}

// index_copy(self, dim, index, source)
std::vector<Value> lower_index_copy(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = at_least_1d(g, ctx.tensor(0));
  const int64_t dim = wrap_dim(ctx.integer(1), g.type(self).rank());
  check_dim_index(ctx, self, dim, false, CheckKind::kIndexBounds);
  Value result = scatter_slices(g, self, dim, ctx.tensor(2), at_least_1d(g, ctx.tensor(3)), Combine::kReplace);
  return {g.reshape(result, out(ctx).dims)};
}

// index_fill.int_Scalar / int_Tensor(self, dim, index, value)
std::vector<Value> index_fill(LoweringContext& ctx, bool value_is_tensor) {
  Graph& g = ctx.graph;
  Value self = at_least_1d(g, ctx.tensor(0));
  const Type t = g.type(self);
  const int64_t dim = wrap_dim(ctx.integer(1), t.rank());
  std::vector<int64_t> dims = t.dims;
  dims[static_cast<size_t>(dim)] = g.type(ctx.tensor(2)).numel();
  Value value = value_is_tensor ? cast_to(g, ctx.tensor(3), Type{t.dtype, dims})
                                : ctx.scalar(3, t.dtype, dims);
  // CPU checks an index as it fills the slice it selects, so with empty slices (another dim of size 0)
  // nothing is checked.
  int64_t slice_numel = 1;
  for (size_t d = 0; d < t.dims.size(); ++d) slice_numel *= static_cast<int64_t>(d) == dim ? 1 : t.dims[d];
  if (slice_numel > 0) check_dim_index(ctx, self, dim, true, CheckKind::kIndexBounds);
  return {g.reshape(scatter_slices(g, self, dim, ctx.tensor(2), value, Combine::kReplace), out(ctx).dims)};
}
std::vector<Value> lower_index_fill_scalar(LoweringContext& ctx) { return index_fill(ctx, false); }
std::vector<Value> lower_index_fill_tensor(LoweringContext& ctx) { return index_fill(ctx, true); }

// ---- Elementwise along one dim: gather and the scatter family -------------------------------------------

// For an index tensor shaped like self (same rank): the full coordinates [index dims..., rank] of each
// element, with `dim` taken from the index and every other dim from the element's own position.
Value point_indices(Graph& g, Value index, int64_t dim, int64_t size) {
  Value wrapped = wrap_index(g, index, size);
  const std::vector<int64_t> dims = g.type(wrapped).dims;
  std::vector<int64_t> column = dims;
  column.push_back(1);
  std::vector<Value> parts;
  for (int64_t d = 0; d < static_cast<int64_t>(dims.size()); ++d) {
    Value coordinate = d == dim ? wrapped : g.iota(Type{DType::kI64, dims}, d);
    parts.push_back(g.reshape(coordinate, column));
  }
  return g.concatenate(parts, static_cast<int64_t>(dims.size()));
}

// gather(self, dim, index, sparse_grad): out[i][j][k] = self[i][index[i][j][k]][k] (for dim 1).
std::vector<Value> lower_gather(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = at_least_1d(g, ctx.tensor(0));
  Value index = at_least_1d(g, ctx.tensor(2));
  const Type t = g.type(self);
  const int64_t dim = wrap_dim(ctx.integer(1), t.rank());
  if (out(ctx).numel() == 0) return {g.constant_int(0, t.dtype, out(ctx).dims)};
  const std::vector<int64_t> index_dims = g.type(index).dims;
  const int64_t size = t.dims[static_cast<size_t>(dim)];
  Value points = point_indices(g, index, dim, size);
  check_bounds(ctx, index, size, false, CheckKind::kIndexBounds, {dim, size});
  const std::vector<int64_t> all = dim_range(0, t.rank());
  Value result = gather(g, self, points, {}, all, t.rank(), std::vector<int64_t>(all.size(), 1), index_dims);
  return {g.reshape(result, out(ctx).dims)};
}

// Elementwise scatter of `updates` (sliced to the index's shape, as PyTorch reads only that much of src).
Value scatter_points(Graph& g, Value self, int64_t dim, Value index, Value updates, Combine combine) {
  const Type t = g.type(self);
  const std::vector<int64_t> index_dims = g.type(index).dims;
  if (g.type(index).numel() == 0) return self;
  const Type& u = g.type(updates);
  if (u.dims != index_dims) {
    updates = g.slice(updates, std::vector<int64_t>(index_dims.size(), 0), index_dims,
                      std::vector<int64_t>(index_dims.size(), 1));
  }
  Value points = point_indices(g, index, dim, t.dims[static_cast<size_t>(dim)]);
  return scatter(g, self, points, updates, {}, dim_range(0, t.rank()), t.rank(), combine);
}

Combine combine_of(const std::string& reduce) {
  if (reduce == "add" || reduce == "sum" || reduce == "mean") return Combine::kAdd;
  if (reduce == "multiply" || reduce == "prod") return Combine::kMul;
  if (reduce == "amax") return Combine::kMax;
  if (reduce == "amin") return Combine::kMin;
  throw std::invalid_argument("unknown scatter reduction '" + reduce + "'");
}

// Arguments (self, dim, index, src or value, ...): src as a tensor, or a Scalar value broadcast to the
// index's shape.
struct ScatterArgs {
  Value self;
  int64_t dim;
  Value index;
  Value updates;
};

ScatterArgs scatter_args(LoweringContext& ctx, bool value_is_scalar) {
  Graph& g = ctx.graph;
  ScatterArgs a;
  a.self = at_least_1d(g, ctx.tensor(0));
  a.dim = wrap_dim(ctx.integer(1), g.type(a.self).rank());
  a.index = at_least_1d(g, ctx.tensor(2));
  const DType dtype = g.type(a.self).dtype;
  a.updates = value_is_scalar ? ctx.scalar(3, dtype, g.type(a.index).dims)
                              : g.convert(at_least_1d(g, ctx.tensor(3)), dtype);
  const int64_t size = g.type(a.self).dims[static_cast<size_t>(a.dim)];
  check_bounds(ctx, a.index, size, false, CheckKind::kIndexBounds, {a.dim, size});
  return a;
}

std::vector<Value> scatter_op(LoweringContext& ctx, bool value_is_scalar, Combine combine) {
  ScatterArgs a = scatter_args(ctx, value_is_scalar);
  Value result = scatter_points(ctx.graph, a.self, a.dim, a.index, a.updates, combine);
  return {ctx.graph.reshape(result, out(ctx).dims)};
}

std::vector<Value> lower_scatter_src(LoweringContext& ctx) { return scatter_op(ctx, false, Combine::kReplace); }
std::vector<Value> lower_scatter_value(LoweringContext& ctx) { return scatter_op(ctx, true, Combine::kReplace); }
std::vector<Value> lower_scatter_add(LoweringContext& ctx) { return scatter_op(ctx, false, Combine::kAdd); }
// scatter.reduce / scatter.value_reduce(self, dim, index, src|value, reduce: "add" | "multiply")
std::vector<Value> lower_scatter_reduce(LoweringContext& ctx) {
  return scatter_op(ctx, false, combine_of(ctx.text(4)));
}
std::vector<Value> lower_scatter_value_reduce(LoweringContext& ctx) {
  return scatter_op(ctx, true, combine_of(ctx.text(4)));
}

// Identity of a reduction: the value that leaves any element unchanged when combined with it.
Value identity(Graph& g, Combine combine, DType dtype, const std::vector<int64_t>& dims) {
  if (combine == Combine::kAdd) return g.constant_int(0, dtype, dims);
  if (combine == Combine::kMul) return g.constant_int(1, dtype, dims);
  return extreme(g, dtype, combine == Combine::kMax, dims);
}

// a / b rounded toward negative infinity, for integers (StableHLO's divide truncates).
Value floor_divide(Graph& g, Value a, Value b) {
  const std::vector<int64_t> dims = g.type(a).dims;
  Value q = g.binary("divide", a, b);
  Value r = g.binary("remainder", a, b);
  Value zero = g.constant_int(0, g.type(a).dtype, dims);
  Value signs_differ = g.compare(g.compare(r, zero, Comparison::kLT), g.compare(b, zero, Comparison::kLT),
                                 Comparison::kNE);
  Value adjust = g.binary("and", g.compare(r, zero, Comparison::kNE), signs_differ);
  return g.select(adjust, g.binary("subtract", q, g.constant_int(1, g.type(a).dtype, dims)), q);
}

// The scatter of one op: writes `updates` into `base` at the op's positions, combining with `combine`.
using Scatter = std::function<Value(Value base, Value updates, Combine combine)>;

// scatter_reduce's rules for `reduce` applied through `scatter`. Without include_self, every element that
// receives an update starts from the reduction's identity instead of its own value; "mean" divides the sum
// by the number of contributions (floor division for integers, as PyTorch does).
Value reduce_into(Graph& g, Value self, Value updates, const std::string& reduce, bool include_self,
                  const Scatter& scatter) {
  const Type t = g.type(self);
  const std::vector<int64_t> update_dims = g.type(updates).dims;
  const Combine combine = combine_of(reduce);
  Value base = self;
  if (!include_self) {
    Value touched = scatter(g.constant_int(0, DType::kBool, t.dims), g.constant_int(1, DType::kBool, update_dims),
                            Combine::kReplace);
    base = g.select(touched, identity(g, combine, t.dtype, t.dims), self);
  }
  Value result = scatter(base, updates, combine);
  if (reduce == "mean") {
    Value count = scatter(g.constant_int(include_self ? 1 : 0, t.dtype, t.dims),
                          g.constant_int(1, t.dtype, update_dims), Combine::kAdd);
    Value zero = g.constant_int(0, t.dtype, t.dims);
    count = g.select(g.compare(count, zero, Comparison::kEQ), g.constant_int(1, t.dtype, t.dims), count);
    result = is_floating(t.dtype) ? g.binary("divide", result, count) : floor_divide(g, result, count);
  }
  return result;
}

// scatter_reduce.two(self, dim, index, src, reduce, include_self)
std::vector<Value> lower_scatter_reduce_two(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  ScatterArgs a = scatter_args(ctx, false);
  Value result = reduce_into(g, a.self, a.updates, ctx.text(4), ctx.is_none(5) || ctx.boolean(5),
                             [&](Value base, Value updates, Combine combine) {
                               return scatter_points(g, base, a.dim, a.index, updates, combine);
                             });
  return {g.reshape(result, out(ctx).dims)};
}

// index_reduce(self, dim, index, source, reduce, include_self): scatter_reduce.two's rules ("prod",
// "mean", "amax", "amin") applied to whole slices along `dim`, as index_add applies "sum".
std::vector<Value> lower_index_reduce(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = at_least_1d(g, ctx.tensor(0));
  const Type t = g.type(self);
  const int64_t dim = wrap_dim(ctx.integer(1), t.rank());
  Value index = ctx.tensor(2);
  Value source = g.convert(at_least_1d(g, ctx.tensor(3)), t.dtype);
  const std::string& reduce = ctx.text(4);
  if (reduce != "prod" && reduce != "mean" && reduce != "amax" && reduce != "amin") {
    // The meta kernel accepts any string; CPU's kernel raises this.
    throw std::invalid_argument("index_reduce(): Expected reduce to be one of prod, mean, amax or amin but got " +
                                reduce + ".");
  }
  check_dim_index(ctx, self, dim, false, CheckKind::kIndexOutOfRange);
  Value result = reduce_into(g, self, source, reduce, ctx.is_none(5) || ctx.boolean(5),
                             [&](Value base, Value updates, Combine combine) {
                               return scatter_slices(g, base, dim, index, updates, combine);
                             });
  return {g.reshape(result, out(ctx).dims)};
}

// ---- Flat indexing: take and put ------------------------------------------------------------------------

// take(self, index): self.flatten()[index], shaped like index.
std::vector<Value> lower_take(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type t = ctx.type_of(0);
  if (out(ctx).numel() == 0) return {g.constant_int(0, t.dtype, out(ctx).dims)};
  Value flat = g.reshape(ctx.tensor(0), {t.numel()});
  Value indices = dim_indices(g, ctx.tensor(1), t.numel());
  check_bounds(ctx, ctx.tensor(1), t.numel(), true, CheckKind::kFlatIndex, {t.numel()});
  return {g.reshape(gather(g, flat, indices, {}, {0}, 1, {1}, {g.type(indices).dims[0]}), out(ctx).dims)};
}

// put(self, index, source, accumulate): source's elements written (or added) at self.flatten()[index].
std::vector<Value> lower_put(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type t = ctx.type_of(0);
  const int64_t count = ctx.type_of(1).numel();
  if (count == 0) return {ctx.tensor(0)};
  Value flat = g.reshape(ctx.tensor(0), {t.numel()});
  Value indices = dim_indices(g, ctx.tensor(1), t.numel());
  check_bounds(ctx, ctx.tensor(1), t.numel(), true, CheckKind::kFlatIndex, {t.numel()});
  Value updates = g.reshape(g.convert(ctx.tensor(2), t.dtype), {count});
  const Combine combine = ctx.boolean(3) ? Combine::kAdd : Combine::kReplace;
  return {g.reshape(scatter(g, flat, indices, updates, {}, {0}, 1, combine), t.dims)};
}

// ---- one_hot --------------------------------------------------------------------------------------------

// one_hot(self, num_classes): int64 [..., num_classes], 1 where the position in the last dim is self's class.
// aten/one_hot.cc has fixed num_classes (never -1 here).
std::vector<Value> lower_one_hot(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& result = out(ctx);
  Value self = ctx.tensor(0);
  const std::vector<int64_t> dims = g.type(self).dims;
  // CPU's checks in CPU's order: a negative class anywhere is reported before one that is too large. With
  // 0 classes the result is empty, but a class still fails.
  ctx.check(CheckKind::kClassNegative, g.compare(self, g.constant_int(0, DType::kI64, dims), Comparison::kLT));
  ctx.check(CheckKind::kClassTooLarge, g.compare(self, g.constant_int(ctx.integer(1), DType::kI64, dims), Comparison::kGE));
  if (result.numel() == 0) return {g.constant_int(0, DType::kI64, result.dims)};
  const auto rank = static_cast<int64_t>(dims.size());
  Value positions = g.iota(Type{DType::kI64, result.dims}, rank);
  Value classes = g.broadcast_in_dim(self, result.dims, dim_range(0, rank));
  return {g.convert(g.compare(positions, classes, Comparison::kEQ), DType::kI64)};
}

// ---- Advanced indexing: index.Tensor and index_put ------------------------------------------------------

// self[indices] where `indices` holds an index tensor or None per leading dim. The indexed dims are moved
// to the front of self (`permutation`) so one gather/scatter with [B..., k] coordinates serves: B is the
// index tensors' broadcast shape, k their count.
struct AdvancedIndex {
  std::vector<int64_t> indexed;      // dims of self with an index tensor, ascending
  std::vector<int64_t> rest;         // the other dims, ascending
  std::vector<int64_t> permutation;  // indexed then rest
  std::vector<int64_t> batch;        // B
  Value points;                      // [B..., k] int64, wrapped
  // PyTorch puts B where the indexed dims were when they are adjacent, else in front.
  bool adjacent = false;
};

std::vector<int64_t> broadcast_shape(const std::vector<std::vector<int64_t>>& shapes) {
  size_t rank = 0;
  for (const auto& s : shapes) rank = std::max(rank, s.size());
  std::vector<int64_t> result(rank, 1);
  for (const auto& s : shapes) {
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t& r = result[rank - s.size() + i];
      if (s[i] != 1) r = s[i];
    }
  }
  return result;
}

AdvancedIndex advanced_index(Graph& g, const Type& self, const std::vector<Value>& indices) {
  AdvancedIndex a;
  std::vector<std::vector<int64_t>> shapes;
  for (size_t d = 0; d < indices.size(); ++d) {
    if (!indices[d].valid()) continue;
    a.indexed.push_back(static_cast<int64_t>(d));
    shapes.push_back(g.type(indices[d]).dims);
  }
  if (a.indexed.empty()) throw std::invalid_argument("index: at least one index tensor is required");
  for (int64_t d = 0; d < self.rank(); ++d) {
    if (std::find(a.indexed.begin(), a.indexed.end(), d) == a.indexed.end()) a.rest.push_back(d);
  }
  a.permutation = a.indexed;
  a.permutation.insert(a.permutation.end(), a.rest.begin(), a.rest.end());
  a.batch = broadcast_shape(shapes);
  a.adjacent = a.indexed.back() - a.indexed.front() + 1 == static_cast<int64_t>(a.indexed.size());
  std::vector<int64_t> column = a.batch;
  column.push_back(1);
  std::vector<Value> parts;
  for (int64_t d : a.indexed) {
    Value wrapped = wrap_index(g, indices[static_cast<size_t>(d)], self.dims[static_cast<size_t>(d)]);
    parts.push_back(g.reshape(broadcast_to(g, wrapped, a.batch), column));
  }
  a.points = g.concatenate(parts, static_cast<int64_t>(a.batch.size()));
  return a;
}

// index and index_put state CPU's check of each index tensor against the dim it indexes. CPU's message
// numbers the index tensors, not self's dims ("dimension 0" for x[:, i]).
void check_advanced_index(LoweringContext& ctx, const Type& self, const std::vector<Value>& indices) {
  int64_t k = 0;
  for (size_t d = 0; d < indices.size(); ++d) {
    if (!indices[d].valid()) continue;
    check_bounds(ctx, indices[d], self.dims[d], true, CheckKind::kIndexBounds, {k++, self.dims[d]});
  }
}

// The permutation from the gather's [B..., rest...] layout to PyTorch's result layout.
std::vector<int64_t> result_order(const AdvancedIndex& a) {
  const int64_t nb = static_cast<int64_t>(a.batch.size());
  const int64_t nr = static_cast<int64_t>(a.rest.size());
  if (!a.adjacent) return dim_range(0, nb + nr);
  const int64_t before = a.indexed.front();  // rest dims that precede the indexed block
  std::vector<int64_t> order = dim_range(nb, nb + before);
  for (int64_t i = 0; i < nb; ++i) order.push_back(i);
  for (int64_t i = nb + before; i < nb + nr; ++i) order.push_back(i);
  return order;
}

// CPU's check, before any element is read, that the (broadcast, non-empty) indices index no dim of size 0. It
// holds for an empty result too, where the device-side check has no element to test.
void check_no_index_into_empty_dim(const Type& self, const AdvancedIndex& a) {
  int64_t points = 1;
  for (int64_t d : a.batch) points *= d;
  for (int64_t d : a.indexed) {
    if (self.dims[static_cast<size_t>(d)] == 0 && points > 0) {
      throw std::invalid_argument("index is out of bounds for dimension with size 0");
    }
  }
}

// index.Tensor(self, Tensor?[] indices)
std::vector<Value> lower_index(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = ctx.tensor(0);
  const Type t = g.type(self);
  const AdvancedIndex a = advanced_index(g, t, ctx.args.at(1).tensors);
  check_no_index_into_empty_dim(t, a);
  if (out(ctx).numel() == 0) return {g.constant_int(0, t.dtype, out(ctx).dims)};
  check_advanced_index(ctx, t, ctx.args.at(1).tensors);
  const int64_t k = static_cast<int64_t>(a.indexed.size());
  const int64_t nb = static_cast<int64_t>(a.batch.size());
  Value moved = g.transpose(self, a.permutation);
  std::vector<int64_t> slice_sizes(static_cast<size_t>(k), 1), result_dims = a.batch;
  for (int64_t d : a.rest) {
    slice_sizes.push_back(t.dims[static_cast<size_t>(d)]);
    result_dims.push_back(t.dims[static_cast<size_t>(d)]);
  }
  Value gathered = gather(g, moved, a.points, dim_range(nb, nb + static_cast<int64_t>(a.rest.size())), dim_range(0, k), nb,
                          slice_sizes, result_dims);
  return {g.reshape(g.transpose(gathered, result_order(a)), out(ctx).dims)};
}

bool is_mask(Graph& g, Value index) {
  return index.valid() && (g.type(index).dtype == DType::kBool || g.type(index).dtype == DType::kU8);
}

// self[mask] = values with one boolean mask covering dims [d, d + mask rank): static when `values` does
// not depend on how many elements are selected (its dim facing the selection is absent or 1), which is
// what `x[mask] = 0` and `x[mask] += v` produce. Then it is a select over self. Returns an invalid Value
// when the call is not of that form.
Value masked_put(Graph& g, Value self, const std::vector<Value>& indices, Value values, bool accumulate) {
  int64_t d = -1;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (!indices[i].valid()) continue;
    if (d >= 0 || !is_mask(g, indices[i])) return Value{};
    d = static_cast<int64_t>(i);
  }
  const Type t = g.type(self);
  const std::vector<int64_t>& mask_dims = g.type(indices[static_cast<size_t>(d)]).dims;
  const int64_t m = static_cast<int64_t>(mask_dims.size());
  if (m == 0) return Value{};
  // self[mask] is rest_before + [count] + rest_after: the rank values broadcast against.
  const int64_t rank = t.rank() - m + 1;
  std::vector<int64_t> v = g.type(values).dims;
  if (static_cast<int64_t>(v.size()) > rank) return Value{};
  v.insert(v.begin(), static_cast<size_t>(rank) - v.size(), 1);
  if (v[static_cast<size_t>(d)] != 1) return Value{};
  // values without the count dim, with 1s over the mask's dims, broadcast over self.
  std::vector<int64_t> spread(v.begin(), v.begin() + d);
  spread.insert(spread.end(), static_cast<size_t>(m), 1);
  spread.insert(spread.end(), v.begin() + d + 1, v.end());
  Value placed = cast_to(g, g.reshape(values, spread), t);
  std::vector<int64_t> mask_shape(static_cast<size_t>(d), 1);
  mask_shape.insert(mask_shape.end(), mask_dims.begin(), mask_dims.end());
  mask_shape.insert(mask_shape.end(), static_cast<size_t>(t.rank() - d - m), 1);
  Value mask = cast_to(g, g.reshape(indices[static_cast<size_t>(d)], mask_shape), Type{DType::kBool, t.dims});
  if (!accumulate) return g.select(mask, placed, self);
  Value zero = g.constant_int(0, t.dtype, t.dims);
  return g.binary(t.dtype == DType::kBool ? "or" : "add", self, g.select(mask, placed, zero));
}

// CPU's check that index_put's values broadcast to self[indices]'s shape: made here because an empty result
// returns before the broadcast that would otherwise reject them.
void check_values_broadcast(const Type& values, const std::vector<int64_t>& result_dims) {
  const int64_t lead = static_cast<int64_t>(result_dims.size()) - values.rank();
  bool broadcasts = lead >= 0;
  for (int64_t i = 0; broadcasts && i < values.rank(); ++i) {
    const int64_t size = values.dims[static_cast<size_t>(i)];
    broadcasts = size == 1 || size == result_dims[static_cast<size_t>(lead + i)];
  }
  if (broadcasts) return;
  auto text = [](const std::vector<int64_t>& dims) {
    std::string s = "[";
    for (size_t i = 0; i < dims.size(); ++i) s += (i ? ", " : "") + std::to_string(dims[i]);
    return s + "]";
  };
  throw std::invalid_argument("shape mismatch: value tensor of shape " + text(values.dims) +
                              " cannot be broadcast to indexing result of shape " + text(result_dims));
}

// index_put / _index_put_impl(self, Tensor?[] indices, values, accumulate[, unsafe]): values broadcast
// to self[indices]'s shape and are scattered back (summed when accumulate; else the last write wins,
// which PyTorch leaves unspecified for duplicate indices).
std::vector<Value> lower_index_put(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = ctx.tensor(0);
  const Type t = g.type(self);
  const std::vector<Value>& indices = ctx.args.at(1).tensors;
  const bool accumulate = !ctx.is_none(3) && ctx.boolean(3);
  for (Value index : indices) {
    if (!is_mask(g, index)) continue;
    Value masked = masked_put(g, self, indices, ctx.tensor(2), accumulate);
    if (masked.valid()) return {masked};
    break;  // wrap_index below rejects the mask with a clear message
  }
  const AdvancedIndex a = advanced_index(g, t, indices);
  check_advanced_index(ctx, t, indices);
  const int64_t k = static_cast<int64_t>(a.indexed.size());
  const int64_t nb = static_cast<int64_t>(a.batch.size());
  std::vector<int64_t> gathered_dims = a.batch;  // [B..., rest...]
  for (int64_t d : a.rest) gathered_dims.push_back(t.dims[static_cast<size_t>(d)]);
  const std::vector<int64_t> order = result_order(a);
  std::vector<int64_t> result_dims;  // PyTorch's layout of self[indices]
  for (int64_t i : order) result_dims.push_back(gathered_dims[static_cast<size_t>(i)]);
  int64_t count = 1;
  for (int64_t d : gathered_dims) count *= d;
  check_values_broadcast(ctx.type_of(2), result_dims);
  if (count == 0) return {self};
  Value values = cast_to(g, ctx.tensor(2), Type{t.dtype, result_dims});
  Value updates = g.transpose(values, inverse_permutation(order));
  Value moved = g.transpose(self, a.permutation);
  Value written = scatter(g, moved, a.points, updates, dim_range(nb, nb + static_cast<int64_t>(a.rest.size())),
                          dim_range(0, k), nb, accumulate ? Combine::kAdd : Combine::kReplace);
  return {g.transpose(written, inverse_permutation(a.permutation))};
}

}  // namespace

void add_indexing_rules(std::vector<Rule>& table) {
  table.push_back({"aten::_index_put_impl", &lower_index_put});
  table.push_back({"aten::gather", &lower_gather});
  table.push_back({"aten::index.Tensor", &lower_index});
  table.push_back({"aten::index_add", &lower_index_add});
  table.push_back({"aten::index_copy", &lower_index_copy});
  table.push_back({"aten::index_fill.int_Scalar", &lower_index_fill_scalar});
  table.push_back({"aten::index_fill.int_Tensor", &lower_index_fill_tensor});
  table.push_back({"aten::index_put", &lower_index_put});
  table.push_back({"aten::index_reduce", &lower_index_reduce});
  table.push_back({"aten::index_select", &lower_index_select});
  table.push_back({"aten::one_hot", &lower_one_hot});
  table.push_back({"aten::put", &lower_put});
  table.push_back({"aten::scatter.reduce", &lower_scatter_reduce});
  table.push_back({"aten::scatter.src", &lower_scatter_src});
  table.push_back({"aten::scatter.value", &lower_scatter_value});
  table.push_back({"aten::scatter.value_reduce", &lower_scatter_value_reduce});
  table.push_back({"aten::scatter_add", &lower_scatter_add});
  table.push_back({"aten::scatter_reduce.two", &lower_scatter_reduce_two});
  table.push_back({"aten::take", &lower_take});
}

}  // namespace torchtpu::lowering
