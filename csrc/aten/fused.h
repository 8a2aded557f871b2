// Fused eager mode: ops are recorded into a trace instead of running; a flush composes the recorded op
// programs into one program, compiles it once per trace shape and runs it.
//
// Each recorded op keeps its own cached program (OpSignature) and a source for every parameter: an
// external buffer (a storage already computed, a scalar operand) or a result of an earlier recorded op.
// Results land in storages as pending values (StorageHandle::pending). A flush calls every op program
// from one @main (XLA inlines and fuses across them), returns only the results whose storages are still
// alive and still hold that value, and binds them. The trace key is built while recording (each op's
// program id and its wiring), never from text, so a repeated step finds its program without composing.
//
// Flushes happen when a buffer is needed (host reads, printing, `.item()`, the CPU fallback, hand-written
// kernels), at torch.tpu.synchronize(), after every optimizer step, when a trace reaches its size limit,
// when an op runs on another device, and when the mode changes. torchtpu.metrics()["fused"] counts them
// by reason.
#pragma once

#include <c10/core/Storage.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include "aten/op_signature.h"
#include "aten/storage.h"

namespace torchtpu::aten {

// Where a recorded op's parameter comes from: external buffer `index` (op < 0), or output `index` of
// recorded op `op`.
struct TraceSource {
  int op = -1;
  int index = 0;
};

// Holds the trace for the duration of one op's recording (ops from several threads interleave whole).
class TraceRecording {
 public:
  explicit TraceRecording(int device);
  // The source of a tensor's storage: its pending value in this trace, else its buffer as an external.
  TraceSource storage(const at::Tensor& t);
  TraceSource external(runtime::BufferPtr buffer);
  // Appends the op; returns its index.
  int add_op(std::shared_ptr<OpSignature> signature, std::vector<TraceSource> sources);
  // Result `output` of op `op` becomes the value of `storage`.
  void bind(int op, int output, const c10::Storage& storage, DType dtype, const std::vector<int64_t>& dims);
  ~TraceRecording();

 private:
  std::unique_lock<std::recursive_mutex> lock_;
};

// Runs the current trace, if any. `reason` is counted in the metrics.
void flush_trace(const char* reason);

// The lock a recording holds (recursive): while it is held, no other thread records, flushes or touches the
// device's value-check state (aten/value_checks.h).
std::unique_lock<std::recursive_mutex> lock_trace();

struct FusedStats {
  int64_t ops_recorded = 0;
  int64_t programs_run = 0;
  int64_t compiles = 0;
  std::vector<std::pair<std::string, int64_t>> flushes;  // by reason
};
FusedStats fused_stats();
void reset_fused_stats();

}  // namespace torchtpu::aten
