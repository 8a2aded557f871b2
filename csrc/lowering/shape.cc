// Shape ops that produce a new tensor (not a view): cat, padding, flip, roll, tril/triu, repeat, the
// *_scatter family that functionalization emits for writes through views, and the masked ops whose output
// shape does not depend on the mask: masked_fill, masked_scatter(_backward), nonzero_static.
//
// Every output shape and dtype comes from PyTorch's meta kernel (ctx.outputs), which has already checked
// the arguments; the rules only emit.
#include <algorithm>
#include <numeric>

#include "lowering/helpers.h"

namespace torchtpu::lowering {
namespace {

using ir::Comparison;

const Type& out(const LoweringContext& ctx) { return ctx.outputs.at(0); }

// broadcast_in_dim with `positions` in any order: XLA wants them increasing, so the operand's dims are
// first transposed into that order.
Value broadcast_unordered(Graph& g, Value x, const std::vector<int64_t>& dims, std::vector<int64_t> positions) {
  std::vector<int64_t> order(positions.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return positions[a] < positions[b]; });
  std::sort(positions.begin(), positions.end());
  return g.broadcast_in_dim(g.transpose(x, order), dims, positions);
}

// Slice of `x` along one dim, [start, limit).
Value slice_dim(Graph& g, Value x, int64_t dim, int64_t start, int64_t limit) {
  const Type& t = g.type(x);
  std::vector<int64_t> starts(t.dims.size(), 0), limits = t.dims, strides(t.dims.size(), 1);
  starts[static_cast<size_t>(dim)] = start;
  limits[static_cast<size_t>(dim)] = limit;
  return g.slice(x, starts, limits, strides);
}

// cat(Tensor[] tensors, int dim). Legacy rule kept by PyTorch: 1-d tensors of size 0 are skipped whatever
// the other inputs' rank. Inputs are promoted to the output dtype.
std::vector<Value> lower_cat(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const int64_t dim = wrap_dim(ctx.integer(1), out(ctx).rank());
  std::vector<Value> parts;
  for (Value v : ctx.args.at(0).tensors) {
    const Type& t = g.type(v);
    if (t.numel() == 0) continue;  // contributes nothing (and covers the skipped legacy 1-d empties)
    parts.push_back(g.convert(v, out(ctx).dtype));
  }
  if (parts.empty()) return {g.constant_int(0, out(ctx).dtype, out(ctx).dims)};
  return {g.concatenate(parts, dim)};
}

// constant_pad_nd(self, pad[], value): pad pairs start at the last dim. StableHLO's pad takes negative
// edge padding as slicing, which is exactly PyTorch's meaning of a negative pad.
std::vector<Value> lower_constant_pad_nd(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type& t = g.type(x);
  const std::vector<int64_t>& pad = ctx.ints(1);
  std::vector<int64_t> low(t.dims.size(), 0), high(t.dims.size(), 0);
  for (size_t k = 0; 2 * k + 1 < pad.size(); ++k) {
    const size_t d = t.dims.size() - 1 - k;
    low[d] = pad[2 * k];
    high[d] = pad[2 * k + 1];
  }
  Value value = ctx.is_none(2) ? g.constant_int(0, t.dtype) : ctx.scalar(2, t.dtype, {});
  return {g.pad(x, value, low, high)};
}

std::vector<Value> lower_flip(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  std::vector<int64_t> dims;
  for (int64_t d : ctx.ints(1)) dims.push_back(wrap_dim(d, g.type(x).rank()));
  if (dims.empty() || g.type(x).rank() == 0) return {x};
  return {g.op("reverse", {x}, g.type(x), "dimensions = " + ir::dense_i64_array(dims))};
}

// Rotates `x` by `shift` along `dim`: the last `shift` elements move to the front.
Value roll_dim(Graph& g, Value x, int64_t shift, int64_t dim) {
  const int64_t n = g.type(x).dims[static_cast<size_t>(dim)];
  if (n == 0) return x;
  const int64_t s = ((shift % n) + n) % n;
  if (s == 0) return x;
  return g.concatenate({slice_dim(g, x, dim, n - s, n), slice_dim(g, x, dim, 0, n - s)}, dim);
}

// roll(self, shifts[], dims[]): with no dims, over the flattened tensor.
std::vector<Value> lower_roll(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type t = g.type(x);
  const std::vector<int64_t>& shifts = ctx.ints(1);
  const std::vector<int64_t>& dims = ctx.ints(2);
  if (dims.empty()) {
    Value flat = roll_dim(g, g.reshape(x, {t.numel()}), shifts.at(0), 0);
    return {g.reshape(flat, t.dims)};
  }
  for (size_t i = 0; i < dims.size(); ++i) x = roll_dim(g, x, shifts.at(i), wrap_dim(dims[i], t.rank()));
  return {x};
}

// tril/triu(self, diagonal): keeps elements with (col - row) <= diagonal (tril) or >= diagonal (triu)
// over the last two dims.
std::vector<Value> triangle(LoweringContext& ctx, Comparison keep) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type& t = g.type(x);
  const Type index{DType::kI64, t.dims};
  Value offset = g.binary("subtract", g.iota(index, t.rank() - 1), g.iota(index, t.rank() - 2));
  Value diagonal = g.constant_int(ctx.is_none(1) ? 0 : ctx.integer(1), DType::kI64, t.dims);
  Value inside = g.compare(offset, diagonal, keep);
  return {g.select(inside, x, g.constant_int(0, t.dtype, t.dims))};
}
std::vector<Value> lower_tril(LoweringContext& ctx) { return triangle(ctx, Comparison::kLE); }
std::vector<Value> lower_triu(LoweringContext& ctx) { return triangle(ctx, Comparison::kGE); }

