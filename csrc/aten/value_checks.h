// The per-device error state of device-side value checks (docs/value_checks.md), CUDA's contract for
// device-side asserts: a program whose rule states checks (lowering/value_check.h) reads the device's
// state and returns it updated, with no host round trip; sync points read it and raise the first failure
// in CPU's words; debug mode reads it after every checked op.
#pragma once

#include <ATen/core/Tensor.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "aten/fused.h"
#include "lowering/value_check.h"
#include "runtime/buffer.h"

namespace torchtpu::aten {

// TORCHTPU_VALUE_CHECKS=0 turns checks off at start; torchtpu.value_checks() switches them at run time.
// Programs are keyed by the setting (aten/op_key.h).
bool value_checks_enabled();
void set_value_checks_enabled(bool enabled);

// The id a program records when `check` of op `op` fails: a hash of what the program's shapes fix in the
// message (op, kind, facts), so program text is the same in every process. Remembers the message for it.
int64_t register_check(const std::string& op, const lowering::ValueCheck& check);

// An error state: an i64[3] tpu tensor (check id or 0, value, position) that checked programs read and
// replace (a pending value in fused mode). A device has one per thread that records or runs checked ops
// (per trace owner, aten/fused.h), so that fused traces of several threads do not chain through one value.
// A failure read from the device is raised once in every thread that syncs, as a CUDA device-side assert
// reaches every thread (another thread may have read the failed op's result), and kept until the thread
// whose op made it has raised it too, or raised once anywhere if that thread has ended; an ended thread's
// state is freed at a sync once it holds nothing unread or kept. Its users hold lock_trace() from reading the
// state to binding the new one, as recording does.
struct CheckState {
  struct Failure {
    std::array<int64_t, 3> word;
    std::set<std::thread::id> told;  // threads it was raised in
  };
  at::Tensor tensor;
  std::atomic<bool> unread{false};  // a checked op ran since the last read
  std::vector<Failure> failures;    // read from the device, not yet raised in the owner
  std::atomic<size_t> failures_kept{0};  // failures.size(), read without the lock
};
// The state of `device` that ops of `owner`'s trace update.
CheckState& check_state(int device, std::thread::id owner = trace_owner());

// Makes `returned`, the error state a checked program returned, the new value of `state` (the caller holds
// lock_trace() and marks the state unread where an op ran). A partitioned program returns the state
// replicated over every device; the state stays a one-device buffer, its own device's copy.
void bind_check_state(CheckState& state, runtime::BufferPtr returned);

// Raises a failure recorded on the device that this thread has not raised yet as a RuntimeError naming the op
// and the check (see CheckState); returns at once when no checked op ran since the last read and no failure
// is kept. Called at sync points. The calling thread's fused trace runs first; ops still recorded in other
// threads' traces are read when those traces run.
void raise_value_errors(int device);

// Called once in each thread that owns a trace: when the thread ends, any thread's sync reads its states.
void watch_owner_exit();

}  // namespace torchtpu::aten
