#include "lowering/view.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

namespace torchtpu::lowering {
namespace {

using ir::Graph;
using ir::Type;
using ir::Value;

// Reinterprets the flat storage as elements of `dtype` (bytes are shared, as torch's view(dtype)).
Value reinterpret(Graph& g, Value flat, DType dtype) {
  const Type& t = g.type(flat);
  if (t.dtype == dtype) return flat;
  const size_t from = element_size(t.dtype);
  const size_t to = element_size(dtype);
  const int64_t n = t.dims.at(0);
  // XLA bitcasts no complex type: complex storage goes through its parts, interleaved as in memory.
  if (is_complex(t.dtype)) {
    Value parts = g.concatenate({g.reshape(g.real(flat), {n, 1}), g.reshape(g.imag(flat), {n, 1})}, 1);
    return reinterpret(g, g.reshape(parts, {2 * n}), dtype);
  }
  if (is_complex(dtype)) {
    Value parts = reinterpret(g, flat, complex_part(dtype));
    const int64_t m = g.type(parts).dims.at(0);
    if (m % 2 != 0) throw std::invalid_argument("storage size is not a multiple of the view's element size");
    Value pairs = g.reshape(parts, {m / 2, 2});
    Value re = g.reshape(g.slice(pairs, {0, 0}, {m / 2, 1}, {1, 1}), {m / 2});
    Value im = g.reshape(g.slice(pairs, {0, 1}, {m / 2, 2}, {1, 1}), {m / 2});
    return g.complex(re, im);
  }
  // bool and 1-byte integers: same bytes, and StableHLO has no bitcast for i1.
  if (from == 1 && to == 1 && (t.dtype == DType::kBool || dtype == DType::kBool)) return g.convert(flat, dtype);
  if (from == to) return g.bitcast_convert(flat, Type{dtype, {n}});
  if (from > to) {
    const int64_t ratio = static_cast<int64_t>(from / to);
    Value wide = g.bitcast_convert(flat, Type{dtype, {n, ratio}});
    return g.reshape(wide, {n * ratio});
  }
  const int64_t ratio = static_cast<int64_t>(to / from);
  if (n % ratio != 0) throw std::invalid_argument("storage size is not a multiple of the view's element size");
  Value grouped = g.reshape(flat, {n / ratio, ratio});
  return g.bitcast_convert(grouped, Type{dtype, {n / ratio}});
}

bool has_runtime_stride(const std::vector<Value>& strides) {
  return std::any_of(strides.begin(), strides.end(), [](Value s) { return s.valid(); });
}

// Flat element index of every view position, shaped sizes + [1] (the gather/scatter index layout).
Value flat_indices(Graph& g, const ViewGeometry& view, Value offset, const std::vector<Value>& strides) {
  std::vector<int64_t> dims = view.sizes;
  dims.push_back(1);
  Value index = offset.valid() ? g.broadcast_in_dim(offset, dims, {}) : g.constant_int(view.offset, DType::kI64, dims);
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    const bool runtime = d < strides.size() && strides[d].valid();
    if (view.sizes[d] == 1 || (!runtime && view.strides[d] == 0)) continue;
    Value position = g.iota(Type{DType::kI64, dims}, static_cast<int64_t>(d));
    Value stride = runtime ? g.broadcast_in_dim(strides[d], dims, {})
                           : g.constant_int(view.strides[d], DType::kI64, dims);
    index = g.binary("add", index, g.binary("multiply", position, stride));
  }
  return index;
}

// `length` elements of `flat` from the runtime offset `start`, or from `first` when `start` is invalid.
Value window(Graph& g, Value flat, Value start, int64_t first, int64_t length) {
  return start.valid() ? g.dynamic_slice(flat, {start}, {length}) : g.slice(flat, {first}, {first + length}, {1});
}

// The nested dims `order[level:]` of `view` (strides decreasing, each a multiple of the next) read from
// `start` / `first` as a dense array of their sizes. Whole rows of the outer stride, reshaped into a box
// [s, t_0/t_1, ..., t_last] and cut to the view's sizes, would run past the storage by the last row's slack
// (the outer stride minus what a row reads): the view's last element may be the storage's last. So unless
// whole rows are known to fit, the first s - 1 rows are one box and the last row is read the same way on
// its own, then joined. Nothing is padded (a pad of the storage copies it whole), no dynamic_slice clamps,
// and with offsets XLA knows (a captured graph's) every window folds into a plain slice.
Value read_nested(Graph& g, Value flat, const ViewGeometry& view, const std::vector<int64_t>& order, size_t level,
                  Value start, int64_t first) {
  if (level == order.size()) return g.reshape(window(g, flat, start, first, 1), {});
  const int64_t rows = view.sizes[order[level]];
  const int64_t stride = view.strides[order[level]];
  int64_t row_extent = 1;  // from a row's first element read to its last, inclusive
  for (size_t k = level + 1; k < order.size(); ++k) row_extent += (view.sizes[order[k]] - 1) * view.strides[order[k]];
  auto whole_rows = [&](int64_t n) {
    std::vector<int64_t> box{n}, limit{n};
    for (size_t k = level + 1; k < order.size(); ++k) {
      box.push_back(view.strides[order[k - 1]] / view.strides[order[k]]);
      limit.push_back(view.sizes[order[k]]);
    }
    box.push_back(view.strides[order.back()]);
    limit.push_back(1);
    Value boxed = g.reshape(window(g, flat, start, first, n * stride), box);
    std::vector<int64_t> zeros(box.size(), 0), unit(box.size(), 1);
    return g.reshape(g.slice(boxed, zeros, limit, unit), std::vector<int64_t>(limit.begin(), limit.end() - 1));
  };
  const bool rows_fit = stride == row_extent || (!start.valid() && first + rows * stride <= g.type(flat).dims[0]);
  if (rows_fit) return whole_rows(rows);
  const int64_t last_row = (rows - 1) * stride;
  Value tail_start = start.valid() ? g.binary("add", start, g.constant_int(last_row, DType::kI64)) : Value{};
  Value tail = read_nested(g, flat, view, order, level + 1, tail_start, first + last_row);
  std::vector<int64_t> tail_dims{1};
  for (int64_t d : g.type(tail).dims) tail_dims.push_back(d);
  return g.concatenate({whole_rows(rows - 1), g.reshape(tail, tail_dims)}, 0);
}

// The strided read as dense slicing when the (non-broadcast, non-unit) dims nest: each stride a multiple
// of the next and large enough that rows do not overlap. Returns an invalid Value otherwise.
Value structured_read(Graph& g, Value flat, const ViewGeometry& view, Value offset) {
  std::vector<int64_t> kept;  // original dims that are neither size 1 nor broadcast
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] != 1 && view.strides[d] != 0) kept.push_back(static_cast<int64_t>(d));
  }
  std::vector<int64_t> order = kept;
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return view.strides[a] > view.strides[b]; });
  for (size_t k = 0; k + 1 < order.size(); ++k) {
    const int64_t stride = view.strides[order[k]];
    const int64_t inner = view.strides[order[k + 1]];
    if (stride % inner != 0 || stride < inner * view.sizes[order[k + 1]]) return Value{};
  }
  Value dense = read_nested(g, flat, view, order, 0, offset, view.offset);  // shaped as the kept dims in `order`
  if (!order.empty()) {
    // Back to the original relative order of the kept dims.
    std::vector<int64_t> permutation;
    for (int64_t d : kept) {
      permutation.push_back(std::find(order.begin(), order.end(), d) - order.begin());
    }
    dense = g.transpose(dense, permutation);
  }
  // Re-insert size-1 dims and broadcast the stride-0 ones.
  std::vector<int64_t> with_units, broadcast_dims;
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.sizes[d] == 1 || view.strides[d] != 0) {
      with_units.push_back(view.sizes[d]);
      broadcast_dims.push_back(static_cast<int64_t>(d));
    }
  }
  dense = g.reshape(dense, with_units);
  return g.broadcast_in_dim(dense, view.sizes, broadcast_dims);
}

}  // namespace

