// Runtime tests against the real plugin named by TORCHTPU_PJRT_PLUGIN (ctest sets it).
#include <cstring>
#include <string>

#include "runtime/buffer.h"
#include "runtime/compile_options.h"
#include "runtime/error.h"
#include "runtime/executable.h"
#include "runtime/plugin.h"
#include "testing/check.h"

using namespace torchtpu;
using namespace torchtpu::runtime;

namespace {

const char* kAddProgram = R"(module @add {
  func.func public @main(%arg0: tensor<4xf32>, %arg1: tensor<4xf32>) -> (tensor<4xf32>) {
    %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%0) : (tensor<4xf32>) -> ()
  }
})";

const char* kAliasedAddProgram = R"(module @add_in_place {
  func.func public @main(%arg0: tensor<4xf32> {tf.aliasing_output = 0 : i32}, %arg1: tensor<4xf32>) -> (tensor<4xf32>) {
    %0 = "stablehlo.add"(%arg0, %arg1) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "func.return"(%0) : (tensor<4xf32>) -> ()
  }
})";

}  // namespace

TEST_CASE("an aliased argument is donated unless kept") {
  float a[4] = {1, 2, 3, 4};
  float b[4] = {10, 20, 30, 40};
  auto exe = compile(kAliasedAddProgram, {{DType::kF32, {4}}}, {0});
  // Kept: the input stays readable and the output is a new buffer.
  BufferPtr x = upload(a, DType::kF32, {4}, 0, nullptr);
  BufferPtr y = upload(b, DType::kF32, {4}, 0, nullptr);
  auto kept = exe->execute(0, {x.get(), y.get()}, {0});
  float out[4] = {};
  download(*kept[0], out);
  EXPECT(out[0] == 11 && out[3] == 44);
  download(*x, out);
  EXPECT(out[0] == 1 && out[3] == 4);
  // Donated: the result reuses x's memory, so live bytes do not grow by a buffer.
  synchronize(0);
  const int64_t before = memory_stats(0).allocated;
  auto donated = exe->execute(0, {x.get(), y.get()});
  x.reset();  // the donated handle is dead; dropping it frees nothing twice
  download(*donated[0], out);
  EXPECT(out[0] == 11 && out[3] == 44);
  EXPECT(memory_stats(0).allocated <= before);
}

TEST_CASE("compile options encode the build options and the portable flag") {
  const std::string bytes = compile_options_proto(true);
  // field 3, length-delimited, then device_ordinal=-1 as a 10-byte varint.
  EXPECT(static_cast<unsigned char>(bytes[0]) == 0x1a);
  EXPECT(static_cast<unsigned char>(bytes[2]) == 0x08);
  EXPECT(static_cast<unsigned char>(bytes[bytes.size() - 2]) == 0x20);
  EXPECT(bytes.back() == 1);
  EXPECT(compile_options_proto(false).size() == bytes.size() - 2);
}

TEST_CASE("plugin loads and reports devices") {
  EXPECT(device_count() >= 1);
  EXPECT(plugin_info().api_major == 0);
  EXPECT(!plugin_info().platform.empty());
}

TEST_CASE("upload, execute, download round trip") {
  float a[4] = {1, 2, 3, 4};
  float b[4] = {10, 20, 30, 40};
  bool released = false;
  BufferPtr x = upload(a, DType::kF32, {4}, 0, nullptr);
  BufferPtr y = upload(b, DType::kF32, {4}, 0, [&released] { released = true; });
  auto exe = compile(kAddProgram, {{DType::kF32, {4}}});
  auto outputs = exe->execute(0, {x.get(), y.get()});
  EXPECT(outputs.size() == 1);
  float out[4] = {};
  download(*outputs[0], out);
  EXPECT(out[0] == 11 && out[3] == 44);
  synchronize(0);
  EXPECT(released);
}

TEST_CASE("memory accounting follows live buffers") {
  const int64_t before = memory_stats(0).allocated;
  {
    int32_t data[256] = {};
    BufferPtr x = upload(data, DType::kI32, {256}, 0, nullptr);
    EXPECT(memory_stats(0).allocated == before + 1024);
  }
  EXPECT(memory_stats(0).allocated == before);
}

TEST_CASE("past the memory limit: OutOfMemory with the figures, before anything runs") {
  const int64_t live = memory_stats(0).allocated;
  set_memory_limit(0, live + 512);
  int32_t data[256] = {};
  bool thrown = false;
  try {
    upload(data, DType::kI32, {256}, 0, nullptr);
  } catch (const OutOfMemory& e) {
    thrown = true;
    EXPECT(e.code() == kResourceExhausted);
    EXPECT(e.requested == 1024 && e.allocated == live && e.limit == live + 512);
    EXPECT(std::string(e.what()).find("Tried to allocate 1.00 KiB") != std::string::npos);
  }
  EXPECT(thrown);
  EXPECT(memory_stats(0).allocated == live);  // nothing was allocated
  EXPECT(memory_stats(0).ooms >= 1);
  set_memory_limit(0, -1);
  BufferPtr x = upload(data, DType::kI32, {256}, 0, nullptr);
  EXPECT(memory_stats(0).allocated == live + 1024);
}

TEST_CASE("plugin_available answers yes and this process is no bad fork") {
  EXPECT(plugin_available());
  EXPECT(!in_bad_fork());
}

TEST_CASE("a bad program raises PjrtError with the plugin's message") {
  bool thrown = false;
  try {
    compile("module { this is not mlir }", {});
  } catch (const PjrtError& e) {
    thrown = true;
    EXPECT(std::string(e.what()).find("PJRT_Client_Compile") != std::string::npos);
  }
  EXPECT(thrown);
  // The client stays usable.
  float a[4] = {1, 2, 3, 4};
  BufferPtr x = upload(a, DType::kF32, {4}, 0, nullptr);
  float out[4] = {};
  download(*x, out);
  EXPECT(out[2] == 3);
}

TEST_CASE("synchronize waits for work whose results were already freed") {
  float a[4] = {1, 2, 3, 4};
  BufferPtr x = upload(a, DType::kF32, {4}, 0, nullptr);
  auto exe = compile(kAddProgram, {{DType::kF32, {4}}});
  for (int i = 0; i < 1000; ++i) exe->execute(0, {x.get(), x.get()});  // outputs dropped at once
  synchronize(0);
  synchronize(0);  // nothing pending: returns at once
  auto outputs = exe->execute(0, {x.get(), x.get()});
  float out[4] = {};
  download(*outputs[0], out);
  EXPECT(out[1] == 4);
}

int main() { return torchtpu::testing::run_all(); }
