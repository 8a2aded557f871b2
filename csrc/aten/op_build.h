// Building an op's program on a cache miss: shape and dtype inference through PyTorch's meta kernels,
// lowering through the op's rule, the parameter plan, donation, compilation.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <memory>

#include "aten/op_info.h"
#include "aten/op_signature.h"

namespace torchtpu::aten {

// Thrown while keying or building a call that runs through the CPU fallback instead: the meta kernel cannot
// infer its output shapes but CPU accepts the arguments (the shape depends on the data: x[bool_mask], ...),
// it has complex values and its rule is written for real ones (lowering::handles_complex), or its rule does
// not lower these arguments (lowering::NotLowered).
struct RunsOnCpu {};

// Builds and compiles the program for this call. Raises CPU's error for bad arguments. Resizes out=
// arguments. Afterwards info.static_scalars includes every scalar argument the rule read at compile time.
// `pad_rows`: a call over grown tensors runs padded to capacity (aten/append.h), or, when its results do not
// follow its length, gets a signature without a program that says it runs as shaped.
std::shared_ptr<OpSignature> build_op(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack& stack,
                                      size_t first, bool pad_rows);

}  // namespace torchtpu::aten
