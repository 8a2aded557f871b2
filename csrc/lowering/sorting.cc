// Sorting along one dim: sort (always stable, so argsort's stable=True and PyTorch's tie order hold) and
// topk, which is a sort followed by a slice; the order statistics kthvalue, median, nanmedian and mode;
// and searching: isin, bucketize, searchsorted and histc.
//
// Floats order NaN as the largest value, as PyTorch does: last when ascending, first when descending.
// -0.0 and 0.0 compare equal and keep their input order.
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

const Type& out(const LoweringContext& ctx, size_t i = 0) { return ctx.outputs.at(i); }

std::string compare_line(const std::string& result, const std::string& a, const std::string& b,
                         const char* direction, DType dtype) {
  const std::string t = ir::to_mlir(Type{dtype, {}});
  const char* compare_type = is_floating(dtype) ? "FLOAT"
                             : (is_unsigned(dtype) || dtype == DType::kBool) ? "UNSIGNED"
                                                                             : "SIGNED";
  return "      " + result + " = \"stablehlo.compare\"(" + a + ", " + b +
         ") {comparison_direction = #stablehlo<comparison_direction " + direction +
         ">, compare_type = #stablehlo<comparison_type " + compare_type + ">} : (" + t + ", " + t +
         ") -> tensor<i1>\n";
}

std::string logic_line(const std::string& result, const char* op, const std::string& a, const std::string& b) {
  return "      " + result + " = \"stablehlo." + op + "\"(" + a + ", " + b +
         ") : (tensor<i1>, tensor<i1>) -> tensor<i1>\n";
}

// The comparator region of a sort over (keys, indices): "lhs goes first" on the keys only; the sort's
// stability orders equal keys by position. For floats the NaN clause makes the order total.
std::string comparator(DType key, bool descending) {
  std::string body = compare_line("%c_cmp", "%lhs0", "%rhs0", descending ? "GT" : "LT", key);
  std::string result = "%c_cmp";
  if (is_floating(key)) {
    // Ascending: a number precedes a NaN. Descending: a NaN precedes a number.
    body += compare_line("%c_lnan", "%lhs0", "%lhs0", "NE", key);
    body += compare_line("%c_rnan", "%rhs0", "%rhs0", "NE", key);
    const std::string first_nan = descending ? "%c_lnan" : "%c_rnan";
    const std::string second_nan = descending ? "%c_rnan" : "%c_lnan";
    body += "      %c_notnan = \"stablehlo.not\"(" + second_nan + ") : (tensor<i1>) -> tensor<i1>\n";
    body += logic_line("%c_nan", "and", first_nan, "%c_notnan");
    body += logic_line("%c_res", "or", "%c_cmp", "%c_nan");
    result = "%c_res";
  }
  body += "      \"stablehlo.return\"(" + result + ") : (tensor<i1>) -> ()";
  return ir::region_text({{"%lhs0", key}, {"%rhs0", key}, {"%lhs1", DType::kI64}, {"%rhs1", DType::kI64}}, body);
}

struct Sorted {
  Value values;
  Value indices;  // int64
};

// Stable sort of `x` along `dim`, carrying each element's original position.
Sorted sort_along(Graph& g, Value x, int64_t dim, bool descending) {
  const Type t = g.type(x);
  Value positions = g.iota(Type{DType::kI64, t.dims}, dim);
  const std::string attributes = "dimension = " + std::to_string(dim) + " : i64, is_stable = true";
  std::vector<Value> r = g.op_multi("stablehlo.sort", {x, positions}, {t, Type{DType::kI64, t.dims}}, attributes,
                                    comparator(t.dtype, descending));
  return {r[0], r[1]};
}

// A 0-d input sorts as a one-element vector.
Sorted sort_input(LoweringContext& ctx, int64_t dim_arg, bool descending) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type t = g.type(x);
  if (t.rank() == 0) return sort_along(g, g.reshape(x, {1}), 0, descending);
  return sort_along(g, x, reduction_dims({dim_arg}, t.rank())[0], descending);
}

