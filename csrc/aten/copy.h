// Copies between tpu and CPU tensors, and between tpu tensors, plus reading one element.
#pragma once

#include <ATen/core/Tensor.h>

namespace torchtpu::aten {

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking);
at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking);
at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst);
at::Scalar local_scalar_dense(const at::Tensor& self);
at::Tensor& conj_physical_(at::Tensor& self);
// aten::equal: same sizes and equal elements, computed on the device and read back as one bool.
bool equal(const at::Tensor& self, const at::Tensor& other);

}  // namespace torchtpu::aten
