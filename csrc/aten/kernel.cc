#include "aten/kernel.h"

#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <stdexcept>

#include "aten/storage.h"
#include "lowering/kernel.h"

namespace torchtpu::aten {
namespace {

std::vector<ir::Type> to_types(const std::vector<KernelType>& types) {
  std::vector<ir::Type> out;
  for (const KernelType& t : types) out.push_back(ir::Type{to_dtype(t.dtype), t.sizes});
  return out;
}

}  // namespace

int64_t register_kernel(const std::string& name, const std::string& functions, const std::string& entry,
                        const std::vector<KernelType>& inputs, const std::vector<KernelType>& outputs) {
  return lowering::register_kernel(lowering::Kernel{name, functions, entry, to_types(inputs), to_types(outputs)});
}

std::vector<at::Tensor> kernel_meta(at::TensorList inputs, int64_t entry) {
  const lowering::Kernel* kernel = nullptr;
  try {
    kernel = &lowering::registered_kernel(entry);
  } catch (const std::invalid_argument& e) {
    TORCH_CHECK_VALUE(false, e.what());
  }
  TORCH_CHECK_VALUE(inputs.size() == kernel->inputs.size(), kernel->name, ": the kernel takes ",
                    kernel->inputs.size(), " tensors, got ", inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const ir::Type& want = kernel->inputs[i];
    TORCH_CHECK_VALUE(inputs[i].sizes().vec() == want.dims && to_dtype(inputs[i].scalar_type()) == want.dtype,
                      kernel->name, ": input ", i, " should be ", ir::to_mlir(want), " (the shape and dtype the "
                      "kernel was built for), got ", inputs[i].scalar_type(), inputs[i].sizes());
  }
  std::vector<at::Tensor> outputs;
  for (const ir::Type& t : kernel->outputs) {
    outputs.push_back(at::empty(t.dims, at::TensorOptions().dtype(to_scalar_type(t.dtype)).device(at::kMeta)));
  }
  return outputs;
}

}  // namespace torchtpu::aten