// sort(self, dim, descending) -> (values, indices)
std::vector<Value> lower_sort(LoweringContext& ctx) {
  Sorted s = sort_input(ctx, ctx.integer(1), ctx.boolean(2));
  Graph& g = ctx.graph;
  return {g.reshape(s.values, out(ctx, 0).dims), g.reshape(s.indices, out(ctx, 1).dims)};
}

// sort.stable(self, *, stable?, dim, descending): every sort here is stable, so `stable` changes nothing.
std::vector<Value> lower_sort_stable(LoweringContext& ctx) {
  Sorted s = sort_input(ctx, ctx.integer(2), ctx.boolean(3));
  Graph& g = ctx.graph;
  return {g.reshape(s.values, out(ctx, 0).dims), g.reshape(s.indices, out(ctx, 1).dims)};
}

// topk(self, k, dim, largest, sorted): the first k of a full sort. Returning them sorted also satisfies
// sorted=False, which promises no order.
std::vector<Value> lower_topk(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Sorted s = sort_input(ctx, ctx.integer(2), ctx.boolean(3));
  const Type t = g.type(s.values);
  const int64_t dim = ctx.type_of(0).rank() == 0 ? 0 : reduction_dims({ctx.integer(2)}, t.rank())[0];
  std::vector<int64_t> start(t.dims.size(), 0), limit = t.dims, unit(t.dims.size(), 1);
  // A 0-dim input gives its element for k = 0 as for k = 1, as on CPU (the result is 0-dim either way).
  limit[static_cast<size_t>(dim)] = ctx.type_of(0).rank() == 0 ? 1 : ctx.integer(1);
  Value values = g.slice(s.values, start, limit, unit);
  Value indices = g.slice(s.indices, start, limit, unit);
  return {g.reshape(values, out(ctx, 0).dims), g.reshape(indices, out(ctx, 1).dims)};
}


// ---- order statistics -------------------------------------------------------------------------------
//
// kthvalue and median read the stable sort, so NaN counts as the largest value and, among equal values,
// the index is the one a stable sort puts there. CPU picks among equal values with an unstable
// selection (quickselect, std::nth_element); PyTorch documents the index of a repeated value as
// implementation specific, and a value's index here always holds that value.

// Element `position` (a constant) along `dim` of a sorted pair, with the dim dropped.
std::pair<Value, Value> pick(Graph& g, const Sorted& s, int64_t dim, int64_t position) {
  const Type t = g.type(s.values);
  std::vector<int64_t> start(t.dims.size(), 0), limit = t.dims, unit(t.dims.size(), 1), dropped;
  start[static_cast<size_t>(dim)] = position;
  limit[static_cast<size_t>(dim)] = position + 1;
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (d != dim) dropped.push_back(t.dims[static_cast<size_t>(d)]);
  }
  return {g.reshape(g.slice(s.values, start, limit, unit), dropped), g.reshape(g.slice(s.indices, start, limit, unit), dropped)};
}

// Reduces `x` over `dim` where `hit` marks exactly one element per slice: a sum whose other terms are
// the neutral -0.0 (0 for integers, false for bool) returns that element exactly, NaN and -0.0 included.
Value select_one(Graph& g, Value hit, Value x, int64_t dim) {
  const Type t = g.type(x);
  if (t.dtype == DType::kBool) {
    Value none = g.constant_int(0, DType::kBool);
    return g.reduce(g.binary("and", hit, x), none, {dim}, ir::Reducer::kOr);
  }
  Value neutral = is_floating(t.dtype) ? g.constant(-0.0, t.dtype) : g.constant_int(0, t.dtype);
  return g.reduce(g.select(hit, x, g.broadcast_in_dim(neutral, t.dims, {})), neutral, {dim}, ir::Reducer::kAdd);
}

