// The program-cache key of one op call, and a readable form of it for warnings.
#pragma once

#include <ATen/core/stack.h>

#include <string>

#include "aten/op_info.h"
#include "cache/program_key.h"

namespace torchtpu::aten {

// The op and whether value checks are on, then per argument what shapes its program:
//   device tensor: dtype, sizes, strides, the storage's element type and length (the storage offset of a
//                  view over part of its storage is an operand);
//   0-dim CPU tensor: dtype and whether it is a wrapped Python number (type promotion differs), not its value;
//   Scalar / float: its kind (float, int, bool), plus its value only if the rule reads it at compile time,
//                   else whether it is 1 (is_unit_scalar);
//   Scalar[]: its length and element kinds (values likewise);
//   anything else (dims, sizes, flags, strings): its value.
cache::ProgramKey op_key(const OpInfo& info, const torch::jit::Stack& stack, size_t first);

// "f32[8, 64], f32[64]@offset, alpha=1 (static)", for the recompilation warning. Only built on a miss.
std::string describe_call(const OpInfo& info, const torch::jit::Stack& stack, size_t first);

// A Scalar / float argument of exactly 1 (add's and sub's alpha, addcmul's value, addmm's beta and alpha at
// their defaults) is compiled in as a constant rather than passed as an operand: the commonest calls then
// pass one buffer fewer, and only a call with another value builds the program that takes it as an operand.
bool is_unit_scalar(const c10::IValue& v);

bool is_cpu_scalar(const at::Tensor& t);
bool is_tensor_list(const c10::IValue& v);
// Elements of a Tensor[] or Tensor?[] argument; a missing optional element is an undefined tensor.
std::vector<at::Tensor> list_elements(const c10::IValue& v);

}  // namespace torchtpu::aten