// repeat(self, repeats[]): broadcast to [r0, d0, r1, d1, ...] and merge each pair, one program instead
// of PyTorch's expand + copy decomposition.
std::vector<Value> lower_repeat(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value x = ctx.tensor(0);
  const Type& t = g.type(x);
  const std::vector<int64_t>& repeats = ctx.ints(1);
  std::vector<int64_t> padded(repeats.size() - t.dims.size(), 1);
  padded.insert(padded.end(), t.dims.begin(), t.dims.end());
  std::vector<int64_t> pairs, positions;
  for (size_t i = 0; i < repeats.size(); ++i) {
    pairs.push_back(repeats[i]);
    pairs.push_back(padded[i]);
    positions.push_back(static_cast<int64_t>(2 * i + 1));
  }
  Value spread = g.broadcast_in_dim(g.reshape(x, padded), pairs, positions);
  return {g.reshape(spread, out(ctx).dims)};
}

// `self` with `src` placed along `dim` at start, start + step, ...: `src` is padded into place (interior
// padding spaces it by `step`) and selected by a mask padded the same way.
Value embed(Graph& g, Value self, Value src, int64_t dim, int64_t start, int64_t step) {
  const Type& t = g.type(self);
  src = g.convert(src, t.dtype);
  const Type& s = g.type(src);
  const int64_t count = s.dims[static_cast<size_t>(dim)];
  if (count == 0 || s.numel() == 0) return self;
  std::vector<int64_t> low(t.dims.size(), 0), high(t.dims.size(), 0), interior(t.dims.size(), 0);
  low[static_cast<size_t>(dim)] = start;
  high[static_cast<size_t>(dim)] = t.dims[static_cast<size_t>(dim)] - (start + (count - 1) * step + 1);
  interior[static_cast<size_t>(dim)] = step - 1;
  const std::string attributes = "edge_padding_low = " + ir::dense_i64_array(low) +
                                 ", edge_padding_high = " + ir::dense_i64_array(high) +
                                 ", interior_padding = " + ir::dense_i64_array(interior);
  Value placed = g.op("pad", {src, g.constant_int(0, t.dtype)}, t, attributes);
  Value mask = g.op("pad", {g.constant_int(1, DType::kBool, s.dims), g.constant_int(0, DType::kBool)},
                    Type{DType::kBool, t.dims}, attributes);
  return g.select(mask, placed, self);
}

// slice_scatter(self, src, dim, start?, end?, step): bounds normalized as Tensor.slice does.
std::vector<Value> lower_slice_scatter(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = ctx.tensor(0);
  const Type& t = g.type(self);
  const int64_t dim = wrap_dim(ctx.integer(2), t.rank());
  const int64_t n = t.dims[static_cast<size_t>(dim)];
  int64_t start = ctx.is_none(3) ? 0 : ctx.integer(3);
  if (start < 0) start += n;
  start = std::min(std::max<int64_t>(start, 0), n);
  const int64_t step = ctx.is_none(5) ? 1 : ctx.integer(5);
  return {embed(g, self, ctx.tensor(1), dim, start, step)};
}

// select_scatter(self, src, dim, index): src lacks `dim`; it goes back in as a size-1 slice.
std::vector<Value> lower_select_scatter(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = ctx.tensor(0);
  const Type& t = g.type(self);
  const int64_t dim = wrap_dim(ctx.integer(2), t.rank());
  int64_t index = ctx.integer(3);
  if (index < 0) index += t.dims[static_cast<size_t>(dim)];
  std::vector<int64_t> dims = t.dims;
  dims[static_cast<size_t>(dim)] = 1;
  return {embed(g, self, g.reshape(ctx.tensor(1), dims), dim, index, 1)};
}

