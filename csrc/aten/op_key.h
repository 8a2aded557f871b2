// The program-cache key of one op call, and a readable form of it for warnings.
#pragma once

#include <functional>

#include <ATen/core/stack.h>

#include <string>

#include "aten/op_info.h"
#include "cache/program_key.h"

namespace torchtpu::aten {

// The op and whether value checks are on, then per argument what shapes its program:
//   device tensor: dtype, sizes, strides, the storage's element type and length (the storage offset of a
//                  view over part of its storage is an operand); a grown tensor that a padded call reads
//                  (aten/append.h): its sizes but the length, which is an operand;
//   0-dim CPU tensor: dtype and whether it is a wrapped Python number (type promotion differs), not its value;
//   Scalar / float: its kind (float, int, bool), plus its value only if the rule reads it at compile time,
//                   else whether it is its schema default of 1 (passes_unit_default);
//   Scalar[]: its length and element kinds (values likewise);
//   anything else (dims, sizes, flags, strings): its value.
// `pad_rows`: a call over grown tensors may run padded to capacity (aten/append.h row_call); false for the
// key of the same call run as shaped.
cache::ProgramKey op_key(const OpInfo& info, const torch::jit::Stack& stack, size_t first, bool pad_rows = true);

// "f32[8, 64], f32[64]@offset, alpha=1 (static)", for the recompilation warning. Only built on a miss.
std::string describe_call(const OpInfo& info, const torch::jit::Stack& stack, size_t first);

// Whether scalar argument `arg` is left at its schema default of 1 (add's and sub's alpha, addcmul's value,
// addmm's beta and alpha): then it is compiled in as a constant rather than passed as an operand, so the
// commonest calls pass one buffer fewer; any other value shares the program that takes it as an operand.
// Only defaults: a value computed each step (a learning rate, a decay factor) that happens to reach 1 must
// not compile a program of its own mid-training.
bool passes_unit_default(const OpInfo& info, size_t arg, const c10::IValue& v);

bool is_cpu_scalar(const at::Tensor& t);
bool is_tensor_list(const c10::IValue& v);
// Elements of a Tensor[] or Tensor?[] argument; a missing optional element is an undefined tensor.
std::vector<at::Tensor> list_elements(const c10::IValue& v);
// The same kind of list as `like` (Tensor[] or Tensor?[]), holding `elements`.
c10::IValue make_list(const c10::IValue& like, const std::vector<at::Tensor>& elements);
// The arguments from stack[first] for a CPU kernel: each tensor (list elements too) replaced by
// `to_host(tensor)`, a generator dropped (a tpu one cannot drive a CPU kernel), the rest as they are.
std::vector<c10::IValue> host_arguments(const torch::jit::Stack& stack, size_t first,
                                        const std::function<at::Tensor(const at::Tensor&)>& to_host);

}  // namespace torchtpu::aten
