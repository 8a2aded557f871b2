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

 private:
  void* loaded_executable_;
  std::vector<ArrayType> output_types_;
  std::vector<int64_t> aliased_inputs_;  // argument indices the program may donate to an output
};

// Compiles a StableHLO module given as MLIR text. `output_types` describe the results, in order;
// `aliased_inputs` are the parameters the text marks with tf.aliasing_output.
std::unique_ptr<Executable> compile(const std::string& stablehlo, std::vector<ArrayType> output_types,
                                    std::vector<int64_t> aliased_inputs = {});

}  // namespace torchtpu::runtime
