#include "aten/batch_norm.h"

#include <ATen/ops/_native_batch_norm_legit.h>
#include <ATen/ops/_native_batch_norm_legit_no_training.h>

namespace torchtpu::aten {

std::tuple<at::Tensor, at::Tensor, at::Tensor> native_batch_norm(
    const at::Tensor& input, const std::optional<at::Tensor>& weight, const std::optional<at::Tensor>& bias,
    const std::optional<at::Tensor>& running_mean, const std::optional<at::Tensor>& running_var, bool training,
    double momentum, double eps) {
  const bool has_running = running_mean.has_value() && running_mean->defined() && running_var.has_value() &&
                           running_var->defined();
  if (!has_running) return at::_native_batch_norm_legit(input, weight, bias, training, momentum, eps);
  if (!training) {
    return at::_native_batch_norm_legit_no_training(input, weight, bias, *running_mean, *running_var, momentum, eps);
  }
  // The legit overload takes the statistics as mutable references; they are the caller's tensors.
  at::Tensor mean = *running_mean;
  at::Tensor var = *running_var;
  return at::_native_batch_norm_legit(input, weight, bias, mean, var, training, momentum, eps);
}

}  // namespace torchtpu::aten