// Element `positions` (int64, one per slice, dim dropped) along `dim` of a sorted pair.
std::pair<Value, Value> pick_at(Graph& g, const Sorted& s, int64_t dim, Value positions) {
  const Type t = g.type(s.values);
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (d != dim) kept.push_back(d);
  }
  Value hit = g.compare(g.iota(Type{DType::kI64, t.dims}, dim), g.broadcast_in_dim(positions, t.dims, kept), ir::Comparison::kEQ);
  return {select_one(g, hit, s.values, dim), select_one(g, hit, s.indices, dim)};
}

// The input as a sortable value and the dim to work along: a 0-d input is one element, and dim None
// (full median) flattens.
struct Slices {
  Value x;
  int64_t dim;
};

Slices slices(LoweringContext& ctx, std::optional<int64_t> dim_arg) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type t = g.type(x);
  if (!dim_arg || t.rank() == 0) return {g.reshape(x, {t.numel()}), 0};
  return {x, wrap_dim(ctx.integer(*dim_arg), t.rank())};
}

// CPU implements the order statistics for numbers only; bool input raises there, so it must here too
// rather than give an answer.
void reject_bool(const LoweringContext& ctx, size_t i, const char* op) {
  if (ctx.args[i].kind == Arg::Kind::kTensor && ctx.type_of(i).dtype == DType::kBool) {
    throw std::invalid_argument(std::string(op) + " is not implemented for 'Bool' (as on CPU)");
  }
}

// kthvalue(self, k, dim, keepdim) -> (values, indices)
std::vector<Value> lower_kthvalue(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  reject_bool(ctx, 0, "kthvalue");
  Slices in = slices(ctx, 2);
  auto [values, indices] = pick(g, sort_along(g, in.x, in.dim, false), in.dim, ctx.integer(1) - 1);
  return {g.reshape(values, out(ctx, 0).dims), g.reshape(indices, out(ctx, 1).dims)};
}

// median (lower median: element (n - 1) / 2 of the sorted slice) and nanmedian, which skips NaNs. A
// slice holding NaN has median NaN at its first NaN; an all-NaN slice has nanmedian NaN at its first
// element.
std::pair<Value, Value> median_of(LoweringContext& ctx, const Slices& in, bool skip_nan) {
  Graph& g = ctx.graph;
  reject_bool(ctx, 0, skip_nan ? "nanmedian" : "median");
  const Type t = g.type(in.x);
  const int64_t n = t.dims[static_cast<size_t>(in.dim)];
  if (n == 0) {
    // Only the full median reaches here (dim_median refuses an empty dim): CPU gives NaN, and for
    // integers that NaN converted as x86 does (the lowest int64/int32; narrower types keep its low bits, 0).
    Value value = g.constant_int(0, t.dtype);
    if (is_floating(t.dtype)) value = g.constant(std::numeric_limits<double>::quiet_NaN(), t.dtype);
    if (t.dtype == DType::kI64) value = g.constant_int(std::numeric_limits<int64_t>::min(), t.dtype);
    if (t.dtype == DType::kI32) value = g.constant_int(std::numeric_limits<int32_t>::min(), t.dtype);
    return {value, g.constant_int(0, DType::kI64)};
  }
  Sorted sorted = sort_along(g, in.x, in.dim, false);
  if (!is_floating(t.dtype)) return pick(g, sorted, in.dim, (n - 1) / 2);
  Value is_nan = g.compare(in.x, in.x, ir::Comparison::kNE);
  Value nan_count = g.reduce(g.convert(is_nan, DType::kI64), g.constant_int(0, DType::kI64), {in.dim}, ir::Reducer::kAdd);
  const std::vector<int64_t> reduced = g.type(nan_count).dims;
  // NaNs sort last, so the first NaN of a slice sits at n - nan_count.
  Value kept_count = g.binary("subtract", g.constant_int(n, DType::kI64, reduced), nan_count);
  Value position;
  if (skip_nan) {
    Value lower_middle = g.binary("divide", g.binary("subtract", kept_count, g.constant_int(1, DType::kI64, reduced)),
                                  g.constant_int(2, DType::kI64, reduced));
    position = g.binary("maximum", lower_middle, g.constant_int(0, DType::kI64, reduced));
  } else {
    Value has_nan = g.compare(nan_count, g.constant_int(0, DType::kI64, reduced), ir::Comparison::kGT);
    position = g.select(has_nan, kept_count, g.constant_int((n - 1) / 2, DType::kI64, reduced));
  }
  return pick_at(g, sorted, in.dim, position);
}

