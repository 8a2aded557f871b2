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

namespace torchtpu::aten {

struct StorageHandle;

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

// Meta kernels of the internal ops, for shape inference.
at::Tensor append_rows_meta(const at::Tensor& storage, const at::Tensor& piece, const at::Scalar& rows,
                            int64_t capacity);
std::tuple<at::Tensor, at::Tensor, at::Tensor, at::Tensor> attention_prefix_meta(
    const at::Tensor& query, const at::Tensor& key_storage, const at::Tensor& value_storage,
    const at::Scalar& kv_len, int64_t kv_heads, int64_t capacity, bool is_causal, std::optional<double> scale);

}  // namespace torchtpu::aten