int64_t ViewGeometry::numel() const {
  return std::accumulate(sizes.begin(), sizes.end(), int64_t{1}, std::multiplies<int64_t>());
}

bool ViewGeometry::is_contiguous() const {
  int64_t expected = 1;
  for (size_t i = sizes.size(); i-- > 0;) {
    if (sizes[i] != 1 && strides[i] != expected) return false;
    expected *= sizes[i];
  }
  return true;
}

std::vector<int64_t> dense_order(const ViewGeometry& view) {
  std::vector<int64_t> order(view.sizes.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return view.strides[a] > view.strides[b]; });
  int64_t expected = 1;
  for (size_t k = order.size(); k-- > 0;) {
    const int64_t d = order[k];
    if (view.sizes[d] != 1 && view.strides[d] != expected) return {};
    expected *= view.sizes[d];
  }
  return order;
}

bool covers_storage(const ViewGeometry& view, DType storage_dtype, int64_t storage_numel) {
  return view.offset == 0 && view.is_contiguous() &&
         static_cast<size_t>(view.numel()) * element_size(view.dtype) ==
             static_cast<size_t>(storage_numel) * element_size(storage_dtype);
}

Value read_view(Graph& g, Value flat, const ViewGeometry& view, Value offset, const std::vector<Value>& strides) {
  Value typed = reinterpret(g, flat, view.dtype);
  if (view.numel() == 0) return g.constant_int(0, view.dtype, view.sizes);
  if (!has_runtime_stride(strides)) {
    Value structured = structured_read(g, typed, view, offset);
    if (structured.valid()) return structured;
  }
  return g.gather_flat(typed, flat_indices(g, view, offset, strides));
}

