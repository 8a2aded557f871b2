#pragma once

#include <vector>

namespace torchtpu::aten {

// ATen overloads ("add.Tensor", "add_.Tensor", ...) served by op_kernel, i.e. by a lowering rule.
const std::vector<const char*>& lowered_ops();

}  // namespace torchtpu::aten
