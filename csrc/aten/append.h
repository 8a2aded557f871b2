// Growing tensors: a cat that appends a small piece keeps spare capacity, and attention reads keys and
// values up to a runtime length, so a decode loop compiles once per capacity bucket, not once per token.
//
// Generation with a dynamic KV cache grows its key, value, token and mask tensors by one position per step
// (`torch.cat([cache, new], dim)`). Every op whose input has that length in its shape would compile a new
// program each step. Instead, such a cat writes its result contiguously at the start of a storage with
// room for a power-of-two number of positions; the tensor is exactly what CPU returns (same sizes, same
// contiguous strides), only its storage is larger. The next append reads the whole storage and takes the
// current length as an operand, and attention over such keys and values does the same: both programs are
// keyed by the storage's capacity.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <optional>
#include <string>

#include "aten/op_info.h"

namespace torchtpu::aten {

struct StorageHandle;

// Ops over grown tensors run padded to capacity. A tensor that is a whole grown array (contiguous from the
// start of a growing storage, [outer, length, inner] around one dim) is read as [outer, capacity, inner]
// with its rows padded (RowPadding), the op runs on the padded shapes, and each result whose `dim` follows
// the length is written back as a grown array of its own. The program takes the length as an operand: the
// ops that rebuild a padding mask, apply a repetition penalty or reorder beams at every token compile once
// per capacity, not once per length.
RowPadding row_padding_of(const std::string& op);

// Reading a grown array padded, and packing a result, costs a dynamic slice per block of `inner` rows (about
// 2 µs each on the CPU plugin, where a program per length costs nothing after its compile): tensors with more
// blocks than this (a KV cache of many heads) run as shaped.
constexpr int64_t kMaxPaddedBlocks = 8;

// Marks a new storage as a grown array [outer, length, inner] (set before anything else sees it).
void mark_grown(StorageHandle& storage, int64_t outer, int64_t inner);

struct GrownRows {
  int dim = -1;          // the dim that grows
  int64_t length = 0;    // its size
  int64_t capacity = 0;  // the rows the storage has room for
};
// `t` as a whole grown array, or nothing. `storage` is `t`'s.
std::optional<GrownRows> grown_rows(const at::Tensor& t, const StorageHandle& storage);

struct RowCall {
  int64_t length = 0;  // 0: the call runs as shaped
  int64_t padded = 0;  // the largest capacity among its grown tensors: every one is read padded to it
  RowPadding padding = RowPadding::kNone;
};
// Whether this call of `info` runs padded: its grown tensors share one length, none is written, and no other
// tensor has a dim of that length (a tensor shaped by the length but not grown would not line up).
RowCall row_call(const OpInfo& info, const torch::jit::Stack& stack, size_t first);

// A view into a growing storage has, along its outer dims, the growing tensor's row length as its stride
// (x[:, -1:] of a [2, L] tensor has strides (L, 1)), a new value at every token. Programs take such strides as
// operands: bit d is set for each dim d of `t` whose stride is not the one a dense tensor of its sizes, with
// its dims in the same memory order, would have (dims of size 1 and broadcast dims never count). So a whole
// grown tensor, or a permutation of it, keeps its strides in the key; 0 for any tensor outside a growing
// storage.
// `storage` is `t`'s (the op key has it at hand).
uint64_t runtime_stride_dims(const at::Tensor& t, const StorageHandle& storage);

// aten::cat: the growing case above, else the lowered cat.
void cat_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// aten::_scaled_dot_product_fused_attention_overrideable: keys and values with spare capacity go to
// torchtpu::_attention_prefix, everything else to the lowered op.
void attention_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// aten::_to_copy: a dtype conversion of a grown tensor (aten/append.h row_call) converts its whole storage,
// so the result grows on as well (`mask.long()`, `mask.bool()` in generation); anything else is PyTorch's
// own _to_copy (a new tensor and copy_).
at::Tensor to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                   std::optional<at::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<at::MemoryFormat> memory_format);

// Meta kernels of the internal ops, for shape inference.
at::Tensor append_rows_meta(const at::Tensor& storage, const at::Tensor& piece, const at::Scalar& rows,
                            int64_t capacity);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_prefix_meta(
    const at::Tensor& query, const at::Tensor& key_storage, const at::Tensor& value_storage,
    const at::Scalar& kv_len, int64_t kv_heads, int64_t capacity, bool is_causal, std::optional<double> scale);

}  // namespace torchtpu::aten
