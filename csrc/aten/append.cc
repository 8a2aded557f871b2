#include "aten/append.h"

#include <ATen/ExpandUtils.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/_to_copy.h>
#include <ATen/ops/_to_copy_native.h>
#include <c10/core/WrapDimMinimal.h>
#include <c10/util/SmallVector.h>

#include <algorithm>
#include <atomic>
#include <unordered_map>

#include "aten/op_kernel.h"
#include "aten/op_key.h"
#include "aten/storage.h"
#include "runtime/plugin.h"

namespace torchtpu::aten {
namespace {

// Positions a growing tensor's storage has room for: the next power of two, at least 16.
int64_t capacity_for(int64_t rows) {
  int64_t capacity = 16;
  while (capacity < rows) capacity *= 2;
  return capacity;
}

// Elements of `t`'s dtype that its storage holds.
int64_t stored_elements(const at::Tensor& t) { return static_cast<int64_t>(t.storage().nbytes()) / t.element_size(); }

// A tpu tensor laid out contiguously from the start of its storage: its storage, read whole as 1-d, begins
// with its elements in order.
bool starts_its_storage(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1 && t.is_contiguous() &&
         t.storage_offset() == 0;
}

int64_t product(c10::IntArrayRef sizes) {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

at::Tensor whole_storage(const at::Tensor& t) { return t.as_strided({stored_elements(t)}, {1}, 0); }

// cat([a, b], dim) as an append with spare capacity, or nothing when the call is not an append.
std::optional<at::Tensor> append(const at::Tensor& a, const at::Tensor& b, int64_t dim) {
  if (!starts_its_storage(a) || !b.defined() || b.device() != a.device() || b.scalar_type() != a.scalar_type() ||
      a.dim() == 0 || b.dim() != a.dim() || a.is_complex()) {
    return std::nullopt;  // complex: torchtpu::_append_rows has no complex rule; the lowered cat has one
  }
  const int64_t d = c10::maybe_wrap_dim(dim, a.dim());
  for (int64_t i = 0; i < a.dim(); ++i) {
    if (i != d && a.size(i) != b.size(i)) return std::nullopt;  // the lowered cat raises CPU's error
  }
  const int64_t rows = a.size(d), added = b.size(d);
  const int64_t outer = product(a.sizes().slice(0, d)), inner = product(a.sizes().slice(d + 1));
  if (rows == 0 || added == 0 || outer == 0 || inner == 0) return std::nullopt;
  // Growing: `a` came from an earlier append (its storage has room), or a small piece joins a longer
  // tensor. Any other cat keeps its exact storage.
  const bool has_room = stored_elements(a) > a.numel();
  if (!has_room && added * 4 > rows) return std::nullopt;

  static const auto append_rows =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("torchtpu::_append_rows", "")
          .typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Scalar&, int64_t)>();
  const at::Tensor flat =
      append_rows.call(whole_storage(a), b.reshape({outer, added, inner}), at::Scalar(rows), capacity_for(rows + added));
  mark_grown(storage_handle(flat), outer, inner);
  std::vector<int64_t> sizes = a.sizes().vec();
  sizes[static_cast<size_t>(d)] = rows + added;
  std::vector<int64_t> strides(sizes.size(), 1);
  for (size_t i = sizes.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * std::max<int64_t>(sizes[i], 1);
  return flat.as_strided(sizes, strides, 0);
}

// visit(argument index, tensor, whether it is a list element) for each tensor argument and each element of a
// tensor-list argument.
template <class Visit>
void for_each_tensor(const torch::jit::Stack& stack, size_t first, const Visit& visit) {
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      visit(i - first, v.toTensor(), false);
    } else if (is_tensor_list(v)) {
      for (const at::Tensor& t : list_elements(v)) visit(i - first, t, true);
    }
  }
}

bool is_device_tensor(const at::Tensor& t) {
  return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1;
}

// An op that indexes a grown tensor along its growing dim would check the indices against the padded size, so
// an index past the length would read padding where CPU raises: such a call runs as shaped.
bool indexes_own_rows(const OpInfo& info, const torch::jit::Stack& stack, size_t first, int64_t length) {
  const c10::IValue& self = stack[first];
  if (!self.isTensor() || !is_device_tensor(self.toTensor())) return false;
  const at::Tensor& t = self.toTensor();
  const StorageHandle& storage = storage_handle(t);
  const std::optional<GrownRows> rows = storage.growing ? grown_rows(t, storage) : std::nullopt;
  if (!rows || rows->length != length) return false;
  const std::string& op = info.name;
  if (op == "aten::gather" || op == "aten::scatter.src" || op == "aten::scatter.value" || op == "aten::index_select") {
    return c10::maybe_wrap_dim(stack[first + 1].toInt(), t.dim()) == rows->dim;
  }
  if (op == "aten::index.Tensor") {
    const std::vector<at::Tensor> indices = list_elements(stack[first + 1]);
    return static_cast<int>(indices.size()) > rows->dim && indices[static_cast<size_t>(rows->dim)].defined();
  }
  return false;
}

// Until a process makes its first grown array, no call looks for one.
std::atomic<bool> grown_arrays_made{false};

}  // namespace

