// Storages on the tpu device: an opaque handle naming one flat PJRT buffer.
//
// The DataPtr of a tpu storage carries a unique synthetic address (never dereferenced; Hugging Face tells
// tied weights apart by it) and, as its context, the StorageHandle that owns the buffer.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/Allocator.h>
#include <c10/util/SmallVector.h>

#include <atomic>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "ir/dtype.h"
#include "runtime/buffer.h"

namespace torchtpu::aten {

// In fused eager mode a storage may hold a value of the recorded trace instead of a buffer: result `output`
// of recorded op `op` in trace `trace`, with the dtype and dims its buffer will have (aten/fused.h).
struct PendingValue {
  uint64_t trace = 0;
  int op = -1;
  int output = -1;
  DType dtype = DType::kF32;
  c10::SmallVector<int64_t, 6> dims;  // inline: recording an op allocates nothing for its results' dims
  // The sharding the storage's buffer had before the trace (null: one device): the trace's result for it
  // keeps it, as a write into a sharded storage does in strict mode.
  runtime::ShardingPtr sharding;
};

// The lock of one storage's buffer pointer: held for a pointer copy, or by a donating writer for one op's
// launch. Cheaper than std::mutex uncontended (every op takes a few), and contended only by threads racing on
// one tensor, which then wait microseconds.
class BufferLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire)) {
      while (locked_.load(std::memory_order_relaxed)) std::this_thread::yield();
    }
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

struct StorageHandle {
  explicit StorageHandle(int device) : device(device) {}

  int device = 0;
  // Fused mode: the storage's value is not computed yet (and it holds no buffer). Changed only under both the
  // trace lock (aten/fused.h) and the handle's lock; read under either (with_value without the trace lock).
  std::optional<PendingValue> pending;
  // Fused mode: the trace being recorded reads the buffer as its external `trace_external` (while
  // `external_trace` is that trace's id), so a storage read again in one trace skips the trace's lookups.
  uint64_t external_trace = 0;
  int trace_external = -1;
  // Made by an append with spare capacity, or by an op over such tensors (aten/append.h): the storage starts
  // with a contiguous [grown_outer, length, grown_inner] array and has room for more rows. Set once, before
  // anything else sees the storage.
  bool growing = false;
  int64_t grown_outer = 0;
  int64_t grown_inner = 0;

  // The buffer, null until first written (reads see zeros). A thread may read a storage while another
  // rewrites it, as on CUDA, so the pointer is copied and replaced only under the handle's lock.
  runtime::BufferPtr buffer() const;
  // `read(pending value or null, buffer or null)` under the lock, for a look at the storage's value without
  // taking a reference (op keys, storage shapes, fused recording).
  template <class Read>
  auto with_value(const Read& read) const {
    std::lock_guard<BufferLock> lock(lock_);
    return read(pending ? &*pending : nullptr, buffer_.get());
  }
  bool is_pending() const {
    return with_value([](const PendingValue* value, const runtime::Buffer*) { return value != nullptr; });
  }
  // A new buffer (an upload, a program result): the storage holds it now, not a pending value. The old one
  // is released after the lock (dropping a buffer may wait for the device).
  void set_buffer(runtime::BufferPtr b);
  // Fused mode, under the trace lock: the storage's value becomes `value`, still to be computed. `value` keeps
  // the sharding the storage had (its buffer's, or its pending value's) where that has `value.dims`' rank, as a
  // write into a sharded storage does in strict mode (aten/op_build.cc). Returns the buffer it held.
  runtime::BufferPtr hold_pending(PendingValue value);
  // The buffer; a storage never written gets `make_zeros()` first (once, however many threads ask).
  runtime::BufferPtr buffer_or_init(const std::function<runtime::BufferPtr()>& make_zeros);

 private:
  friend class StorageWriteLock;
  mutable BufferLock lock_;
  runtime::BufferPtr buffer_;
};

// Held by an op that writes storages, from its decision to give their old buffers to its program (donation)
// until they hold its results, so a reader on another thread either copied a buffer before the decision (the
// writer sees it shared and keeps it) or waits and reads the result: it never gets a donated buffer.
// Locks in address order, so writers of overlapping sets of storages cannot deadlock.
class StorageWriteLock {
 public:
  explicit StorageWriteLock(c10::SmallVector<StorageHandle*, 4> handles);
  StorageWriteLock(const StorageWriteLock&) = delete;
  StorageWriteLock& operator=(const StorageWriteLock&) = delete;
  ~StorageWriteLock();

  // Whether `held`, a copy the writer took, is still `handle`'s buffer and the writer's copy and the
  // handle are its only holders. `handle` must be one of the locked ones.
  bool sole_holder(const StorageHandle& handle, const runtime::BufferPtr& held) const;
  void set_buffer(StorageHandle& handle, runtime::BufferPtr b);  // as StorageHandle::set_buffer, locked

 private:
  c10::SmallVector<StorageHandle*, 4> handles_;
  std::vector<runtime::BufferPtr> released_;  // old buffers, dropped after the locks
};

c10::Allocator* tpu_allocator();
// The device's memory figures as torch.tpu and torch.accelerator report them. In fused mode the calling
// thread's recorded ops run first: until then their results hold no buffers, and the figures would leave out
// tensors the caller holds (docs/modes.md).
runtime::MemoryStats device_memory_stats(c10::DeviceIndex device);
void reset_device_peak_memory(c10::DeviceIndex device);
StorageHandle& storage_handle(const c10::Storage& storage);
inline StorageHandle& storage_handle(const at::Tensor& tensor) { return storage_handle(tensor.storage()); }

// The storage's buffer; a storage never written gets a zero buffer of `dtype` first. A pending value
// (fused mode) is computed first: the trace runs.
runtime::BufferPtr storage_buffer(const at::Tensor& tensor);
// How the storage's buffer is split over the devices; null for a buffer on one device (or none yet, or a
// pending value).
runtime::ShardingPtr storage_sharding(const at::Tensor& tensor);
// The sharding of the storage's buffer, or, for a pending value, of the buffer it had before the trace.
runtime::ShardingPtr sharding_before_trace(const at::Tensor& tensor);
// Element type and element count of the storage's buffer as it would be read (see storage_buffer).
std::pair<DType, int64_t> storage_layout(const at::Tensor& tensor);
// The dims of the storage's buffer: a program result keeps its tensor's shape (dims in memory order when it
// is not row-major), so a program that reads the whole tensor takes it as is (no reshape for the compiler to
// see through); {numel} before the first write.
std::vector<int64_t> storage_dims(const at::Tensor& tensor);

DType to_dtype(at::ScalarType type);  // throws a clear error for types tpu lacks
at::ScalarType to_scalar_type(DType dtype);

// Host <-> device. `upload_to` writes the dense values of `host` (already of `tensor`'s dtype and shape)
// into `tensor`, replacing the buffer when `tensor` covers its storage.
at::Tensor download(const at::Tensor& tensor);  // a CPU tensor with tensor's values
runtime::BufferPtr upload_contiguous(const at::Tensor& host, int device);

}  // namespace torchtpu::aten
