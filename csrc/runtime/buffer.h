// Device buffers: one owner per PJRT buffer, transfers to and from the host, memory accounting.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ir/dtype.h"

namespace torchtpu::runtime {

// Owns one PJRT buffer (dense, row-major). Destroying it frees the device memory; the plugin keeps the
// memory alive until pending executions that read it are done.
class Buffer {
 public:
  Buffer(void* pjrt_buffer, DType dtype, std::vector<int64_t> dims, int device);
  ~Buffer();
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  DType dtype() const { return dtype_; }
  const std::vector<int64_t>& dims() const { return dims_; }
  int device() const { return device_; }
  int64_t numel() const;
  size_t nbytes() const { return static_cast<size_t>(numel()) * element_size(dtype_); }
  // The PJRT_Buffer*, for runtime/ only.
  void* pjrt() const { return pjrt_buffer_; }
  // Called when an execution took this buffer's memory for an output: its bytes stop counting as live
  // now, and the handle must not be read again.
  void mark_donated() const;

 private:
  void* pjrt_buffer_;
  mutable bool donated_ = false;
  DType dtype_;
  std::vector<int64_t> dims_;
  int device_;
};
using BufferPtr = std::shared_ptr<Buffer>;

// Starts an asynchronous copy of dense row-major host data to `device`. `release_host` runs (on any
// thread) once the plugin no longer reads `data`; the caller keeps `data` alive until then.
BufferPtr upload(const void* data, DType dtype, const std::vector<int64_t>& dims, int device,
                 std::function<void()> release_host);

// Copies the whole buffer into `dst` (buffer.nbytes() bytes) and waits. Errors from the computation that
// produced the buffer surface here.
void download(const Buffer& buffer, void* dst);

// Blocks until every execution queued on `device` so far has finished; throws the first error among them.
void synchronize(int device);

struct MemoryStats {
  int64_t allocated = 0;      // bytes in live buffers on the device
  int64_t peak_allocated = 0;  // high-water mark since the last reset
};
MemoryStats memory_stats(int device);
void reset_peak_memory(int device);

}  // namespace torchtpu::runtime
