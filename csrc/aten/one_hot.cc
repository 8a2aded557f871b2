#include "aten/one_hot.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "aten/op_kernel.h"

namespace torchtpu::aten {

void one_hot_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  // (self, num_classes)
  const size_t first = stack->size() - 2;
  const at::Tensor self = (*stack)[first].toTensor();
  int64_t num_classes = (*stack)[first + 1].toInt();
  // Before reading the largest class: CPU checks the dtype first.
  TORCH_CHECK(self.scalar_type() == at::kLong, "one_hot is only applicable to index tensor of type LongTensor.");
  if (self.numel() == 0) {
    TORCH_CHECK(num_classes > 0, "Can not infer total number of classes from empty tensor.");
  } else {
    // The result's last dim is the largest class + 1; CPU reads it too.
    if (num_classes == -1) num_classes = self.max().item<int64_t>() + 1;
    // A count below 0 (all classes negative, or a negative num_classes other than -1) fails one of CPU's
    // checks whatever the values: 0 classes make the device's checks say which one, in CPU's order.
    num_classes = std::max<int64_t>(num_classes, 0);
  }
  (*stack)[first + 1] = num_classes;
  op_kernel(op, stack);
}

}  // namespace torchtpu::aten
