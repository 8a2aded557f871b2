// What CPU's kernels decide that PyTorch's meta kernels do not: the errors CPU raises for bad arguments, the
// output shapes where a meta kernel disagrees with CPU, and the dtype CPU promotes to. Asked when a program
// is built (op_build.h), never on a cache hit.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

#include <cstdint>
#include <string>
#include <vector>

#include "aten/op_info.h"
#include "aten/op_key.h"

namespace torchtpu::aten {

// Whether a tensor argument (alone or in a list) from `first` on satisfies `test`.
template <typename Test>
bool any_tensor_argument(const torch::jit::Stack& stack, size_t first, Test test) {
  for (size_t i = first; i < stack.size(); ++i) {
    if (stack[i].isTensor()) {
      if (test(stack[i].toTensor())) return true;
    } else if (is_tensor_list(stack[i])) {
      for (const at::Tensor& t : list_elements(stack[i])) {
        if (t.defined() && test(t)) return true;
      }
    }
  }
  return false;
}

// The arguments with every device tensor replaced by a zero-filled CPU tensor of its size, strides and dtype.
std::vector<c10::IValue> cpu_stand_ins(const torch::jit::Stack& stack, size_t first);

// Runs the op on CPU stand-ins, which throws CPU's error for arguments CPU refuses.
void check_arguments_on_cpu(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first);

// Whether the op's outputs are shaped by running CPU on stand-ins (its meta kernel disagrees with CPU).
bool shaped_on_cpu(const std::string& name, const torch::jit::Stack& stack, size_t first);

// PyTorch's promotion over the tensors and numbers among `count` arguments from `first`.
at::ScalarType common_dtype(const torch::jit::Stack& stack, size_t first, size_t count = SIZE_MAX);

// The dtype checks, and the other argument checks, of CPU's kernels that the meta kernels leave out.
void check_dtypes_as_cpu(const c10::OperatorHandle& op, const OpInfo& info, const torch::jit::Stack& stack,
                         size_t first);
void check_arguments_as_cpu(const c10::OperatorHandle& op, const OpInfo& info, const torch::jit::Stack& stack,
                            size_t first);

}  // namespace torchtpu::aten