Value write_view(Graph& g, Value flat, const ViewGeometry& view, Value value, Value offset,
                 const std::vector<Value>& strides) {
  Value typed = reinterpret(g, flat, view.dtype);
  if (has_runtime_stride(strides)) {
    return view.numel() == 0 ? typed : g.scatter_flat(typed, flat_indices(g, view, offset, strides), value);
  }
  const int64_t n = g.type(typed).dims[0];
  if (!offset.valid() && covers_storage(view, view.dtype, n)) return g.reshape(value, {n});
  if (view.numel() == 0) return typed;
  if (!offset.valid() && view.offset == 0 && view.numel() == n) {
    // The whole storage in another order: the value laid out in memory order replaces it.
    const std::vector<int64_t> order = dense_order(view);
    if (!order.empty()) return g.reshape(g.transpose(value, order), {n});
  }
  if (offset.valid() && view.is_contiguous()) {
    return g.dynamic_update_slice(typed, g.reshape(value, {view.numel()}), {offset});
  }
  if (view.is_contiguous()) {
    // A dense run: splice it in with slices and a concatenation-free pad/select.
    Value run = g.reshape(value, {view.numel()});
    Value zero = g.constant_int(0, view.dtype);
    Value placed = g.pad(run, zero, {view.offset}, {n - view.offset - view.numel()});
    Value position = g.iota(Type{DType::kI64, {n}}, 0);
    Value lo = g.constant_int(view.offset, DType::kI64, {n});
    Value hi = g.constant_int(view.offset + view.numel(), DType::kI64, {n});
    Value inside = g.binary("and", g.compare(position, lo, ir::Comparison::kGE),
                            g.compare(position, hi, ir::Comparison::kLT));
    return g.select(inside, placed, typed);
  }
  return g.scatter_flat(typed, flat_indices(g, view, offset, strides), value);
}

// Row block o of a grown array starts at o * length * inner: one dynamic slice per block (a gather of computed
// positions, of elements or of whole rows, costs several times more on the CPU plugin; a while loop over the
// blocks is no faster).
Value read_padded_rows(Graph& g, Value flat, int64_t outer, int64_t padded, int64_t inner, Value length, bool zeros) {
  const DType dtype = g.type(flat).dtype;
  const int64_t stored = g.type(flat).dims[0], block = padded * inner;
  // A block read past the storage's own capacity (padding to a larger one) stays inside: zeros after it.
  if (stored < outer * block) flat = g.pad(flat, g.constant_int(0, dtype), {0}, {outer * block - stored});
  Value n = g.convert(length, DType::kI64);
  Value row_elements = g.binary("multiply", n, g.constant_int(inner, DType::kI64));
  Value zero = g.constant_int(0, DType::kI64);
  std::vector<Value> parts;
  for (int64_t o = 0; o < outer; ++o) {
    Value start = g.binary("multiply", g.constant_int(o, DType::kI64), row_elements);
    parts.push_back(g.reshape(g.dynamic_slice(flat, {start}, {block}), {1, padded, inner}));
  }
  Value blocks = g.concatenate(parts, 0);
  // Rows from `length` on hold the next block's start: copies of the last real row, or zeros, instead.
  const std::vector<int64_t> dims = {outer, padded, inner};
  Value real = g.compare(g.iota(Type{DType::kI64, dims}, 1), g.broadcast_in_dim(n, dims, {}), ir::Comparison::kLT);
  Value fill = zeros ? g.constant_int(0, dtype, dims)
                     : g.broadcast_in_dim(g.reshape(g.dynamic_slice(blocks, {zero, g.binary("subtract", n, g.constant_int(1, DType::kI64)), zero},
                                                                    {outer, 1, inner}),
                                                    {outer, inner}),
                                          dims, {0, 2});
  return g.select(real, blocks, fill);
}

Value pack_rows(Graph& g, Value value, Value length) {
  // Block o goes to o * length * inner, in order: each write's padded rows are overwritten by the next block.
  const std::vector<int64_t> dims = g.type(value).dims;
  const int64_t outer = dims[0], padded = dims[1], inner = dims[2];
  Value row_elements = g.binary("multiply", g.convert(length, DType::kI64), g.constant_int(inner, DType::kI64));
  Value out = g.constant_int(0, g.type(value).dtype, {outer * padded * inner});
  for (int64_t o = 0; o < outer; ++o) {
    Value rows = g.reshape(g.slice(value, {o, 0, 0}, {o + 1, padded, inner}, {1, 1, 1}), {padded * inner});
    out = g.dynamic_update_slice(out, rows, {g.binary("multiply", g.constant_int(o, DType::kI64), row_elements)});
  }
  return out;
}

}  // namespace torchtpu::lowering
