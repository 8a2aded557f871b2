// Device buffers: one owner per PJRT buffer, transfers to and from the host, memory accounting.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "runtime/sharding.h"

namespace torchtpu::runtime {

// Owns one PJRT buffer (dense, row-major). Destroying it frees the device memory; the plugin keeps the
// memory alive until pending executions that read it are done. `producer` names the program whose output
// it is (null for an upload), so an execution error that surfaces when it is read says where it came from.
class Buffer {
 public:
  Buffer(void* pjrt_buffer, DType dtype, std::vector<int64_t> dims, int device,
         std::shared_ptr<const std::string> producer = nullptr);
  // A sharded buffer: one logical array of `dims` split over the devices as `sharding` says. It owns one
  // buffer per device (`shards[d]` on device d, of the sharding's shard dims), which account its memory.
  Buffer(std::vector<std::shared_ptr<Buffer>> shards, DType dtype, std::vector<int64_t> dims, ShardingPtr sharding);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  DType dtype() const { return dtype_; }
  // The logical array's dims (a sharded buffer's whole array).
  const std::vector<int64_t>& dims() const { return dims_; }
  // The device of an unsharded buffer; a sharded one answers its first shard's.
  int device() const { return device_; }
  // Null for a buffer on one device.
  const Sharding* sharding() const { return sharding_.get(); }
  const ShardingPtr& sharding_ptr() const { return sharding_; }
  const std::vector<std::shared_ptr<Buffer>>& shards() const { return shards_; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype_); }
  // The program whose output this is; null for an upload.
  const std::string* producer() const { return producer_.get(); }
  // The PJRT_Buffer* (of an unsharded buffer), for runtime/ only.
  void* pjrt() const { return pjrt_buffer_; }
  // Called when an execution took this buffer's memory for an output: its bytes stop counting as live
  // now, and the handle must not be read again.
  void mark_donated() const;

 private:
  void* pjrt_buffer_;
  mutable bool donated_ = false;
  bool piece_ = false;  // one device's piece of a sharded buffer
  DType dtype_;
  std::vector<int64_t> dims_;
  int device_;
  std::shared_ptr<const std::string> producer_;
  ShardingPtr sharding_;
  std::vector<std::shared_ptr<Buffer>> shards_;
};
using BufferPtr = std::shared_ptr<Buffer>;

// Starts an asynchronous copy of dense row-major host data to `device`. `release_host` runs (on any
// thread) once the plugin no longer reads `data`; the caller keeps `data` alive until then.
BufferPtr upload(const void* data, DType dtype, const std::vector<int64_t>& dims, int device,
                 std::function<void()> release_host);

// Uploads the tiles of dense row-major host data (`dims` of `dtype`) to the devices `sharding` names: one
// transfer per device of its (zero-padded) piece.
BufferPtr upload_sharded(const void* data, DType dtype, const std::vector<int64_t>& dims, ShardingPtr sharding);

// A copy of an unsharded buffer on `device` (asynchronous, ordered after the buffer's producer).
BufferPtr copy_to_device(const Buffer& buffer, int device);

// An unsharded copy of a sharded buffer on `device`, assembled through the host (waits for the buffer).
BufferPtr gather_to_device(const Buffer& buffer, int device);

// Copies the whole buffer into `dst` (buffer.nbytes() bytes; a sharded buffer's tiles are assembled) and waits. Errors from the computation that
// produced the buffer surface here, naming its producer.
void download(const Buffer& buffer, void* dst);

// Blocks until every execution queued on `device` so far has finished; throws the first error among them
// (in launch order, so the program that failed first), naming the program and keeping the PJRT code.
void synchronize(int device);

// A point in one device's queue, as a CUDA event records one: reached once every execution launched on the
// device before the mark was made has finished (they may finish out of order). It also notes when that
// happened, for elapsed times. Errors of that work surface at synchronize(), not here.
class QueueMark {
 public:
  using Clock = std::chrono::steady_clock;
  explicit QueueMark(int device);
  bool reached() const;
  // Blocks the calling thread until reached().
  void wait() const;
  // When the mark was reached: the later of when it was made and when its last execution finished (never
  // before a mark made earlier on the device). Call once reached().
  Clock::time_point reached_at() const;
  int device() const { return device_; }

  struct State;  // shared with the plugin's completion callbacks, which may outlive the mark

 private:
  int device_;
  uint64_t executions_before_ = 0;  // the device's executions numbered below this come before the mark
  std::shared_ptr<State> state_;
};

// Live-byte accounting of one device. Device memory is freed as soon as the last tensor using a buffer dies
// (there is no caching allocator), so "allocated" is also what the process holds on the device.
struct MemoryStats {
  int64_t allocated = 0;       // bytes in live buffers on the device
  int64_t peak_allocated = 0;  // high-water mark since the last reset
  int64_t allocated_total = 0;  // bytes ever allocated (cumulative)
  int64_t freed_total = 0;      // bytes ever freed (cumulative)
  int64_t allocations = 0;      // buffers ever created
  int64_t frees = 0;            // buffers ever destroyed or donated
  int64_t ooms = 0;             // allocations that failed for lack of memory
  int64_t limit = -1;           // set_memory_limit, -1 for none
};
MemoryStats memory_stats(int device);
void reset_peak_memory(int device);
// Clears the cumulative counters (allocated_total, freed_total, allocations, frees, ooms).
void reset_accumulated_memory(int device);
// Caps the live bytes on `device` (-1 removes the cap): an execution or transfer that would pass it raises
// OutOfMemory before it starts, as a full device would. torch.tpu.set_per_process_memory_fraction sets it.
void set_memory_limit(int device, int64_t bytes);

}  // namespace torchtpu::runtime
