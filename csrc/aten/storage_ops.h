// Kernels that create, resize or re-point storages; none of them runs a program.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchtpu::aten {

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format);
at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory);
const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<at::MemoryFormat> memory_format);
at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, int64_t offset, c10::IntArrayRef size,
                                      c10::IntArrayRef stride);
at::Tensor& set_source_storage(at::Tensor& self, at::Storage source);
at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source);
at::Tensor& set_empty(at::Tensor& self);
// Whether `self.data = from` may swap the TensorImpl's contents in place (CPU and tpu dense tensors may).
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from);

// Grows or shrinks a storage to `nbytes`, keeping the leading bytes.
void resize_storage_bytes(const c10::Storage& storage, size_t nbytes);

}  // namespace torchtpu::aten