void mark_grown(StorageHandle& storage, int64_t outer, int64_t inner) {
  storage.growing = true;
  storage.grown_outer = outer;
  storage.grown_inner = inner;
  grown_arrays_made.store(true, std::memory_order_relaxed);
}

RowPadding row_padding_of(const std::string& op) {
  // Each result position reads the same position of its inputs, broadcast or not; or an index's position
  // names which rows it reads (gather, index_select, index) or writes (scatter without a reduction: a
  // padded index repeats the last real one with the last real value); or a prefix (cumsum); or it reduces
  // with an idempotent operation (any, all, amax, amin). Not listed: ops that mix rows (softmax, mean,
  // flip, sort, ...) and scatters that accumulate.
  static const std::unordered_map<std::string, RowPadding> ops = [] {
    std::unordered_map<std::string, RowPadding> m;
    for (const char* name : {
             "aten::add.Tensor", "aten::add.Scalar", "aten::sub.Tensor", "aten::sub.Scalar", "aten::rsub.Tensor",
             "aten::rsub.Scalar", "aten::mul.Tensor", "aten::mul.Scalar", "aten::div.Tensor", "aten::div.Scalar",
             "aten::div.Tensor_mode", "aten::remainder.Tensor", "aten::remainder.Scalar", "aten::fmod.Tensor",
             "aten::fmod.Scalar", "aten::pow.Tensor_Scalar", "aten::pow.Tensor_Tensor", "aten::maximum",
             "aten::minimum", "aten::eq.Tensor", "aten::eq.Scalar", "aten::ne.Tensor", "aten::ne.Scalar",
             "aten::lt.Tensor", "aten::lt.Scalar", "aten::le.Tensor", "aten::le.Scalar", "aten::gt.Tensor",
             "aten::gt.Scalar", "aten::ge.Tensor", "aten::ge.Scalar", "aten::bitwise_and.Tensor",
             "aten::bitwise_and.Scalar", "aten::bitwise_or.Tensor", "aten::bitwise_or.Scalar",
             "aten::bitwise_xor.Tensor", "aten::bitwise_not", "aten::logical_and", "aten::logical_or",
             "aten::logical_not", "aten::where.self", "aten::where.ScalarSelf", "aten::where.ScalarOther",
             "aten::where.Scalar", "aten::clamp", "aten::clamp.Tensor", "aten::clamp_min", "aten::clamp_max",
             "aten::neg", "aten::abs", "aten::exp", "aten::log", "aten::sigmoid", "aten::masked_fill.Scalar",
             "aten::masked_fill.Tensor", "aten::clone", "aten::gather", "aten::scatter.src", "aten::scatter.value",
             "aten::index_select", "aten::index.Tensor", "aten::isin.Tensor_Tensor", "aten::isin.Tensor_Scalar",
             "aten::cumsum", "aten::any", "aten::any.dim", "aten::all", "aten::all.dim", "aten::amax",
             "aten::amin"}) {
      m.emplace(name, RowPadding::kEdge);
    }
    for (const char* name : {"aten::sum", "aten::sum.dim_IntList"}) m.emplace(name, RowPadding::kZero);
    return m;
  }();
  const auto found = ops.find(op);
  return found == ops.end() ? RowPadding::kNone : found->second;
}