std::vector<Value> lower_median(LoweringContext& ctx) {
  return {ctx.graph.reshape(median_of(ctx, slices(ctx, std::nullopt), false).first, out(ctx).dims)};
}
std::vector<Value> lower_nanmedian(LoweringContext& ctx) {
  return {ctx.graph.reshape(median_of(ctx, slices(ctx, std::nullopt), true).first, out(ctx).dims)};
}

// median.dim(self, dim, keepdim) -> (values, indices), and nanmedian.dim
std::vector<Value> dim_median(LoweringContext& ctx, bool skip_nan) {
  const Slices in = slices(ctx, 1);
  if (ctx.graph.type(in.x).dims[static_cast<size_t>(in.dim)] == 0) {
    throw std::invalid_argument("median along a dim of size 0");  // CPU's IndexError reaches the user
  }
  auto [values, indices] = median_of(ctx, in, skip_nan);
  return {ctx.graph.reshape(values, out(ctx, 0).dims), ctx.graph.reshape(indices, out(ctx, 1).dims)};
}
std::vector<Value> lower_median_dim(LoweringContext& ctx) { return dim_median(ctx, false); }
std::vector<Value> lower_nanmedian_dim(LoweringContext& ctx) { return dim_median(ctx, true); }

// mode(self, dim, keepdim) -> (values, indices): the most frequent value of each slice, the smallest
// one when several are as frequent, and the last position holding it, as on CPU. Counting compares
// every pair of elements of a slice.
std::vector<Value> lower_mode(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Slices in = slices(ctx, 1);
  // No mode of an empty slice: CPU raises, the meta kernel returns an empty result.
  if (ctx.type_of(0).rank() > 0 && g.type(in.x).dims[static_cast<size_t>(in.dim)] == 0) {
    throw std::invalid_argument("mode(): Expected reduction dim " + std::to_string(in.dim) + " to have non-zero size.");
  }
  const Type t = g.type(in.x);
  const int64_t rank = t.rank();
  // [..., n, n] with the pair's second element in a new last dim.
  std::vector<int64_t> pair_dims = t.dims;
  pair_dims.push_back(t.dims[static_cast<size_t>(in.dim)]);
  std::vector<int64_t> as_first = dim_range(0, rank), as_second;
  for (int64_t d = 0; d < rank; ++d) as_second.push_back(d == in.dim ? rank : d);
  Value first = g.broadcast_in_dim(in.x, pair_dims, as_first);
  Value equal = g.compare(first, g.broadcast_in_dim(in.x, pair_dims, as_second), ir::Comparison::kEQ);
  Value counts = g.reduce(g.convert(equal, DType::kI64), g.constant_int(0, DType::kI64), {rank}, ir::Reducer::kAdd);
  Value best = g.reduce(counts, g.constant_int(0, DType::kI64), {in.dim}, ir::Reducer::kMax);
  std::vector<int64_t> kept;
  for (int64_t d = 0; d < rank; ++d) {
    if (d != in.dim) kept.push_back(d);
  }
  Value is_best = g.compare(counts, g.broadcast_in_dim(best, t.dims, kept), ir::Comparison::kEQ);
  // Among the most frequent, the smallest value. NaN equals nothing, so it is never counted (CPU sorts the
  // slice with a comparator NaN breaks, so where NaN lands, and whether it wins, is its sort's accident).
  // The min's identity: +inf, or for integers a value no element exceeds (max of the input and 0).
  Value ceiling = is_floating(t.dtype)
                      ? g.constant(std::numeric_limits<double>::infinity(), t.dtype)
                      : g.reduce(in.x, g.constant_int(0, t.dtype), dim_range(0, rank), ir::Reducer::kMax);
  Value value = g.reduce(g.select(is_best, in.x, g.broadcast_in_dim(ceiling, t.dims, {})), ceiling, {in.dim}, ir::Reducer::kMin);
  Value positions = g.iota(Type{DType::kI64, t.dims}, in.dim);
  Value holds = g.binary("and", is_best, g.compare(in.x, g.broadcast_in_dim(value, t.dims, kept), ir::Comparison::kEQ));
  Value last = g.reduce(g.select(holds, positions, g.constant_int(-1, DType::kI64, t.dims)), g.constant_int(-1, DType::kI64), {in.dim},
                        ir::Reducer::kMax);
  // A slice of NaNs only has no counted value: its mode is its first element, NaN at index 0, as CPU returns.
  last = g.binary("maximum", last, g.constant_int(0, DType::kI64, g.type(last).dims));
  // The value is read at that position, so of -0.0 and 0.0 the one stored there is returned, as on CPU.
  value = select_one(g, g.compare(positions, g.broadcast_in_dim(last, t.dims, kept), ir::Comparison::kEQ), in.x, in.dim);
  return {g.reshape(value, out(ctx, 0).dims), g.reshape(last, out(ctx, 1).dims)};
}


