// Small building blocks shared by the rule families.
#pragma once

#include <vector>

#include "lowering/rule.h"

namespace torchtpu::lowering {

// NumPy-style broadcast (align trailing dims) of `x` to `dims`.
Value broadcast_to(Graph& g, Value x, const std::vector<int64_t>& dims);
// Converts to `target.dtype` and broadcasts to `target.dims`.
Value cast_to(Graph& g, Value x, const Type& target);
// Wraps negative dims and sorts; an empty list means every dim (PyTorch's reduction convention).
std::vector<int64_t> reduction_dims(const std::vector<int64_t>& dims, int64_t rank);
// The type reductions accumulate in: float32 for 16-bit floats, as PyTorch does.
DType accumulation_dtype(DType dtype);

// Elementwise result of `name` over the arguments converted to `compute` and broadcast to `dims`.
Value elementwise(Graph& g, const std::string& name, const std::vector<Value>& operands, DType compute,
                  const std::vector<int64_t>& dims);

}  // namespace torchtpu::lowering
