#include "aten/storage.h"

#include <ATen/ops/_neg_view.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/core/CachingDeviceAllocator.h>
#include <c10/core/DeviceGuard.h>

#include <algorithm>
#include <atomic>

#include "aten/device.h"
#include "aten/device_error.h"
#include "aten/fused.h"
#include "aten/metrics.h"
#include "aten/value_checks.h"
#include "lowering/view.h"
#include "runtime/plugin.h"

namespace torchtpu::aten {
namespace {

void delete_handle(void* context) { delete static_cast<StorageHandle*>(context); }

// A value's sharding: a pending value's is the one its storage had before the trace.
runtime::ShardingPtr sharding_of(const PendingValue* pending, const runtime::Buffer* buffer) {
  return pending ? pending->sharding : buffer ? buffer->sharding_ptr() : nullptr;
}

// Storages name device buffers that PJRT allocates when a program writes them; the allocator hands out
// handles. It is a DeviceAllocator so torch.accelerator's memory functions (memory_allocated, memory_stats,
// reset_peak_memory_stats, empty_cache) report the device's buffers, as torch.tpu's do.
class TpuAllocator final : public c10::DeviceAllocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    const c10::DeviceIndex device = c10::impl::getDeviceGuardImpl(c10::DeviceType::PrivateUse1)->getDevice().index();
    auto* handle = new StorageHandle(device);
    // Synthetic, never dereferenced; each storage gets its own address range so data_ptr() of views of
    // different storages never collide.
    constexpr uintptr_t kAlignment = 256;
    const uintptr_t span = (static_cast<uintptr_t>(nbytes) + kAlignment) & ~(kAlignment - 1);
    void* address = reinterpret_cast<void*>(next_address_.fetch_add(span));
    return {address, handle, &delete_handle, c10::Device(c10::DeviceType::PrivateUse1, device)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return nullptr; }
  bool initialized() override { return runtime::plugin_loaded(); }
  void emptyCache(c10::MempoolId_t /*pool*/) override {}  // buffers are freed with their last tensor: no cache
  void recordStream(const c10::DataPtr& /*ptr*/, c10::Stream /*stream*/) override {}  // one queue per device
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override {
    const runtime::MemoryStats raw = device_memory_stats(device);
    c10::CachingDeviceAllocator::DeviceStats stats;
    const auto aggregate = static_cast<size_t>(c10::CachingAllocator::StatType::AGGREGATE);
    for (auto* bytes : {&stats.allocated_bytes, &stats.reserved_bytes, &stats.active_bytes, &stats.requested_bytes}) {
      c10::CachingAllocator::Stat& stat = (*bytes)[aggregate];
      stat.current = raw.allocated;
      stat.peak = raw.peak_allocated;
      stat.allocated = raw.allocated_total;
      stat.freed = raw.freed_total;
    }
    for (auto* count : {&stats.allocation, &stats.segment, &stats.active}) {
      c10::CachingAllocator::Stat& stat = (*count)[aggregate];
      stat.current = raw.allocations - raw.frees;
      stat.allocated = raw.allocations;
      stat.freed = raw.frees;
    }
    stats.num_ooms = raw.ooms;
    stats.num_device_alloc = raw.allocations;
    stats.num_device_free = raw.frees;
    return stats;
  }
  void resetAccumulatedStats(c10::DeviceIndex device) override {
    check_device_index(device);
    runtime::reset_accumulated_memory(device);
  }
  void resetPeakStats(c10::DeviceIndex device) override { reset_device_peak_memory(device); }
  // torch.accelerator.get_memory_info and torch.tpu.mem_get_info: (free, total) bytes.
  std::pair<size_t, size_t> getMemoryInfo(c10::DeviceIndex device) override {
    check_device_index(device);
    try {
      const auto [free, total] = runtime::device_memory_info(device);
      return {static_cast<size_t>(free), static_cast<size_t>(total)};
    } catch (const runtime::PjrtError& error) {
      TORCH_CHECK_NOT_IMPLEMENTED(error.code() != 12, error.what());
      throw_device_error("get_memory_info", error);
    }
  }
  void copy_data(void*, const void*, std::size_t) const override {
    TORCH_CHECK(false, "tpu storages cannot be copied byte-wise on the host; use Tensor.copy_");
  }

 private:
  std::atomic<uintptr_t> next_address_{uintptr_t{1} << 44};
};

}  // namespace

runtime::MemoryStats device_memory_stats(c10::DeviceIndex device) {
  check_device_index(device);
  flush_trace("memory statistics");
  return runtime::memory_stats(device);
}

void reset_device_peak_memory(c10::DeviceIndex device) {
  check_device_index(device);
  flush_trace("memory statistics");  // the peak then covers what runs after the reset, as CUDA's does
  runtime::reset_peak_memory(device);
}

c10::Allocator* tpu_allocator() {
  static TpuAllocator allocator;
  return &allocator;
}