// diagonal_scatter(self, src, offset, dim1, dim2): src is [other dims..., L]. Element k of the diagonal
// sits at row k (offset >= 0) or column k (offset < 0), so src is laid along that dim, padded to its
// length and broadcast over the other; a mask (col - row == offset) picks the diagonal.
std::vector<Value> lower_diagonal_scatter(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  Value self = ctx.tensor(0);
  const Type& t = g.type(self);
  Value src = g.convert(ctx.tensor(1), t.dtype);
  const Type s = g.type(src);
  if (s.numel() == 0) return {self};
  const int64_t offset = ctx.integer(2);
  const int64_t dim1 = wrap_dim(ctx.integer(3), t.rank());
  const int64_t dim2 = wrap_dim(ctx.integer(4), t.rank());
  const int64_t along = offset >= 0 ? dim1 : dim2;
  std::vector<int64_t> low(s.dims.size(), 0), high(s.dims.size(), 0);
  high.back() = t.dims[static_cast<size_t>(along)] - s.dims.back();
  Value padded = g.pad(src, g.constant_int(0, t.dtype), low, high);
  std::vector<int64_t> positions;
  for (int64_t d = 0; d < t.rank(); ++d) {
    if (d != dim1 && d != dim2) positions.push_back(d);
  }
  positions.push_back(along);
  Value spread = broadcast_unordered(g, padded, t.dims, positions);
  const Type index{DType::kI64, t.dims};
  Value difference = g.binary("subtract", g.iota(index, dim2), g.iota(index, dim1));
  Value on_diagonal = g.compare(difference, g.constant_int(offset, DType::kI64, t.dims), Comparison::kEQ);
  return {g.select(on_diagonal, spread, self)};
}

// masked_fill.Scalar / masked_fill.Tensor(self, mask, value): the mask broadcasts to self.
std::vector<Value> lower_masked_fill_scalar(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  Value mask = cast_to(g, ctx.tensor(1), Type{DType::kBool, t.dims});
  return {g.select(mask, ctx.scalar(2, t.dtype, t.dims), cast_to(g, ctx.tensor(0), t))};
}

std::vector<Value> lower_masked_fill_tensor(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  Value mask = cast_to(g, ctx.tensor(1), Type{DType::kBool, t.dims});
  return {g.select(mask, cast_to(g, ctx.tensor(2), t), cast_to(g, ctx.tensor(0), t))};
}

// unfold_backward(grad_in, input_sizes, dim, size, step): grad_in is [..., windows, ..., size] with the windows
// at `dim`; element k of window w came from position w * step + k. Each k adds its slice back, spread by
// interior padding to every step-th position. grad_in may broadcast to that shape, as CPU's kernel lets it
// (torch.istft's decomposition passes a window envelope of batch 1).
std::vector<Value> lower_unfold_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const int64_t rank = t.rank();
  if (rank == 0) return {g.convert(g.reshape(ctx.tensor(0), {}), t.dtype)};
  const int64_t dim = wrap_dim(ctx.integer(2), rank);
  const int64_t size = ctx.integer(3), step = ctx.integer(4);
  const int64_t windows = (t.dims[dim] - size) / step + 1;
  std::vector<int64_t> grad_dims = t.dims;
  grad_dims[dim] = windows;
  grad_dims.push_back(size);
  Value grad = cast_to(g, ctx.tensor(0), Type{ctx.type_of(0).dtype, grad_dims});
  const DType accumulate = accumulation_dtype(t.dtype);
  Value total = g.constant(0.0, accumulate, t.dims);
  std::vector<int64_t> sliced = t.dims;
  sliced[dim] = windows;
  Value zero = g.constant(0.0, accumulate);
  for (int64_t k = 0; k < size && windows > 0; ++k) {
    std::vector<int64_t> start(grad_dims.size(), 0), limit = grad_dims, unit(grad_dims.size(), 1);
    start.back() = k;
    limit.back() = k + 1;
    Value part = g.convert(g.reshape(g.slice(grad, start, limit, unit), sliced), accumulate);
    std::vector<int64_t> low(rank, 0), high(rank, 0), interior(rank, 0);
    low[dim] = k;
    high[dim] = t.dims[dim] - (k + (windows - 1) * step + 1);
    interior[dim] = step - 1;
    total = g.binary("add", total, g.pad(part, zero, low, high, interior));
  }
  return {g.convert(total, t.dtype)};
}

