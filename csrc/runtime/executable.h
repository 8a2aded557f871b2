// Compiling StableHLO and running the result.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "ir/dtype.h"
#include "runtime/buffer.h"

namespace torchtpu::runtime {

struct ArrayType {
  DType dtype;
  std::vector<int64_t> dims;
};

// How a program is split over the client's devices. The default runs on one device.
struct Partitioning {
  int num_partitions = 1;  // more than one: SPMD over devices 0..num_partitions-1
  // Per result: whether XLA's sharding propagation picks its sharding (else the program's annotation holds).
  std::vector<bool> free_result_shardings;
};

// Owns one loaded executable: a portable one runs on any device of the client; a partitioned one runs on
// all of them at once, reading and producing sharded buffers.
class Executable {
 public:
  Executable(void* loaded_executable, std::vector<ArrayType> output_types, std::vector<int64_t> aliased_inputs);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Enqueues one execution on `device` and returns its outputs at once; they become ready
  // asynchronously and an execution error surfaces when an output is next waited on.
  // Arguments the program aliases to an output (Graph::alias_result) are donated: their buffers become
  // the outputs and are unusable afterwards. `kept` lists the aliased arguments that must not be donated
  // because something else still reads them; the plugin then copies instead.
  // A partitioned program ignores `device`: it runs on every device, takes each sharded argument's shards
  // (an unsharded argument is copied to every device: the program reads it replicated) and returns
  // sharded buffers with the shardings the partitioner chose.
  std::vector<BufferPtr> execute(int device, const std::vector<const Buffer*>& arguments,
                                 const std::vector<int64_t>& kept = {}) const;
  int num_partitions() const { return num_partitions_; }
  const std::vector<ArrayType>& output_types() const { return output_types_; }
  // What launches this program ("aten::add.Tensor", "fused program of 12 ops"). An execution error
  // surfaces later, at a sync point or a read, and names it. Set before the first execution.
  void set_name(std::string name) { name_ = std::make_shared<const std::string>(std::move(name)); }
  const std::string& name() const { return *name_; }
  const std::vector<int64_t>& aliased_inputs() const { return aliased_inputs_; }
  // The plugin's serialized form of the compiled program, loadable by the same plugin build
  // (deserialize below); how the on-disk program cache stores it.
  std::string serialize() const;

 private:
  std::vector<BufferPtr> execute_partitioned(const std::vector<const Buffer*>& arguments,
                                             const std::vector<int64_t>& kept) const;
  // Runs `body(api, PJRT_Executable*)` (the handle owned for the call); its PJRT_Error* is raised as `what`.
  template <class Body>
  void with_executable(const char* what, const Body& body) const;
  void* loaded_executable_;
  std::vector<ArrayType> output_types_;
  std::vector<int64_t> aliased_inputs_;  // argument indices the program may donate to an output
  int num_partitions_ = 1;
  std::vector<ShardingPtr> output_shardings_;  // partitioned programs: one per output
  mutable std::atomic<bool> pieces_checked_{false};  // the first run compared its pieces with the shardings
  std::shared_ptr<const std::string> name_;  // shared with its pending executions and output buffers
};

// Compiles a StableHLO module given as MLIR text. `output_types` describe the results, in order;
// `aliased_inputs` are the parameters the text marks with tf.aliasing_output.
std::unique_ptr<Executable> compile(const std::string& stablehlo, std::vector<ArrayType> output_types,
                                    std::vector<int64_t> aliased_inputs = {}, const Partitioning& partitioning = {});

// Loads an executable that Executable::serialize produced with this plugin build. Throws PjrtError when
// the plugin rejects the bytes.
std::unique_ptr<Executable> deserialize(const std::string& bytes, std::vector<ArrayType> output_types,
                                        std::vector<int64_t> aliased_inputs);

// The serialized compile options every unpartitioned program is compiled with (part of a cached program's
// identity).
const std::string& compile_options();
// The compile options of a program partitioned as `partitioning` says (compile_options() for one device).
std::string compile_options(const Partitioning& partitioning);

}  // namespace torchtpu::runtime
