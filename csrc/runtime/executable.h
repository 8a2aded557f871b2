// Compiling StableHLO and running the result.
#pragma once

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

// Owns one loaded, portable executable: it runs on any device of the client.
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
  std::vector<BufferPtr> execute(int device, const std::vector<const Buffer*>& arguments,
                                 const std::vector<int64_t>& kept = {}) const;
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
  void* loaded_executable_;
  std::vector<ArrayType> output_types_;
  std::vector<int64_t> aliased_inputs_;  // argument indices the program may donate to an output
  std::shared_ptr<const std::string> name_;  // shared with its pending executions and output buffers
};

// Compiles a StableHLO module given as MLIR text. `output_types` describe the results, in order;
// `aliased_inputs` are the parameters the text marks with tf.aliasing_output.
std::unique_ptr<Executable> compile(const std::string& stablehlo, std::vector<ArrayType> output_types,
                                    std::vector<int64_t> aliased_inputs = {});

// Loads an executable that Executable::serialize produced with this plugin build. Throws PjrtError when
// the plugin rejects the bytes.
std::unique_ptr<Executable> deserialize(const std::string& bytes, std::vector<ArrayType> output_types,
                                        std::vector<int64_t> aliased_inputs);

// The serialized compile options every program is compiled with (part of a cached program's identity).
const std::string& compile_options();

}  // namespace torchtpu::runtime