StorageHandle& storage_handle(const c10::Storage& storage) {
  void* context = storage.data_ptr().get_context();
  TORCH_CHECK(storage.device_type() == c10::DeviceType::PrivateUse1, "expected a tpu storage");
  // A tensor made over a tpu data pointer (torch.from_blob, which torch.save's legacy format uses to copy a
  // storage; a DLPack capsule) has no storage of ours: tpu data pointers are synthetic and name no memory.
  TORCH_CHECK(storage.data_ptr().get_deleter() == &delete_handle,
              "this tpu tensor wraps a raw tpu data pointer (torch.from_blob, DLPack, or torch.save's legacy "
              "format), which names no tpu memory: tpu data pointers are not addresses. Save tpu tensors with "
              "torch.save's default format (not _use_new_zipfile_serialization=False)");
  return *static_cast<StorageHandle*>(context);
}

runtime::BufferPtr StorageHandle::buffer() const {
  std::lock_guard<BufferLock> lock(lock_);
  return buffer_;
}

void StorageHandle::set_buffer(runtime::BufferPtr b) {
  std::lock_guard<BufferLock> lock(lock_);
  buffer_.swap(b);
  pending.reset();
}  // the old buffer, now in `b`, is dropped after the lock

runtime::BufferPtr StorageHandle::hold_pending(PendingValue value) {
  std::lock_guard<BufferLock> lock(lock_);
  runtime::ShardingPtr before = sharding_of(pending ? &*pending : nullptr, buffer_.get());
  if (before && before->tiles().size() == value.dims.size()) value.sharding = std::move(before);
  pending = std::move(value);
  return std::move(buffer_);
}

runtime::BufferPtr StorageHandle::buffer_or_init(const std::function<runtime::BufferPtr()>& make_zeros) {
  std::lock_guard<BufferLock> lock(lock_);
  if (!buffer_) buffer_ = make_zeros();
  return buffer_;
}

StorageWriteLock::StorageWriteLock(c10::SmallVector<StorageHandle*, 4> handles) : handles_(std::move(handles)) {
  std::sort(handles_.begin(), handles_.end());
  handles_.erase(std::unique(handles_.begin(), handles_.end()), handles_.end());
  for (StorageHandle* handle : handles_) handle->lock_.lock();
}

StorageWriteLock::~StorageWriteLock() {
  for (auto it = handles_.rbegin(); it != handles_.rend(); ++it) (*it)->lock_.unlock();
  released_.clear();
}

bool StorageWriteLock::sole_holder(const StorageHandle& handle, const runtime::BufferPtr& held) const {
  return handle.buffer_.get() == held.get() && held.use_count() == 2;
}

void StorageWriteLock::set_buffer(StorageHandle& handle, runtime::BufferPtr b) {
  TORCH_INTERNAL_ASSERT(std::binary_search(handles_.begin(), handles_.end(), &handle));
  handle.buffer_.swap(b);
  handle.pending.reset();
  released_.push_back(std::move(b));
}

std::pair<DType, int64_t> storage_layout(const at::Tensor& tensor) {
  const std::optional<std::pair<DType, int64_t>> held = storage_handle(tensor).with_value(
      [](const PendingValue* pending, const runtime::Buffer* buffer) -> std::optional<std::pair<DType, int64_t>> {
        if (pending) return std::make_pair(pending->dtype, c10::multiply_integers(pending->dims));
        if (buffer) return std::make_pair(buffer->dtype(), buffer->numel());
        return std::nullopt;
      });
  if (held) return *held;
  const size_t nbytes = tensor.storage().nbytes();
  const DType dtype = to_dtype(tensor.scalar_type());
  if (nbytes % element_size(dtype) == 0) return {dtype, static_cast<int64_t>(nbytes / element_size(dtype))};
  return {DType::kU8, static_cast<int64_t>(nbytes)};
}

runtime::ShardingPtr storage_sharding(const at::Tensor& tensor) {
  return storage_handle(tensor).with_value([](const PendingValue* pending, const runtime::Buffer* buffer) {
    return pending || !buffer ? nullptr : buffer->sharding_ptr();
  });
}

runtime::ShardingPtr sharding_before_trace(const at::Tensor& tensor) {
  return storage_handle(tensor).with_value(sharding_of);
}

std::vector<int64_t> storage_dims(const at::Tensor& tensor) {
  std::optional<std::vector<int64_t>> held = storage_handle(tensor).with_value(
      [](const PendingValue* pending, const runtime::Buffer* buffer) -> std::optional<std::vector<int64_t>> {
        if (pending) return std::vector<int64_t>(pending->dims.begin(), pending->dims.end());
        if (buffer) return buffer->dims();
        return std::nullopt;
      });
  return held ? std::move(*held) : std::vector<int64_t>{storage_layout(tensor).second};
}