// ---- searching: isin, bucketize, searchsorted, histc ------------------------------------------------

// `x` broadcast against a new trailing dim of size k, and `row` (..., K) broadcast to x's dims plus K:
// the two sides of an all-pairs comparison. `row_leading` says how many of x's leading dims `row` has.
std::pair<Value, Value> pairs(Graph& g, Value x, Value row, int64_t row_leading) {
  const Type xt = g.type(x);
  const int64_t k = g.type(row).dims.back();
  std::vector<int64_t> dims = xt.dims;
  dims.push_back(k);
  std::vector<int64_t> row_positions = dim_range(0, row_leading);
  row_positions.push_back(xt.rank());
  return {g.broadcast_in_dim(x, dims, dim_range(0, xt.rank())), g.broadcast_in_dim(row, dims, row_positions)};
}

// Each value's insertion point in its row of `sorted` (searched along the last dim; a 1-d `sorted` serves
// every value, otherwise its leading dims are x's): CPU's binary search, step for step, so a sequence that is
// not sorted (NaN among the boundaries included) answers as on CPU. Each of the log2(K) + 1 steps reads one
// element per value; a value whose search has ended keeps its bounds. `right` moves past equal elements.
Value insertion_points(Graph& g, Value sorted, Value x, bool right, DType result) {
  const Type st = g.type(sorted);
  const Type xt = g.type(x);
  const int64_t k = st.dims.back();
  if (k == 0) return g.constant_int(0, result, xt.dims);  // nothing to search: every value goes first
  const std::vector<int64_t> dims = st.rank() == 1 ? std::vector<int64_t>{xt.numel()}
                                                   : std::vector<int64_t>{st.numel() / k,
                                                                          xt.dims.empty() ? 1 : xt.dims.back()};
  Value values = g.reshape(x, dims);
  Value flat = g.reshape(sorted, {st.numel()});
  auto i64 = [&](int64_t v) { return g.constant_int(v, DType::kI64, dims); };
  // Where each value's row starts in `flat`.
  Value row_start = st.rank() == 1 ? i64(0) : g.binary("multiply", g.iota(Type{DType::kI64, dims}, 0), i64(k));
  Value low = i64(0), high = i64(k);
  std::vector<int64_t> index_dims = dims;
  index_dims.push_back(1);
  for (int64_t span = k; span > 0; span >>= 1) {
    Value searching = g.compare(low, high, ir::Comparison::kLT);
    Value mid = g.binary("add", low, g.binary("shift_right_logical", g.binary("subtract", high, low), i64(1)));
    // An ended search's mid may be K; it reads the row's last element and keeps its bounds.
    Value at = g.binary("add", row_start, g.binary("minimum", mid, i64(k - 1)));
    Value mid_value = g.gather_flat(flat, g.reshape(at, index_dims));
    Value go_up = g.unary("not", g.compare(mid_value, values, right ? ir::Comparison::kGT : ir::Comparison::kGE));
    low = g.select(g.binary("and", searching, go_up), g.binary("add", mid, i64(1)), low);
    high = g.select(g.binary("and", searching, g.unary("not", go_up)), mid, high);
  }
  return g.reshape(g.convert(low, result), xt.dims);
}

