// Custom kernels (python/torchtpu/kernels): StableHLO functions registered at run time, called from programs.
//
// A kernel entry is one specialisation of a user kernel (a JAX function exported for the shapes and dtypes
// seen, or StableHLO text): its functions, the one to call, and its signature. The op
// `torchtpu::_kernel(Tensor[] inputs, int entry) -> Tensor[]` lowers to a call of the entry, so every
// driver (strict, fused, compiled) splices the kernel into its program like any other op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace torchtpu::lowering {

struct Kernel {
  std::string name;       // the user's op name ("mylib::rms_norm"), for messages
  std::string functions;  // MLIR text of private func.func ops whose names are unique to this entry
  std::string entry;      // the function to call, without "@"
  std::vector<ir::Type> inputs;
  std::vector<ir::Type> outputs;
};

// Registers a kernel entry and returns its id (entries live for the process).
int64_t register_kernel(Kernel kernel);
// The entry `id`; throws std::invalid_argument for an id never registered.
const Kernel& registered_kernel(int64_t id);

}  // namespace torchtpu::lowering