runtime::BufferPtr storage_buffer(const at::Tensor& tensor) {
  StorageHandle& handle = storage_handle(tensor);
  if (runtime::BufferPtr buffer = handle.buffer()) return buffer;  // the common case, without the trace lock
  // Pending, or never written. Under the trace lock no thread records, so another thread's recording cannot
  // make the storage pending again between the flush and the read (or while its buffer changes hands).
  const TraceLock lock = lock_trace();
  if (handle.pending) {
    flush_trace_computing(handle, "buffer needed");
    TORCH_CHECK(!handle.pending, "the value of this tpu tensor was lost: the fused program computing it failed");
  }
  if (runtime::BufferPtr buffer = handle.buffer()) return buffer;
  const auto [dtype, numel] = storage_layout(tensor);  // read before the lock, which it takes
  return handle.buffer_or_init([&, dtype = dtype, numel = numel] {
    at::Tensor zeros = at::zeros({numel}, at::TensorOptions().dtype(to_scalar_type(dtype)));
    return upload_contiguous(zeros, handle.device);
  });
}

DType to_dtype(at::ScalarType type) {
  switch (type) {
    case at::kBool: return DType::kBool;
    case at::kChar: return DType::kI8;
    case at::kShort: return DType::kI16;
    case at::kInt: return DType::kI32;
    case at::kLong: return DType::kI64;
    case at::kByte: return DType::kU8;
    case at::kUInt16: return DType::kU16;
    case at::kUInt32: return DType::kU32;
    case at::kUInt64: return DType::kU64;
    case at::kHalf: return DType::kF16;
    case at::kBFloat16: return DType::kBF16;
    case at::kFloat: return DType::kF32;
    case at::kDouble: return DType::kF64;
    case at::kComplexFloat: return DType::kC64;
    case at::kComplexDouble: return DType::kC128;
    case at::kFloat8_e4m3fn: return DType::kF8E4M3FN;
    case at::kFloat8_e5m2: return DType::kF8E5M2;
    case at::kFloat8_e4m3fnuz: return DType::kF8E4M3FNUZ;
    case at::kFloat8_e5m2fnuz: return DType::kF8E5M2FNUZ;
    default:
      // NotImplementedError, as CPU's "not implemented for 'ComplexHalf'": a TypeError inside `x + 1j` would
      // become Python's "unsupported operand type(s)".
      TORCH_CHECK_NOT_IMPLEMENTED(false, "tpu does not support dtype ", type, " yet");
  }
}

at::ScalarType to_scalar_type(DType dtype) {
  switch (dtype) {
    case DType::kBool: return at::kBool;
    case DType::kI8: return at::kChar;
    case DType::kI16: return at::kShort;
    case DType::kI32: return at::kInt;
    case DType::kI64: return at::kLong;
    case DType::kU8: return at::kByte;
    case DType::kU16: return at::kUInt16;
    case DType::kU32: return at::kUInt32;
    case DType::kU64: return at::kUInt64;
    case DType::kF16: return at::kHalf;
    case DType::kBF16: return at::kBFloat16;
    case DType::kF32: return at::kFloat;
    case DType::kF64: return at::kDouble;
    case DType::kC64: return at::kComplexFloat;
    case DType::kC128: return at::kComplexDouble;
    case DType::kF8E4M3FN: return at::kFloat8_e4m3fn;
    case DType::kF8E5M2: return at::kFloat8_e5m2;
    case DType::kF8E4M3FNUZ: return at::kFloat8_e4m3fnuz;
    case DType::kF8E5M2FNUZ: return at::kFloat8_e5m2fnuz;
  }
  return at::kFloat;
}

runtime::BufferPtr upload_contiguous(const at::Tensor& host, int device) {
  TORCH_INTERNAL_ASSERT(host.is_cpu() && host.is_contiguous());
  record_transfer(/*to_device=*/true, host.nbytes());
  std::vector<int64_t> dims(host.sizes().begin(), host.sizes().end());
  // The lambda owns a reference to the host tensor until the plugin has read it.
  try {
    return runtime::upload(host.const_data_ptr(), to_dtype(host.scalar_type()), dims, device,
                           [keep_alive = host]() mutable { keep_alive.reset(); });
  } catch (const runtime::PjrtError& e) {
    throw_device_error("copy to tpu", e);
  }
}

at::Tensor download(const at::Tensor& tensor) {
  end_capture_at_host_read();
  const runtime::BufferPtr buffer = storage_buffer(tensor);  // another thread's trace computing it runs now
  raise_value_errors(storage_handle(tensor).device);  // a read is a sync point (docs/value_checks.md)
  at::Tensor flat = at::empty({buffer->numel()}, at::TensorOptions().dtype(to_scalar_type(buffer->dtype())));
  record_transfer(/*to_device=*/false, buffer->nbytes());
  try {
    runtime::download(*buffer, flat.mutable_data_ptr());
  } catch (const runtime::PjrtError& e) {
    throw_device_error("copy to the host", e);  // an allocation failed in the producer: torch.OutOfMemoryError
  }
  // Reinterpret the bytes as the tensor's dtype and apply its view geometry on the host.
  at::Tensor typed = flat.scalar_type() == tensor.scalar_type() ? flat : flat.view(tensor.scalar_type());
  at::Tensor host = typed.as_strided(tensor.sizes(), tensor.strides(), tensor.storage_offset());
  // The same lazy conj() / neg bits as the tensor, so the host copy means the same values.
  if (tensor.is_conj()) host = host.conj();
  if (tensor.is_neg()) host = at::_neg_view(host);
  return host;
}

}  // namespace torchtpu::aten
