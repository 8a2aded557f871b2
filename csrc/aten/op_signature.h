// One compiled op program and the plan that connects it to a call's arguments, cached per (op, key).
//
// The plan lists where each program parameter comes from and where each program result goes, so that a
// cache hit runs the program without looking at the rule, building IR or reading the schema again.
#pragma once

#include <ATen/core/ATen_fwd.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "ir/graph.h"
#include "runtime/executable.h"

namespace torchtpu::aten {

// Where a program parameter comes from, in parameter order.
struct ParamSource {
  enum class Kind {
    kStorage,      // the whole storage of a tensor argument (or list element), read through its view
    kCpuScalar,    // a 0-dim CPU tensor argument: its value, uploaded as a rank-0 array
    kScalar,       // a Scalar / float argument: its value (f64, i64 or bool)
    kScalarList,   // a Scalar[] argument: its values as one f64 array
    kIntList,      // an int[] argument of a rule with int_lists_are_operands: its values as one i64 array
    kOffset,       // the storage offset (elements) of a tensor argument's view, as i64
    kStride,       // the stride (elements) of dim `dim` of a tensor argument's view, as i64 (aten/append.h)
    kRowLength,    // the size of dim `dim` of a grown tensor argument, as i64: a padded call's length
    kRngState,     // the generator's (seed, offset) for this call
    kWriteBase,    // the whole storage of a mutated argument, which a partial write scatters into
    kCheckState,   // the device's value-check error state (aten/value_checks.h)
  };
  Kind kind;
  size_t arg = 0;    // argument index (not used by kRngState)
  int element = -1;  // element of a tensor-list argument, or -1
  int dim = -1;      // kStride, kRowLength: the dim
};

// How one program result is bound: a new tensor, or the new storage contents of a mutated argument.
struct OutputBinding {
  std::vector<int64_t> sizes;  // functional output sizes, or the mutated arg's sizes
  at::ScalarType dtype;
  DType buffer_dtype;          // the program result's element type
  std::vector<int64_t> buffer_dims;
  size_t arg = 0;              // for writes: the mutated argument's index
  int element = -1;            // for writes into a tensor list: the element
  bool defined = true;         // false: an undefined result (a backward op's output_mask entry was false)
  std::vector<int64_t> strides;  // a functional output's strides when not row-major (the meta kernel's), else empty
  // A padded call's result that grows with its inputs (aten/append.h): this dim of `sizes` is the call's
  // length, and the buffer is a grown array with `grown_outer` elements before the dim and `grown_inner` after.
  int length_dim = -1;
  int64_t grown_outer = 0;
  int64_t grown_inner = 0;
};

// What the schema's returns are made of, in return order.
struct ReturnPlan {
  enum class Kind { kAlias, kTensor, kTensorList, kInt };
  Kind kind;
  size_t index = 0;  // kAlias: which mutated argument; kTensor/kTensorList: first functional binding
  size_t count = 1;  // kTensorList: number of bindings
  int64_t value = 0;  // kInt: an int result fixed by the shapes (attention's max_q / max_k)
};

struct OpSignature {
  std::unique_ptr<runtime::Executable> executable;
  // For fused mode, which calls this program from a larger one: its StableHLO module, its parameter
  // types, and an id unique in the process (a trace key names its ops by it).
  std::string text;
  std::vector<ir::Type> param_types;
  uint64_t id = 0;
  std::vector<ParamSource> params;
  std::vector<OutputBinding> functional;  // in return order (lists flattened)
  std::vector<OutputBinding> writes;      // one per mutated tensor (or list element) present, in argument order
  size_t first_write = 0;                 // program result of writes[0] (the defined functional ones come first)
  std::vector<ReturnPlan> returns;
  // (parameter, write) pairs the program aliases: the write may take the parameter's buffer (donation)
  // when nothing else holds it.
  std::vector<std::pair<size_t, size_t>> donations;
  bool uses_rng = false;
  int64_t rng_draws = 0;
  // The program makes value checks: its last result is the device's new error state.
  bool checks_values = false;
  // A padded call (aten/append.h): the parameter that takes its length, or -1.
  int row_length_param = -1;
  // No program: this call was keyed to run padded, but its results do not follow its length along one dim
  // (or its meta kernel refused the padded shapes); it runs as shaped.
  bool runs_as_shaped = false;
};

}  // namespace torchtpu::aten
