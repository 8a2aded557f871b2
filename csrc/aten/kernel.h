// `torchtpu::_kernel`, the op behind custom kernels (python/torchtpu/kernels, lowering/kernel.h): its meta
// kernel (output shapes from the registered entry) and the entry registration the Python side calls.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <string>
#include <vector>

namespace torchtpu::aten {

struct KernelType {
  at::ScalarType dtype;
  std::vector<int64_t> sizes;
};

// Registers one specialisation of a custom kernel: `functions` (private func.func ops, names unique to this
// entry), the one to call, and its input and output types. Returns the entry id `_kernel` takes.
int64_t register_kernel(const std::string& name, const std::string& functions, const std::string& entry,
                        const std::vector<KernelType>& inputs, const std::vector<KernelType>& outputs);

std::vector<at::Tensor> kernel_meta(at::TensorList inputs, int64_t entry);

}  // namespace torchtpu::aten
