// Writes into memory that the op's tensors share in ways a program cannot express.
//
// A program reads all of its inputs and then writes its results, and a write through a view whose elements
// share memory (an `expand`ed tensor, an overlapping `as_strided`) keeps one of the colliding values. CPU
// kernels instead refuse most such writes ("unsupported operation: more than one element of the written-to
// tensor refers to a single memory location", and "some elements of the input tensor and the written-to
// tensor refer to a single memory location" when a dense output partly overlaps a dense input), and the
// ones they accept (index_put_ with accumulate, index_fill_, reductions into an expanded out=) they compute
// element by element in their own order. PyTorch's meta kernels check none of it. So such a call runs on the
// host, on copies of the whole storages that keep the tensors' sharing: CPU raises its error or computes its
// result, and the storages it wrote go back to the device.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include "aten/op_info.h"

namespace torchtpu::aten {

// Whether a written tensor of this call (from stack[first]) has elements sharing memory, or partly overlaps
// another dense tensor argument in the way CPU's kernels refuse. Cheap for the usual dense writes.
bool has_overlapping_write(const OpInfo& info, const torch::jit::Stack& stack, size_t first);

// Runs the op's CPU kernel on host copies of the storages of its tpu tensors, views keeping their geometry
// and sharing, then puts the written storages back on the device and leaves the op's results on the stack
// (as run_lowered_op does). False, with the stack untouched, where that cannot be done faithfully (the op
// has no CPU kernel; a storage is sharded, seen in two dtypes, or a conj/neg view).
bool run_on_host_storages(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack, size_t first);

}  // namespace torchtpu::aten
