// Device buffers holding the runtime scalar operands of op programs: Python numbers, 0-dim CPU tensors,
// foreach scalar lists and view offsets.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include "runtime/buffer.h"

namespace torchtpu::aten {

// A rank-0 buffer of `dtype` holding the `size` bytes at `bytes`. Each thread keeps recently used values
// (bounded), so a learning rate or an alpha of 1 is uploaded once, not per op.
runtime::BufferPtr scalar_buffer(DType dtype, const void* bytes, size_t size, int device);

// A Scalar / float argument as f64, c128, i64 or bool, as the rule's operand expects.
runtime::BufferPtr scalar_buffer(const c10::IValue& value, int device);
// A 0-dim CPU tensor's value, in its own dtype.
runtime::BufferPtr scalar_buffer(const at::Tensor& cpu_scalar, int device);
// The values of a Scalar[] argument as doubles (ints and bools converted).
std::vector<double> scalar_list_values(const c10::IValue& list);
// A Scalar[] argument as one f64 array.
runtime::BufferPtr scalar_list_buffer(const c10::IValue& list, int device);
// An int[] argument as one i64 array.
runtime::BufferPtr int_list_buffer(const c10::IValue& list, int device);

}  // namespace torchtpu::aten
