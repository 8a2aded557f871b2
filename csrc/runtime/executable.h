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
  Executable(void* loaded_executable, std::vector<ArrayType> output_types);
  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  // Enqueues one execution on `device` and returns its outputs at once; they become ready
  // asynchronously and an execution error surfaces when an output is next waited on.
  std::vector<BufferPtr> execute(int device, const std::vector<const Buffer*>& arguments) const;
  const std::vector<ArrayType>& output_types() const { return output_types_; }

 private:
  void* loaded_executable_;
  std::vector<ArrayType> output_types_;
};

// Compiles a StableHLO module given as MLIR text. `output_types` describe the results, in order.
std::unique_ptr<Executable> compile(const std::string& stablehlo, std::vector<ArrayType> output_types);

}  // namespace torchtpu::runtime
