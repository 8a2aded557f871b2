// aten::one_hot. PyTorch's composite kernel leaves the class values' checks on tpu to the scatter_ it
// decomposes into (as on CUDA), so a bad class would fail with scatter_'s words. This kernel sends one_hot
// to its own lowering instead, which checks the values on the device with one_hot's words.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/stack.h>

namespace torchtpu::aten {

// Makes CPU's checks that need no values, fixes num_classes (num_classes = -1 reads the largest class, a
// sync point, as on CPU), then runs the lowered op.
void one_hot_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack);

}  // namespace torchtpu::aten