// bucketize/searchsorted compare in the promoted type, which CPU cannot search when it is bool.
void reject_bool_search(const LoweringContext& ctx, const char* op) {
  if (ctx.common_dtype == DType::kBool) throw std::invalid_argument(std::string(op) + " is not implemented for 'Bool' (as on CPU)");
}

// A tensor argument or, for the Scalar overloads, a scalar argument, as a value of `dtype`.
Value tensor_or_scalar(LoweringContext& ctx, size_t i, DType dtype) {
  if (ctx.args[i].kind == Arg::Kind::kTensor) return ctx.graph.convert(ctx.tensor(i), dtype);
  return ctx.scalar(i, dtype, {});
}

// bucketize.Tensor(self, boundaries, *, out_int32, right) and bucketize.Scalar
std::vector<Value> lower_bucketize(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  reject_bool_search(ctx, "bucketize");
  const DType compare = ctx.common_dtype;
  Value points = insertion_points(g, g.convert(ctx.tensor(1), compare), tensor_or_scalar(ctx, 0, compare), ctx.boolean(3),
                                  out(ctx).dtype);
  return {g.reshape(points, out(ctx).dims)};
}

// searchsorted.Tensor(sorted_sequence, self, *, out_int32, right, side?, sorter?) and searchsorted.Scalar:
// side "right" is right=True; a sorter first puts each row in sorted order.
std::vector<Value> lower_searchsorted(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  reject_bool_search(ctx, "searchsorted");
  const DType compare = ctx.common_dtype;
  Value sorted = g.convert(ctx.tensor(0), compare);
  if (!ctx.is_none(5)) {
    // sorted[..., k] = sequence[..., sorter[..., k]], one element picked per position.
    const Type t = g.type(sorted);
    const int64_t last = t.rank() - 1;
    Value sorter = g.convert(ctx.tensor(5), DType::kI64);
    ctx.check(CheckKind::kSorterIndex, outside_range(g, sorter, 0, t.dims[last]));
    auto [picks, rows] = pairs(g, sorter, sorted, last);
    const std::vector<int64_t> cube = g.type(rows).dims;
    Value hit = g.compare(picks, g.iota(Type{DType::kI64, cube}, last + 1), ir::Comparison::kEQ);
    sorted = select_one(g, hit, rows, last + 1);
  }
  const bool right = ctx.boolean(3) || (!ctx.is_none(4) && ctx.text(4) == "right");
  Value points = insertion_points(g, sorted, tensor_or_scalar(ctx, 1, compare), right, out(ctx).dtype);
  return {g.reshape(points, out(ctx).dims)};
}

// isin.Tensor_Tensor(elements, test_elements, *, assume_unique, invert) and the Scalar overloads: each
// element compared (in the promoted type) with every test element.
std::vector<Value> lower_isin(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const DType compare = ctx.common_dtype;
  Value elements = tensor_or_scalar(ctx, 0, compare);
  Value tests = tensor_or_scalar(ctx, 1, compare);
  tests = g.reshape(tests, {g.type(tests).numel()});
  auto [values, candidates] = pairs(g, elements, tests, 0);
  Value found = g.reduce(g.compare(values, candidates, ir::Comparison::kEQ), g.constant_int(0, DType::kBool),
                         {g.type(values).rank() - 1}, ir::Reducer::kOr);
  if (ctx.boolean(3)) found = g.unary("not", found);
  return {g.reshape(found, out(ctx).dims)};
}

