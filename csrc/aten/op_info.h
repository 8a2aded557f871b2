// What the tpu kernel knows about one ATen overload, independent of any call: its rule, the arguments it
// writes, how each argument reaches a program, and its counters. Built once per overload.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <atomic>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "aten/metrics.h"
#include "lowering/rule.h"

namespace torchtpu::aten {

// Whether an op may run on tensors that grow (aten/append.h) padded to their capacity, so that one program
// serves every length: kEdge when each result position reads only the same position of its inputs (or the
// positions an index names), so rows padded with copies of the last real one change no real result; kZero
// for sums, which padding with zeros leaves unchanged.
enum class RowPadding : uint8_t { kNone, kEdge, kZero };

// How an argument of the schema reaches the program.
enum class ArgClass {
  kTensor,         // Tensor / Tensor?: a storage parameter (a 0-dim CPU tensor: a scalar operand)
  kTensorList,     // Tensor[] / Tensor?[]
  kScalarOperand,  // Scalar / float (optional or not): a runtime operand unless the rule reads its value
  kScalarList,     // Scalar[] (the foreach ops): one runtime operand of all values
  kIntListOperand,  // int[] of a rule with int_lists_are_operands: one i64 operand, keyed by length
                    // (and by its largest element where Rule::int_list_maxima_shape_output says so)
  kStatic,         // int, bool, int[], str, ...: part of the program, keyed by value
};

struct OpInfo {
  std::string name;  // "aten::add_.Tensor"
  const lowering::Rule* rule = nullptr;
  std::vector<ArgClass> arg_classes;  // one per schema argument
  std::vector<size_t> mutated;        // argument indices written by the op (tensors or tensor lists)
  bool is_out_variant = false;
  // The `bool check_errors` argument of the linalg *_ex ops, -1 if none: when set, a failed factorization
  // raises like the CPU kernels do, from the op's last result (info), naming the op as `linalg_api`.
  int check_errors_arg = -1;
  std::string linalg_api;
  OpCounters* counters = nullptr;
  // Bit i: the rule reads scalar argument i at compile time, so programs are keyed by its value. Learned
  // when a rule first does so; the key of the program built then already includes the value.
  std::atomic<uint64_t> static_scalars{0};
  // Bit i: scalar argument i defaults to 1 in the schema (add's alpha, addcmul's value); a call passing 1
  // there gets the value compiled in (aten/op_key.h passes_unit_default).
  uint64_t unit_defaults = 0;
  // Scalar arguments CPU's kernel converts to the op's dtype with c10's overflow check (clamp's bounds,
  // fill values, alpha): a value the dtype cannot hold raises there instead of wrapping.
  std::vector<size_t> overflow_checked;
  // How CPU converts them for a float16/bfloat16 result: checked in that type, checked in float32
  // (addcmul's and addcdiv's value), or not at all (where's scalars; fill_ of a single element).
  enum class HalfScalars : uint8_t { kChecked, kAsFloat, kUnchecked, kUncheckedForOneElement };
  HalfScalars half_scalars = HalfScalars::kChecked;
  RowPadding row_padding = RowPadding::kNone;

  // Recompilation watch: the signatures of the latest compiles, for the one warning when an op keeps
  // compiling (see recompile_warning_threshold()).
  std::mutex recompile_mutex;
  std::deque<std::string> recent_signatures;
  int64_t programs_built = 0;
  bool warned = false;
};

// The OpInfo of `op`, built on first use. Lock-free after a thread's first call for the op.
OpInfo& op_info(const c10::OperatorHandle& op);

bool is_mutated(const OpInfo& info, size_t arg);

// Whether a scalar argument (or a schema default) is exactly 1, as an int or a double.
bool is_one(const c10::IValue& v);

}  // namespace torchtpu::aten
