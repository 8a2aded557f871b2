#include "aten/storage_ops.h"

#include <ATen/EmptyTensor.h>
#include <ATen/native/Resize.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <cstring>

#include "aten/fused.h"
#include "aten/storage.h"

namespace torchtpu::aten {
namespace {

c10::DispatchKeySet tpu_keys() { return c10::DispatchKeySet(c10::DispatchKey::PrivateUse1); }

void check_layout(std::optional<at::Layout> layout) {
  TORCH_CHECK(!layout.has_value() || *layout == at::kStrided, "tpu supports only strided tensors, got layout ", *layout);
}

}  // namespace

at::Tensor empty_memory_format(c10::IntArrayRef size, std::optional<at::ScalarType> dtype,
                               std::optional<at::Layout> layout, std::optional<at::Device> device,
                               std::optional<bool> pin_memory, std::optional<at::MemoryFormat> memory_format) {
  check_layout(layout);
  TORCH_CHECK(!pin_memory.value_or(false), "only dense CPU tensors can be pinned");
  const at::ScalarType type = dtype.value_or(at::get_default_dtype_as_scalartype());
  to_dtype(type);  // rejects dtypes tpu lacks, with a clear message
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_generic(size, tpu_allocator(), tpu_keys(), type, memory_format);
}

at::Tensor empty_strided(c10::IntArrayRef size, c10::IntArrayRef stride, std::optional<at::ScalarType> dtype,
                         std::optional<at::Layout> layout, std::optional<at::Device> device,
                         std::optional<bool> pin_memory) {
  check_layout(layout);
  TORCH_CHECK(!pin_memory.value_or(false), "only dense CPU tensors can be pinned");
  const at::ScalarType type = dtype.value_or(at::get_default_dtype_as_scalartype());
  to_dtype(type);
  c10::OptionalDeviceGuard guard(device);
  return at::detail::empty_strided_generic(size, stride, tpu_allocator(), tpu_keys(), type);
}

void resize_storage_bytes(const c10::Storage& storage, size_t nbytes) {
  if (storage.nbytes() == nbytes) return;
  StorageHandle& old_handle = storage_handle(storage);
  flush_trace_computing(old_handle, "resize");  // fused mode: the bytes to carry over are computed first
  runtime::BufferPtr old_buffer = old_handle.buffer();
  c10::DeviceGuard guard(storage.device());
  c10::DataPtr fresh = tpu_allocator()->allocate(nbytes);
  const size_t kept = old_buffer ? std::min(nbytes, old_buffer->nbytes()) : 0;
  if (kept > 0) {
    // Rare path (growing a written storage): carry the bytes over through the host. Nothing to carry when
    // either side is empty (FSDP2 frees a parameter's storage with resize_(0) and regrows it before use).
    at::Tensor old_bytes = at::empty({static_cast<int64_t>(old_buffer->nbytes())}, at::TensorOptions().dtype(at::kByte));
    runtime::download(*old_buffer, old_bytes.mutable_data_ptr());
    at::Tensor new_bytes = at::zeros({static_cast<int64_t>(nbytes)}, at::TensorOptions().dtype(at::kByte));
    std::memcpy(new_bytes.mutable_data_ptr(), old_bytes.const_data_ptr(), kept);
    static_cast<StorageHandle*>(fresh.get_context())->set_buffer(upload_contiguous(new_bytes, storage.device().index()));
  }
  storage.unsafeGetStorageImpl()->set_data_ptr_noswap(std::move(fresh));
  storage.unsafeGetStorageImpl()->set_nbytes(nbytes);
}

const at::Tensor& resize_(const at::Tensor& self, c10::IntArrayRef size, std::optional<at::MemoryFormat> memory_format) {
  auto* impl = self.unsafeGetTensorImpl();
  // As CPU: a resize to the current sizes keeps the strides (a transposed tensor stays transposed).
  if (self.sizes() != size) {
    impl->set_sizes_contiguous(size);
    const size_t needed = at::detail::computeStorageNbytesContiguous(size, self.dtype().itemsize(), self.storage_offset());
    if (needed > self.storage().nbytes()) resize_storage_bytes(self.storage(), needed);
  }
  if (memory_format.has_value()) {
    TORCH_CHECK(*memory_format != at::MemoryFormat::Preserve, "Unsupported memory format", *memory_format);
    impl->empty_tensor_restride(*memory_format);
  }
  return self;
}

at::Tensor& set_source_storage_offset(at::Tensor& self, at::Storage source, int64_t offset, c10::IntArrayRef size,
                                      c10::IntArrayRef stride) {
  at::native::checkSetStorage(self, source, offset, size, stride);
  self.unsafeGetTensorImpl()->set_sizes_and_strides(size, stride, offset);
  return self;
}

at::Tensor& set_source_storage(at::Tensor& self, at::Storage source) {
  const int64_t numel = static_cast<int64_t>(source.nbytes() / self.dtype().itemsize());
  return set_source_storage_offset(self, std::move(source), 0, {numel}, {1});
}

at::Tensor& set_source_tensor(at::Tensor& self, const at::Tensor& source) {
  if (self.is_same(source)) return self;
  return set_source_storage_offset(self, source.storage(), source.storage_offset(), source.sizes(), source.strides());
}

at::Tensor& set_empty(at::Tensor& self) {
  c10::DeviceGuard guard(self.device());
  c10::Storage storage(c10::Storage::use_byte_size_t(), 0, tpu_allocator(), /*resizable=*/true);
  return set_source_storage_offset(self, std::move(storage), 0, {0}, {1});
}

// Module.to("tpu") converts each parameter with `param.data = converted` when this says yes, so a parameter
// shared by two modules (tied embeddings and LM heads) stays one Parameter. PyTorch's default answer covers
// only its in-tree backends, and a "no" makes `to` build a new Parameter per module: the tie breaks silently
// and the model trains two copies. Both sides are plain strided TensorImpls, so swapping is safe.
bool has_compatible_shallow_copy_type(const at::Tensor& self, const at::Tensor& from) {
  auto plain = [](const at::Tensor& t) {
    return t.layout() == at::kStrided && (t.is_cpu() || t.device().type() == c10::DeviceType::PrivateUse1);
  };
  return plain(self) && plain(from);
}

}  // namespace torchtpu::aten
