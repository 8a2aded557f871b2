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

// Flat element index of every view position, shaped sizes + [1] (the gather/scatter index layout).
Value flat_indices(Graph& g, const ViewGeometry& view, Value offset) {
  std::vector<int64_t> dims = view.sizes;
  dims.push_back(1);
  Value index = offset.valid() ? g.broadcast_in_dim(offset, dims, {}) : g.constant_int(view.offset, DType::kI64, dims);
  for (size_t d = 0; d < view.sizes.size(); ++d) {
    if (view.strides[d] == 0 || view.sizes[d] == 1) continue;
    Value position = g.iota(Type{DType::kI64, dims}, static_cast<int64_t>(d));
    Value stride = g.constant_int(view.strides[d], DType::kI64, dims);
    index = g.binary("add", index, g.binary("multiply", position, stride));
  }
  return index;
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
  const int64_t storage_numel = g.type(flat).dims[0];
  Value dense;  // shaped as the kept dims in `order`
  if (order.empty()) {
    Value element = offset.valid() ? g.dynamic_slice(flat, {offset}, {1}) : g.slice(flat, {view.offset}, {view.offset + 1}, {1});
    dense = g.reshape(element, {});
  } else {
    // Box: [s_0, t_0/t_1, ..., t_{m-2}/t_{m-1}, t_{m-1}] laid over flat[offset : offset + s_0 * t_0].
    std::vector<int64_t> box;
    box.push_back(view.sizes[order[0]]);
    for (size_t k = 1; k < order.size(); ++k) box.push_back(view.strides[order[k - 1]] / view.strides[order[k]]);
    box.push_back(view.strides[order.back()]);
    const int64_t span = view.sizes[order[0]] * view.strides[order[0]];
    Value zero = g.constant_int(0, g.type(flat).dtype);
    Value window;
    if (offset.valid()) {
      // The view's last element is at most storage_numel - 1, so padding by the box's slack past it keeps
      // every valid offset inside the padded storage, and dynamic_slice never clamps.
      int64_t extent = 1;
      for (int64_t d : order) extent += (view.sizes[d] - 1) * view.strides[d];
      Value source = span > extent ? g.pad(flat, zero, {0}, {span - extent}) : flat;
      window = g.dynamic_slice(source, {offset}, {span});
    } else {
      Value source = flat;
      const int64_t end = view.offset + span;
      if (end > storage_numel) {
        // The last row's padding runs past the storage; it is sliced away below.
        source = g.pad(flat, zero, {0}, {end - storage_numel});
      }
      window = g.slice(source, {view.offset}, {end}, {1});
    }
    Value boxed = g.reshape(window, box);
    std::vector<int64_t> start(box.size(), 0), limit, unit(box.size(), 1);
    for (size_t k = 0; k < order.size(); ++k) limit.push_back(view.sizes[order[k]]);
    limit.push_back(1);
    std::vector<int64_t> kept_dims(limit.begin(), limit.end() - 1);
    dense = g.reshape(g.slice(boxed, start, limit, unit), kept_dims);
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

Value read_view(Graph& g, Value flat, const ViewGeometry& view, Value offset) {
  Value typed = reinterpret(g, flat, view.dtype);
  if (view.numel() == 0) return g.constant_int(0, view.dtype, view.sizes);
  Value structured = structured_read(g, typed, view, offset);
  if (structured.valid()) return structured;
  return g.gather_flat(typed, flat_indices(g, view, offset));
}

Value write_view(Graph& g, Value flat, const ViewGeometry& view, Value value, Value offset) {
  Value typed = reinterpret(g, flat, view.dtype);
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
  return g.scatter_flat(typed, flat_indices(g, view, offset), value);
}

}  // namespace torchtpu::lowering