// ---- masked_scatter, nonzero_static -----------------------------------------------------------------

// The flat positions of a 1-d bool `mask`, true ones first, each group in increasing order (a stable
// sort on "is false"): element k < count of true is the k-th true position.
Value true_positions_first(Graph& g, Value mask) {
  return stable_argsort(g, g.convert(g.unary("not", mask), DType::kI32), 0, false);
}

// masked_scatter(self, mask, source): the k-th true position of the (broadcast) mask takes source's k-th
// element. A source with fewer elements than the mask has true ones fails CPU's value check; with checks
// off, the positions past source's end keep self's values.
std::vector<Value> lower_masked_scatter(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const int64_t n = t.numel();
  if (n == 0) return {cast_to(g, ctx.tensor(0), t)};
  Value mask = g.reshape(cast_to(g, ctx.tensor(1), Type{DType::kBool, t.dims}), {n});
  Value self = g.reshape(cast_to(g, ctx.tensor(0), t), {n});
  const int64_t available = ctx.type_of(2).numel();
  Value selected = g.reduce(g.convert(mask, DType::kI64), g.constant_int(0, DType::kI64), {0}, ir::Reducer::kAdd);
  ctx.check(CheckKind::kMaskedScatterSize, g.compare(selected, g.constant_int(available, DType::kI64), Comparison::kGT));
  const int64_t taken = std::min(n, available);
  if (taken == 0) return {g.reshape(self, t.dims)};
  Value source = g.slice(g.reshape(g.convert(ctx.tensor(2), t.dtype), {available}), {0}, {taken}, {1});
  Value targets = g.reshape(g.slice(true_positions_first(g, mask), {0}, {taken}, {1}), {taken, 1});
  // Targets past the count of true positions are false ones: the select below discards what lands there.
  Value scattered = g.scatter_flat(self, targets, source);
  return {g.reshape(g.select(mask, scattered, self), t.dims)};
}

// masked_scatter_backward(grad_output, mask, sizes): source's gradient, the k-th true position's grad for
// each k below the count of true positions, zeros after.
std::vector<Value> lower_masked_scatter_backward(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);
  const Type& grad_type = ctx.type_of(0);
  const int64_t n = grad_type.numel(), wanted = t.numel();
  const int64_t taken = std::min(n, wanted);
  Value zeros = g.constant(0.0, t.dtype, {wanted});
  if (taken == 0) return {g.reshape(zeros, t.dims)};
  Value mask = g.reshape(cast_to(g, ctx.tensor(1), Type{DType::kBool, grad_type.dims}), {n});
  Value grad = g.reshape(ctx.tensor(0), {n});
  Value positions = g.reshape(g.slice(true_positions_first(g, mask), {0}, {taken}, {1}), {taken, 1});
  Value picked = g.select(g.gather_flat(mask, positions), g.gather_flat(grad, positions),
                          g.constant(0.0, t.dtype, {taken}));
  if (taken < wanted) picked = g.concatenate({picked, g.slice(zeros, {0}, {wanted - taken}, {1})}, 0);
  return {g.reshape(picked, t.dims)};
}

// nonzero_static(self, size, fill_value): the row-major indices of the first `size` nonzero elements, rows
// past their count filled with fill_value.
std::vector<Value> lower_nonzero_static(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& t = out(ctx);  // [size, rank] int64
  const Type& in = ctx.type_of(0);
  const int64_t n = in.numel(), size = t.dims[0], rank = t.dims[1];
  const int64_t taken = std::min(n, size);
  Value fill = g.constant_int(ctx.integer(2), DType::kI64, t.dims);
  if (taken == 0 || rank == 0) return {fill};
  Value flat = g.reshape(ctx.tensor(0), {n});
  Value nonzero = g.compare(flat, g.constant(0.0, in.dtype, {n}), Comparison::kNE);
  Value positions = g.slice(true_positions_first(g, nonzero), {0}, {taken}, {1});
  // Row k is real when k < count of nonzeros.
  Value count = g.reduce(g.convert(nonzero, DType::kI64), g.constant_int(0, DType::kI64), {0}, ir::Reducer::kAdd);
  Value real_row = g.compare(g.iota(Type{DType::kI64, {taken}}, 0), broadcast_to(g, count, {taken}), Comparison::kLT);
  std::vector<Value> columns;
  int64_t stride = 1;
  for (int64_t d = rank - 1; d >= 0; --d) {
    Value index = g.binary("remainder", g.binary("divide", positions, g.constant_int(stride, DType::kI64, {taken})),
                           g.constant_int(in.dims[d], DType::kI64, {taken}));
    columns.insert(columns.begin(), g.reshape(index, {taken, 1}));
    stride *= in.dims[d];
  }
  Value rows = g.select(broadcast_to(g, g.reshape(real_row, {taken, 1}), {taken, rank}), g.concatenate(columns, 1),
                        g.constant_int(ctx.integer(2), DType::kI64, {taken, rank}));
  if (taken < size) rows = g.concatenate({rows, g.slice(fill, {0, 0}, {size - taken, rank}, {1, 1})}, 0);
  return {rows};
}

