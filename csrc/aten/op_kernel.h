// The one kernel behind every lowered ATen op on the tpu device.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchtpu::aten {

// Boxed kernel: checks devices, infers output shapes and dtypes with PyTorch's meta kernels (so errors
// read exactly as on CPU), finds or compiles the op's program, runs it asynchronously and binds its
// results to tensor storages. In-place and out= overloads write through their mutated arguments.
void op_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

// Checks that every tensor argument lives on one tpu device (0-dim CPU tensors count as scalars) and
// returns that device's index. Raises PyTorch's own device-mismatch message otherwise.
c10::DeviceIndex common_device(const c10::FunctionSchema& schema, const torch::jit::Stack& stack);

}  // namespace torchtpu::aten
