// Ops whose result shape depends on the values: bincount, nonzero (and argwhere, which decomposes into it),
// masked_select, boolean-mask indexing (index.Tensor, index_put), unique (_unique, _unique2, unique_dim) and
// unique_consecutive. Each computes its count on the device and reads back that one integer, the op's
// only sync (a pending fused trace flushes there, reason "data-dependent shape"); a static-size program
// then produces the result on the device. Its size is the count rounded up to a power of two (at most
// the largest possible count), and the result is the leading slice, so these programs compile once per
// power of two rather than once per count (docs/ops.md).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <tuple>

namespace torchtpu::aten {

// bincount: the values' range is the one host read (their minimum, for CPU's check, and their maximum).
at::Tensor bincount(const at::Tensor& self, const std::optional<at::Tensor>& weights, int64_t minlength);
at::Tensor nonzero(const at::Tensor& self);
at::Tensor& nonzero_out(const at::Tensor& self, at::Tensor& out);
at::Tensor masked_select(const at::Tensor& self, const at::Tensor& mask);
at::Tensor& masked_select_out(const at::Tensor& self, const at::Tensor& mask, at::Tensor& out);

// torch.unique with dim=None. sorted=False returns sorted values too (PyTorch allows either order).
std::tuple<at::Tensor, at::Tensor, at::Tensor> unique2(const at::Tensor& self, bool sorted, bool return_inverse,
                                                       bool return_counts);

// _unique: unique2 without counts.
std::tuple<at::Tensor, at::Tensor> unique(const at::Tensor& self, bool sorted, bool return_inverse);

// torch.unique with a dim (unique_dim) and unique_consecutive (with or without a dim): slices along the dim
// compared as rows; unique_dim sorts them lexicographically first (one stable sort per element of a slice).
void unique_dim_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);
void unique_consecutive_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// index.Tensor: boolean masks become integer indices (the device nonzero), then the lowered op runs.
void index_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// index_put, index_put_, _index_put_impl_: a write through one mask whose values do not depend on the
// count stays one static program (a select); other boolean masks become integer indices first.
void index_put_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torchtpu::aten