std::optional<GrownRows> grown_rows(const at::Tensor& t, const StorageHandle& storage) {
  if (!storage.growing || storage.grown_inner <= 0 || !starts_its_storage(t)) return std::nullopt;
  const int64_t outer = storage.grown_outer, inner = storage.grown_inner;
  // The dim whose outer dims hold `outer` elements and that leaves `inner` after it; unique for lengths > 1.
  int64_t before = 1;
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t length = t.size(d);
    if (before == outer && length > 1 && before * length * inner == t.numel()) {
      const int64_t stored = stored_elements(t);
      if (stored % (outer * inner) != 0 || stored / (outer * inner) <= length) return std::nullopt;
      return GrownRows{static_cast<int>(d), length, stored / (outer * inner)};
    }
    before *= length;
    if (before > outer) break;
  }
  return std::nullopt;
}

RowCall row_call(const OpInfo& info, const torch::jit::Stack& stack, size_t first) {
  if (info.row_padding == RowPadding::kNone || !grown_arrays_made.load(std::memory_order_relaxed)) return {};
  RowCall call;
  call.padding = info.row_padding;
  bool runs_as_shaped = false;
  for_each_tensor(stack, first, [&](size_t arg, const at::Tensor& t, bool) {
    if (runs_as_shaped || !is_device_tensor(t)) return;
    const StorageHandle& storage = storage_handle(t);
    if (!storage.growing) return;
    const std::optional<GrownRows> rows = grown_rows(t, storage);
    if (!rows) return;
    // A written grown tensor, and lengths that differ, keep their shapes.
    runs_as_shaped = is_mutated(info, arg) || (call.length != 0 && call.length != rows->length) ||
                     storage.grown_outer > kMaxPaddedBlocks || storage_layout(t).first != to_dtype(t.scalar_type());
    call.length = rows->length;
    call.padded = std::max(call.padded, rows->capacity);
  });
  if (call.length == 0 || runs_as_shaped || runtime::device_count() > 1) return {};
  for_each_tensor(stack, first, [&](size_t, const at::Tensor& t, bool in_list) {
    if (runs_as_shaped || !t.defined() || is_cpu_scalar(t)) return;
    // Boolean or byte masks among index's indices select a data-dependent number of rows.
    runs_as_shaped = in_list && (t.scalar_type() == at::kBool || t.scalar_type() == at::kByte);
    if (!is_device_tensor(t) || (storage_handle(t).growing && grown_rows(t, storage_handle(t)))) return;
    for (int64_t size : t.sizes()) runs_as_shaped |= size == call.length;
  });
  return runs_as_shaped || indexes_own_rows(info, stack, first, call.length) ? RowCall{} : call;
}

uint64_t runtime_stride_dims(const at::Tensor& t, const StorageHandle& storage) {
  if (!storage.growing || t.dim() > 64) return 0;
  // The dims that move the address, outermost first. A permutation of a dense tensor (a transposed KV cache)
  // has every stride its order and sizes give; a part of one (the last column of a batch) does not.
  c10::SmallVector<int64_t, 6> order;
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) != 1 && t.stride(d) != 0) order.push_back(d);
  }
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return t.stride(a) > t.stride(b); });
  uint64_t dims = 0;
  int64_t dense_stride = 1;
  for (size_t k = order.size(); k-- > 0;) {
    const int64_t d = order[k];
    if (t.stride(d) != dense_stride) dims |= uint64_t{1} << d;
    dense_stride *= t.size(d);
  }
  return dims;
}

void cat_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const size_t first = stack->size() - 2;
  const std::vector<at::Tensor> parts = list_elements((*stack)[first]);
  if (parts.size() == 2) {
    if (std::optional<at::Tensor> grown = append(parts[0], parts[1], (*stack)[first + 1].toInt())) {
      torch::jit::drop(*stack, 2);
      stack->emplace_back(std::move(*grown));
      return;
    }
  }
  op_kernel(op, stack);
}

