// A torch.compile graph captured once and then run as its one program (python/torchtpu/compile.py).
//
// The first call of a compiled graph records its ops in fused mode as one trace (begin_capture and
// end_capture in aten/fused.h). The plan kept from that trace says where a later call finds each program
// parameter (an input's storage, a constant, a fresh RNG state, a CPU scalar that the graph's CPU part
// computed) and where each result goes (an input's storage for an in-place update, a new storage behind
// the graph's outputs). A later call checks its inputs against the capture (storage offsets, buffer types,
// which inputs share a storage) and runs the program without dispatching a single op. A call that
// differs gets nothing back, and the caller runs the graph through the fused driver instead.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "aten/fused.h"

namespace torchtpu::aten {

class CompiledGraph {
 public:
  // Ends the capture begun by begin_capture() == `trace` and runs it. `inputs` are the graph's tpu tensor
  // inputs (parameters and constants included) and `outputs` its tpu tensor outputs. Returns null, with
  // `why_not` set, when the trace cannot be replayed.
  static std::shared_ptr<CompiledGraph> capture(uint64_t trace, const std::vector<at::Tensor>& inputs,
                                                const std::vector<at::Tensor>& outputs, std::string& why_not);

  // The CPU tensors whose values the program took at capture, in the order run() takes their new values.
  // Handed over once: the graph keeps no reference to them.
  std::vector<at::Tensor> take_cpu_scalars();

  // Whether the program serves these inputs (in capture order): the same storage offsets, buffer types
  // and sharing of storages as at capture, and value checks switched as they were. May run a pending trace
  // to get their buffers.
  bool fits(const std::vector<at::Tensor>& inputs) const;
  // The graph's tpu outputs for inputs that fit, given the new values of the CPU scalars.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& cpu_scalars) const;

 private:
  struct Parameter {
    enum class Kind { kInput, kConstant, kRngState, kCpuScalar, kCheckState };
    Kind kind = Kind::kConstant;
    int index = 0;          // kInput: the input; kCpuScalar: the CPU scalar
    int64_t rng_draws = 0;  // kRngState
    runtime::BufferPtr constant;
    DType dtype = DType::kF32;  // kInput, kCpuScalar: what the program takes
    std::vector<int64_t> dims;  // kInput
  };
  struct Result {
    enum class Kind { kInput, kNewStorage, kCheckState, kDropped };
    Kind kind = Kind::kDropped;
    int index = 0;  // the input, or the new storage
  };
  struct Output {
    bool of_input = false;  // a view of input `storage`, else of new storage `storage`
    int storage = 0;
    at::ScalarType dtype;
    std::vector<int64_t> sizes, strides;
    int64_t offset = 0;
  };

  std::shared_ptr<FusedProgram> program_;
  int device_ = 0;
  std::vector<Parameter> parameters_;
  std::vector<Result> results_;
  std::vector<size_t> new_storage_bytes_;
  std::vector<Output> outputs_;
  std::vector<int> input_group_;  // per input: the first input sharing its storage
  std::vector<int64_t> input_offsets_;
  std::vector<runtime::ShardingPtr> input_shardings_;  // per input, before the captured trace ran (SPMD)
  bool value_checks_ = true;  // whether the program makes value checks (aten/value_checks.h)
  std::vector<at::Tensor> cpu_scalars_;
};

struct CompiledGraphStats {
  int64_t captures = 0;
  int64_t replays = 0;
};
CompiledGraphStats compiled_graph_stats();
void reset_compiled_graph_stats();

}  // namespace torchtpu::aten