// torchtpu::_append_rows(storage, piece, rows, capacity) -> Tensor
// A growing cat (aten/append.cc): `storage` (1-d) starts with a contiguous [outer, rows, inner] array, `piece`
// is [outer, m, inner]; the result (1-d, [outer * capacity * inner]) starts with their concatenation along
// the middle dim, contiguous as [outer, rows + m, inner], and holds zeros after it. `rows` is an operand,
// so one program serves every length that fits `capacity`. Each outer block moves with one dynamic slice
// and one dynamic update (a gather of computed positions cost 20-35x CPU's cat on an [8, 8, 200, 64] cache):
// block o of the old array, read with what follows it up to a whole old block's size, is written at its new
// place, then its new rows after it; the next block's writes overwrite what the read carried along.
std::vector<Value> lower_append_rows(LoweringContext& ctx) {
  Graph& g = ctx.graph;
  const Type& pt = ctx.type_of(1);
  const int64_t outer = pt.dims[0], added = pt.dims[1], inner = pt.dims[2];
  const int64_t total = outer * ctx.integer(3) * inner;
  const DType dtype = ctx.outputs[0].dtype;
  Value old = cast_to(g, ctx.tensor(0), Type{dtype, ctx.type_of(0).dims});
  const int64_t old_block = ctx.type_of(0).dims[0] / outer;  // the old capacity's rows, times inner
  Value piece = g.reshape(cast_to(g, ctx.tensor(1), Type{dtype, pt.dims}), {outer, added * inner});
  Value rows = g.convert(ctx.scalar(2, DType::kI64), DType::kI64);
  auto i64 = [&](int64_t v) { return g.constant_int(v, DType::kI64); };
  Value old_row_elements = g.binary("multiply", rows, i64(inner));
  Value new_row_elements = g.binary("multiply", g.binary("add", rows, i64(added)), i64(inner));
  Value out = g.constant(0, dtype, {total});
  for (int64_t o = 0; o < outer; ++o) {
    Value start = g.binary("multiply", i64(o), new_row_elements);
    Value block = g.dynamic_slice(old, {g.binary("multiply", i64(o), old_row_elements)}, {old_block});
    out = g.dynamic_update_slice(out, block, {start});
    Value new_rows = g.reshape(g.slice(piece, {o, 0}, {o + 1, added * inner}, {1, 1}), {added * inner});
    out = g.dynamic_update_slice(out, new_rows, {g.binary("add", start, old_row_elements)});
  }
  Value used = g.broadcast_in_dim(g.binary("multiply", i64(outer), new_row_elements), {total}, {});
  Value inside = g.compare(g.iota(Type{DType::kI64, {total}}, 0), used, Comparison::kLT);
  return {g.select(inside, out, g.constant(0, dtype, {total}))};
}

}  // namespace

void add_shape_rules(std::vector<Rule>& table) {
  table.push_back({"aten::cat", &lower_cat});
  table.push_back({"torchtpu::_append_rows", &lower_append_rows});
  table.push_back({"aten::constant_pad_nd", &lower_constant_pad_nd});
  table.push_back({"aten::diagonal_scatter", &lower_diagonal_scatter});
  table.push_back({"aten::flip", &lower_flip});
  table.push_back({"aten::masked_fill.Scalar", &lower_masked_fill_scalar});
  table.push_back({"aten::masked_fill.Tensor", &lower_masked_fill_tensor});
  table.push_back({"aten::masked_scatter", &lower_masked_scatter});
  table.push_back({"aten::masked_scatter_backward", &lower_masked_scatter_backward});
  table.push_back({"aten::nonzero_static", &lower_nonzero_static});
  table.push_back({"aten::unfold_backward", &lower_unfold_backward});
  table.push_back({"aten::repeat", &lower_repeat});
  table.push_back({"aten::roll", &lower_roll});
  table.push_back({"aten::select_scatter", &lower_select_scatter});
  table.push_back({"aten::slice_scatter", &lower_slice_scatter});
  table.push_back({"aten::tril", &lower_tril});
  table.push_back({"aten::triu", &lower_triu});
}

}  // namespace torchtpu::lowering