void attention_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // (query, key, value, attn_bias, dropout_p, is_causal, return_debug_mask, *, scale)
  const size_t first = stack->size() - 8;
  const torch::jit::Stack& s = *stack;
  const at::Tensor& q = s[first].toTensor();
  const at::Tensor& k = s[first + 1].toTensor();
  const at::Tensor& v = s[first + 2].toTensor();
  const bool plain = s[first + 3].isNone() && s[first + 4].toDouble() == 0.0 && !s[first + 6].toBool();
  int64_t capacity = 0;
  if (plain && q.dim() == 4 && starts_its_storage(k) && starts_its_storage(v) && k.dim() == 4 && v.dim() == 4 &&
      k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(1) == v.size(1) && k.size(2) == v.size(2) &&
      q.size(1) % k.size(1) == 0 && k.numel() > 0 && v.numel() > 0) {
    // Both storages hold exactly `capacity` positions, as an append leaves them.
    const int64_t outer = k.size(0) * k.size(1);
    capacity = stored_elements(k) / (outer * k.size(3));
    if (stored_elements(k) != outer * capacity * k.size(3) || stored_elements(v) != outer * capacity * v.size(3)) {
      capacity = 0;
    }
  }
  const int64_t kv_len = k.dim() == 4 ? k.size(2) : 0;
  if (capacity <= kv_len) {
    op_kernel(op, stack);
    return;
  }
  static const auto attention_prefix =
      c10::Dispatcher::singleton()
          .findSchemaOrThrow("torchtpu::_attention_prefix", "")
          .typed<std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor>(
              const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Scalar&, int64_t, int64_t, bool,
              std::optional<double>)>();
  auto [out, lse, seed, offset] =
      attention_prefix.call(q, whole_storage(k), whole_storage(v), at::Scalar(kv_len), k.size(1), capacity,
                            s[first + 5].toBool(), s[first + 7].toOptional<double>());
  const int64_t query_len = q.size(2);
  torch::jit::drop(*stack, 8);
  stack->emplace_back(std::move(out));
  stack->emplace_back(std::move(lse));
  stack->emplace_back(at::Tensor());  // cum_seq_q
  stack->emplace_back(at::Tensor());  // cum_seq_k
  stack->emplace_back(query_len);     // max_q
  stack->emplace_back(kv_len);        // max_k
  stack->emplace_back(std::move(seed));
  stack->emplace_back(std::move(offset));
  stack->emplace_back(at::Tensor());  // debug_attn_mask
}

at::Tensor to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                   std::optional<at::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<at::MemoryFormat> memory_format) {
  const bool same_device = !device || (device->type() == self.device().type() &&
                                       (!device->has_index() || device->index() == self.device().index()));
  const bool dense = (!layout || *layout == at::kStrided) && !pin_memory.value_or(false) &&
                     (!memory_format || *memory_format == at::MemoryFormat::Preserve ||
                      *memory_format == at::MemoryFormat::Contiguous);
  const bool real = !self.is_complex() && !(dtype && at::isComplexType(*dtype)) && !self.is_neg();
  if (same_device && dense && real && starts_its_storage(self)) {
    const StorageHandle& storage = storage_handle(self);
    if (storage.growing && grown_rows(self, storage)) {
      // Converting the whole storage converts the rows where they lie: the result is a grown array too.
      const at::Tensor whole =
          at::_to_copy(whole_storage(self), dtype, std::nullopt, std::nullopt, std::nullopt, non_blocking, std::nullopt);
      mark_grown(storage_handle(whole), storage.grown_outer, storage.grown_inner);
      return whole.as_strided(self.sizes(), self.strides(), 0);
    }
  }
  return at::native::_to_copy(self, dtype, layout, device, pin_memory, non_blocking, memory_format);
}

at::Tensor append_rows_meta(const at::Tensor& storage, const at::Tensor& piece, const at::Scalar& /*rows*/,
                            int64_t capacity) {
  return at::empty({piece.size(0) * capacity * piece.size(2)}, storage.options());
}

std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_prefix_meta(
    const at::Tensor& query, const at::Tensor& /*key_storage*/, const at::Tensor& value_storage,
    const at::Scalar& /*kv_len*/, int64_t kv_heads, int64_t capacity, bool /*is_causal*/,
    std::optional<double> /*scale*/) {
  const int64_t batch = query.size(0), heads = query.size(1), length = query.size(2);
  const int64_t value_dim = value_storage.numel() / (batch * kv_heads * capacity);
  // The output is laid out as the query is, as attention's own meta kernel lays it out.
  const std::vector<int64_t> sizes = {batch, heads, length, value_dim};
  return {at::empty_strided(sizes, at::infer_dense_strides(sizes, query.strides()), query.options()),
          at::empty({batch, heads, length}, query.options().dtype(at::kFloat)),
          at::empty({}, query.options().dtype(at::kLong)), at::empty({}, query.options().dtype(at::kLong))};
}

}  // namespace torchtpu::aten
