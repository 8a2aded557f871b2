// The one list of tpu kernels. Lowered ops share the boxed op_kernel; a handful of ops that move data
// between host and device, or only touch metadata, have their own kernels. Everything else takes the CPU
// fallback. tests/test_registrations.py checks that every lowered op here has a rule.
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "aten/copy.h"
#include "aten/fallback.h"
#include "aten/op_kernel.h"
#include "aten/registrations.h"
#include "aten/storage_ops.h"

namespace torchtpu::aten {

const std::vector<const char*>& lowered_ops() {
  static const std::vector<const char*> ops = {
      "abs",
      "abs.out",
      "abs_",
      "add.Tensor",
      "add.out",
      "add_.Tensor",
      "addmm",
      "addmm.out",
      "addmm_",
      "amax",
      "amax.out",
      "amin",
      "amin.out",
      "arange.start_out",
      "argmax",
      "argmax.out",
      "argmin",
      "argmin.out",
      "bmm",
      "bmm.out",
      "clamp",
      "clamp.out",
      "clamp_",
      "clamp_max",
      "clamp_max.out",
      "clamp_max_",
      "clamp_min",
      "clamp_min.out",
      "clamp_min_",
      "clone",
      "clone.out",
      "copy",
      "copy.out",
      "cos",
      "cos.out",
      "cos_",
      "div.Tensor",
      "div.Tensor_mode",
      "div.out",
      "div.out_mode",
      "div_.Tensor",
      "div_.Tensor_mode",
      "eq.Scalar",
      "eq.Scalar_out",
      "eq.Tensor",
      "eq.Tensor_out",
      "eq_.Scalar",
      "eq_.Tensor",
      "exp",
      "exp.out",
      "exp_",
      "fill.Scalar",
      "fill.Scalar_out",
      "fill.Tensor",
      "fill.Tensor_out",
      "fill_.Scalar",
      "fill_.Tensor",
      "ge.Scalar",
      "ge.Scalar_out",
      "ge.Tensor",
      "ge.Tensor_out",
      "ge_.Scalar",
      "ge_.Tensor",
      "gt.Scalar",
      "gt.Scalar_out",
      "gt.Tensor",
      "gt.Tensor_out",
      "gt_.Scalar",
      "gt_.Tensor",
      "le.Scalar",
      "le.Scalar_out",
      "le.Tensor",
      "le.Tensor_out",
      "le_.Scalar",
      "le_.Tensor",
      "log",
      "log.out",
      "log_",
      "logical_not",
      "logical_not.out",
      "logical_not_",
      "lt.Scalar",
      "lt.Scalar_out",
      "lt.Tensor",
      "lt.Tensor_out",
      "lt_.Scalar",
      "lt_.Tensor",
      "max",
      "max.dim",
      "max.dim_max",
      "max.unary_out",
      "maximum",
      "maximum.out",
      "mean",
      "mean.dim",
      "mean.dtype_out",
      "mean.out",
      "min",
      "min.dim",
      "min.dim_min",
      "min.unary_out",
      "minimum",
      "minimum.out",
      "mm",
      "mm.out",
      "mse_loss",
      "mse_loss.out",
      "mse_loss_backward",
      "mse_loss_backward.grad_input",
      "mul.Tensor",
      "mul.out",
      "mul_.Tensor",
      "ne.Scalar",
      "ne.Scalar_out",
      "ne.Tensor",
      "ne.Tensor_out",
      "ne_.Scalar",
      "ne_.Tensor",
      "neg",
      "neg.out",
      "neg_",
      "normal_",
      "pow.Tensor_Scalar",
      "pow.Tensor_Scalar_out",
      "pow.Tensor_Tensor",
      "pow.Tensor_Tensor_out",
      "reciprocal",
      "reciprocal.out",
      "reciprocal_",
      "relu",
      "relu.out",
      "relu_",
      "rsqrt",
      "rsqrt.out",
      "rsqrt_",
      "sigmoid",
      "sigmoid.out",
      "sigmoid_",
      "sigmoid_backward",
      "sigmoid_backward.grad_input",
      "sin",
      "sin.out",
      "sin_",
      "sqrt",
      "sqrt.out",
      "sqrt_",
      "sub.Tensor",
      "sub.out",
      "sub_.Tensor",
      "sum",
      "sum.IntList_out",
      "sum.dim_IntList",
      "sum.out",
      "tanh",
      "tanh.out",
      "tanh_",
      "tanh_backward",
      "tanh_backward.grad_input",
      "threshold_backward",
      "threshold_backward.grad_input",
      "uniform_",
      "where.self",
      "where.self_out",
      "zero",
      "zero.out",
      "zero_",
  };
  return ops;
}

}  // namespace torchtpu::aten

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace torchtpu::aten;
  for (const char* op : lowered_ops()) m.impl(op, torch::CppFunction::makeFromBoxedFunction<&op_kernel>());
  m.impl("_copy_from", &copy_from);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
  m.impl("_local_scalar_dense", &local_scalar_dense);
  m.impl("_reshape_alias", &at::native::_reshape_alias);
  m.impl("as_strided", &at::native::as_strided_tensorimpl);
  m.impl("copy_", &copy_);
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("empty_strided", &empty_strided);
  m.impl("resize_", &resize_);
  m.impl("set_", &set_empty);
  m.impl("set_.source_Storage", &set_source_storage);
  m.impl("set_.source_Storage_storage_offset", &set_source_storage_offset);
  m.impl("set_.source_Tensor", &set_source_tensor);
  m.impl("unfold", &at::native::unfold);
  m.impl("view", &at::native::view);
  m.impl("view.dtype", &at::native::view_dtype);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torchtpu::aten::cpu_fallback>());
}
