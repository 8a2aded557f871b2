// Fused eager mode: ops are recorded into a trace instead of running; a flush composes the recorded op
// programs into one program, compiles it once per trace shape and runs it. A shape seen for the first time
// runs op by op instead (its op programs are compiled already) and compiles when it comes again
// (TORCHTPU_FUSE_AFTER), so one-off work pays no fused compile.
//
// Each recorded op keeps its own cached program (OpSignature) and a source for every parameter: an
// external buffer (a storage already computed, a scalar operand) or a result of an earlier recorded op.
// Results land in storages as pending values (StorageHandle::pending). A flush calls every op program
// from one @main (XLA inlines and fuses across them), returns only the results whose storages are still
// alive and still hold that value, and binds them. The trace key is built while recording (each op's
// program id and its wiring), never from text, so a repeated step finds its program without composing.
//
// Each thread records its own trace, so threads working at once repeat their own programs (as each CUDA
// thread may run its own stream). A backward pass, which autograd runs on its device thread while the
// thread that started it waits, goes to that thread's trace (trace_owner()). An op that reads a value still
// pending in another thread's trace runs that trace first.
//
// Flushes happen when a buffer is needed (host reads, printing, `.item()`, the CPU fallback, hand-written
// kernels), at torch.tpu.synchronize() (every trace of the device) and when an event is recorded (the
// thread's trace), after every optimizer step, when a trace reaches its size limit, when an op runs on
// another device, and when the mode changes (every trace). torchtpu.metrics()["fused"] counts them by reason.
#pragma once

#include <c10/core/Storage.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "aten/op_signature.h"
#include "aten/storage.h"

namespace torchtpu::aten {

struct Trace;

// Where a recorded op's parameter comes from: external buffer `index` (op < 0), or output `index` of
// recorded op `op`.
struct TraceSource {
  int op = -1;
  int index = 0;
};
// A recorded op's parameters; most ops have few, kept inline.
using TraceSources = c10::SmallVector<TraceSource, 4>;

// Where an external buffer came from, so that a captured trace can run again on new inputs
// (aten/compiled_graph.h).
struct ExternalOrigin {
  enum class Kind {
    kConstant,   // fixed by the recorded ops: a scalar operand, a view's offset
    kStorage,    // the buffer a storage held when the trace first read it
    kRngState,   // the default generator's state for `rng_draws` draws
    kCpuScalar,  // the value of a 0-dim CPU tensor
    kOpaque,     // none of these (an explicit generator's state): a capture cannot replay it
  };
  Kind kind = Kind::kConstant;
  const c10::StorageImpl* storage = nullptr;  // kStorage: identity only, never dereferenced
  int64_t rng_draws = 0;
  at::Tensor cpu_scalar;
};

// Whose trace the calling thread records into: its own; on autograd's device thread, that of the thread that
// started the backward pass running there (which waits for it). The owner's value-check state is the one
// its ops update (aten/value_checks.h).
std::thread::id trace_owner();

// The lock a recording holds (recursive): while it is held, no other thread records, flushes or touches a
// value-check state (aten/value_checks.h). Taking it lets go of the GIL where the caller holds it (torch calls
// some of ours with it, Event.record for one), until the lock is released: the holder may need the GIL (to drop
// a tensor that Python owns, to warn), so no thread may wait for the lock while holding the GIL.
class TraceLock {
 public:
  TraceLock() = default;  // holds nothing
  static TraceLock acquire();
  TraceLock(TraceLock&& other) noexcept;
  TraceLock& operator=(TraceLock&& other) noexcept;
  TraceLock(const TraceLock&) = delete;
  TraceLock& operator=(const TraceLock&) = delete;
  ~TraceLock() { unlock(); }
  void unlock();

 private:
  std::unique_lock<std::recursive_mutex> lock_;
  void* released_gil_ = nullptr;  // the caller's PyThreadState, given back at unlock()
};
TraceLock lock_trace();

// Holds the trace for the duration of one op's recording (the traces of several threads take turns).
class TraceRecording {
 public:
  explicit TraceRecording(int device);
  // The source of a tensor's storage: its pending value in this trace, else its buffer as an external.
  TraceSource storage(const at::Tensor& t);
  TraceSource external(runtime::BufferPtr buffer, ExternalOrigin origin = {});
  // Appends the op; returns its index.
  int add_op(const std::shared_ptr<OpSignature>& signature, TraceSources&& sources);
  // Result `output` of op `op` becomes the value of `storage`.
  void bind(int op, int output, const c10::Storage& storage, DType dtype, const std::vector<int64_t>& dims);
  ~TraceRecording();

 private:
  TraceLock lock_;
  Trace* trace_;  // the calling thread's (trace_owner()'s)
};

// Runs the calling thread's trace, if any. `reason` is counted in the metrics.
void flush_trace(const char* reason);
// Runs the trace computing the storage's pending value, if any: counted under `reason` when it is the calling
// thread's trace, else as a value of another thread's trace.
void flush_trace_computing(const StorageHandle& handle, const char* reason);
// Whether the storage's value is pending in a trace other than the calling thread's.
bool pending_in_another_thread(const StorageHandle& handle);
// Runs the traces that the threads `owners` recorded, for any device.
void flush_traces_of(const std::set<std::thread::id>& owners, const char* reason);
// Runs every thread's trace recorded for `device` (-1: for any device).
void flush_every_trace(int device, const char* reason);

// A trace's program, kept to run again on other buffers (aten/compiled_graph.h).
struct FusedProgram {
  std::unique_ptr<runtime::Executable> executable;  // null: the trace runs op by op
  std::vector<int64_t> aliased_externals;  // parameters the program may donate to a result
  // Times a trace of this shape was seen before it earned a compile (TORCHTPU_FUSE_AFTER); 0 once compiled,
  // and for a program the plugin rejected (that shape runs op by op for good).
  int sightings = 0;
};

// What a flush ran: the program, what fed each of its parameters, and the storage each result went to.
struct FlushedTrace {
  std::shared_ptr<FusedProgram> program;
  int device = 0;
  std::vector<runtime::BufferPtr> externals;
  std::vector<ExternalOrigin> origins;
  std::vector<c10::intrusive_ptr<c10::StorageImpl>> results;
  std::string text;  // the program's StableHLO module, when asked for
};

// Flushes the current trace and starts an empty one; returns its id. Ops recorded until
// end_capture(id) form one trace unless something flushes it on the way.
uint64_t begin_capture();
// A host read of a tpu value (already computed or not) while a capture records: the value steers the host
// (a torch.cond predicate, a Python branch) in a way a replay would not repeat, so the capture ends (the
// graph runs recorded instead of replayed).
void end_capture_at_host_read();
// Runs the trace begun by begin_capture(id) and describes it (`want_text`: with its program's text), or
// returns nothing (and runs whatever was recorded) when that trace was flushed before.
std::optional<FlushedTrace> end_capture(uint64_t id, bool want_text = false);

struct FusedStats {
  int64_t ops_recorded = 0;
  int64_t programs_run = 0;
  int64_t compiles = 0;
  int64_t op_by_op_runs = 0;  // traces run as their op programs: new shapes, plugin rejections, on request
  std::vector<std::pair<std::string, int64_t>> flushes;  // by reason
};
FusedStats fused_stats();
void reset_fused_stats();

}  // namespace torchtpu::aten