// histc(self, bins, min, max): counts of the elements in [min, max] over `bins` equal bins, max itself in
// the last bin; other elements and NaN are not counted. min == max takes the data's range instead,
// widened by 1 on both sides if that is empty too. The bin is (x - min) * bins / (max - min) truncated,
// computed in the input's type as CPU's histc does (no search among the bin edges). Integer inputs count in
// integer arithmetic into an integer result, as CUDA's histc does (CPU refuses them; transformers' MoE
// routing calls histc on int32 expert ids on every device but the CPU).
std::vector<Value> lower_histc(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type t = ctx.type_of(0);
  if (t.dtype == DType::kBool) require_floating(ctx, 0, "histc");
  const int64_t bins = ctx.integer(1);
  const int64_t n = t.numel();
  Value x = g.reshape(ctx.tensor(0), {n});
  const std::vector<int64_t> flat{n};
  Value low, high;
  if (ctx.real(2) == ctx.real(3) && n > 0) {
    low = g.reduce(x, extreme(g, t.dtype, false), {0}, ir::Reducer::kMin);
    high = g.reduce(x, extreme(g, t.dtype, true), {0}, ir::Reducer::kMax);
    // CPU refuses a data range that is not finite (an inf or NaN among the data), naming both ends.
    if (is_floating(t.dtype)) check_finite_data_range(ctx, x, low, high, CheckKind::kHistcRange, {}, true);
  } else {
    low = ctx.scalar(2, t.dtype, {});
    high = ctx.scalar(3, t.dtype, {});
  }
  Value empty_range = g.compare(low, high, ir::Comparison::kEQ);
  low = g.select(empty_range, g.binary("subtract", low, g.constant(1, t.dtype)), low);
  high = g.select(empty_range, g.binary("add", high, g.constant(1, t.dtype)), high);
  Value low_full = g.broadcast_in_dim(low, flat, {}), high_full = g.broadcast_in_dim(high, flat, {});
  Value inside = g.binary("and", g.compare(x, low_full, ir::Comparison::kGE), g.compare(x, high_full, ir::Comparison::kLE));
  Value scaled = g.binary("divide", g.binary("multiply", g.binary("subtract", x, low_full), g.constant(static_cast<double>(bins), t.dtype, flat)),
                          g.binary("subtract", high_full, low_full));
  Value bin = g.binary("minimum", g.convert(scaled, DType::kI64), g.constant_int(bins - 1, DType::kI64, flat));
  // Elements outside the range go to index `bins`, which the scatter drops.
  bin = g.select(inside, bin, g.constant_int(bins, DType::kI64, flat));
  const DType accumulate = accumulation_dtype(t.dtype);
  Value counts = scatter_add_rows(g, g.constant(0, accumulate, {bins}), g.reshape(bin, {n, 1}), g.constant(1, accumulate, flat));
  return {g.convert(counts, out(ctx).dtype)};
}

}  // namespace

void add_sorting_rules(std::vector<Rule>& table) {
  table.push_back({"aten::bucketize.Scalar", &lower_bucketize});
  table.push_back({"aten::bucketize.Tensor", &lower_bucketize});
  table.push_back({"aten::histc", &lower_histc});
  table.push_back({"aten::isin.Scalar_Tensor", &lower_isin});
  table.push_back({"aten::isin.Tensor_Scalar", &lower_isin});
  table.push_back({"aten::isin.Tensor_Tensor", &lower_isin});
  table.push_back({"aten::kthvalue", &lower_kthvalue});
  table.push_back({"aten::median", &lower_median});
  table.push_back({"aten::median.dim", &lower_median_dim});
  table.push_back({"aten::mode", &lower_mode});
  table.push_back({"aten::nanmedian", &lower_nanmedian});
  table.push_back({"aten::nanmedian.dim", &lower_nanmedian_dim});
  table.push_back({"aten::searchsorted.Scalar", &lower_searchsorted});
  table.push_back({"aten::searchsorted.Tensor", &lower_searchsorted});
  table.push_back({"aten::sort", &lower_sort});
  table.push_back({"aten::sort.stable", &lower_sort_stable});
  table.push_back({"aten::topk", &lower_topk});
}

}  // namespace torchtpu::lowering
