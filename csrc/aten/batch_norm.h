#pragma once

#include <ATen/core/Tensor.h>

#include <tuple>

namespace torchtpu::aten {

// native_batch_norm updates running_mean/running_var in place without saying so in its schema, so the
// generic kernel could not see the writes. It is routed to the _native_batch_norm_legit overloads, whose
// schemas mark the running statistics as mutated.
std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps);

}  // namespace torchtpu::aten
