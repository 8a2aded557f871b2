// The one kernel behind every lowered ATen op on the tpu device.
//
// A call is keyed (aten/op_key.h); a hit in the program cache leads straight to a compiled OpSignature,
// whose plan gathers the argument buffers, runs the program through the eager driver and binds the
// results. A miss builds the program (aten/op_build.h) first. Nothing on the hit path builds IR or text.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>

namespace torchtpu::aten {

struct OpInfo;

// Boxed kernel: checks devices, infers output shapes and dtypes with PyTorch's meta kernels (so errors
// read exactly as on CPU), finds or compiles the op's program, runs it asynchronously and binds its
// results to tensor storages. In-place and out= overloads write through their mutated arguments.
void op_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);
// The same for `op` whose OpInfo the caller holds, leaving the arguments on the stack and pushing the returns
// after them; it never replaces or drops an argument, so the arguments may be borrowed
// (aten/unboxed_kernel.h).
void run_lowered_op(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack);

// Checks that every tensor argument lives on one tpu device (0-dim CPU tensors count as scalars) and
// returns that device's index. Raises PyTorch's own device-mismatch message otherwise.
c10::DeviceIndex common_device(const OpInfo& info, const c10::FunctionSchema& schema, const torch::jit::Stack& stack);

// The in-memory program cache: programs held, and programs evicted to respect
// TORCHTPU_CACHE_MAX_PROGRAMS.
struct ProgramCacheStats {
  int64_t programs = 0;
  int64_t evictions = 0;
  int64_t capacity = 0;
};
ProgramCacheStats program_cache_stats();

}  // namespace torchtpu::aten
