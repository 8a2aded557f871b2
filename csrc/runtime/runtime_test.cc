// Runtime tests against the real plugin named by TORCHTPU_PJRT_PLUGIN (ctest sets it).
#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/compile_options.h"
#include "runtime/error.h"
#include "runtime/executable.h"
#include "runtime/pjrt_api.h"
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

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// A device buffer whose contents are still to come from the host; fail() makes it an error buffer, as a
// failed computation's output is, after executions that read it were launched.
class PendingInput {
 public:
  explicit PendingInput(const std::vector<int64_t>& dims) {
    const Plugin& p = plugin();
    PJRT_Device_DefaultMemory_Args memory{};
    memory.struct_size = PJRT_Device_DefaultMemory_Args_STRUCT_SIZE;
    memory.device = p.devices.at(0);
    check(p.api, p.api->PJRT_Device_DefaultMemory(&memory), "PJRT_Device_DefaultMemory");
    PJRT_ShapeSpec spec{};
    spec.struct_size = PJRT_ShapeSpec_STRUCT_SIZE;
    spec.dims = dims.data();
    spec.num_dims = dims.size();
    spec.element_type = PJRT_Buffer_Type_F32;
    PJRT_Client_CreateBuffersForAsyncHostToDevice_Args create{};
    create.struct_size = PJRT_Client_CreateBuffersForAsyncHostToDevice_Args_STRUCT_SIZE;
    create.client = p.client;
    create.shape_specs = &spec;
    create.num_shape_specs = 1;
    create.memory = memory.memory;
    check(p.api, p.api->PJRT_Client_CreateBuffersForAsyncHostToDevice(&create),
          "PJRT_Client_CreateBuffersForAsyncHostToDevice");
    manager_ = create.transfer_manager;
    PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args retrieve{};
    retrieve.struct_size = PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer_Args_STRUCT_SIZE;
    retrieve.transfer_manager = manager_;
    check(p.api, p.api->PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer(&retrieve),
          "PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer");
    buffer = std::make_shared<Buffer>(retrieve.buffer_out, DType::kF32, dims, 0);
  }
  ~PendingInput() {
    PJRT_AsyncHostToDeviceTransferManager_Destroy_Args destroy{};
    destroy.struct_size = PJRT_AsyncHostToDeviceTransferManager_Destroy_Args_STRUCT_SIZE;
    destroy.transfer_manager = manager_;
    destroy_error(plugin().api, plugin().api->PJRT_AsyncHostToDeviceTransferManager_Destroy(&destroy));
  }
  void fail(const std::string& message) {
    PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args args{};
    args.struct_size = PJRT_AsyncHostToDeviceTransferManager_SetBufferError_Args_STRUCT_SIZE;
    args.transfer_manager = manager_;
    args.error_code = PJRT_Error_Code_DATA_LOSS;
    args.error_message = message.data();
    args.error_message_size = message.size();
    check(plugin().api, plugin().api->PJRT_AsyncHostToDeviceTransferManager_SetBufferError(&args),
          "PJRT_AsyncHostToDeviceTransferManager_SetBufferError");
  }
  BufferPtr buffer;

 private:
  PJRT_AsyncHostToDeviceTransferManager* manager_ = nullptr;
};

}  // namespace

TEST_CASE("an asynchronous execution error names its program, keeps its code and stalls nothing") {
  float a[4] = {1, 2, 3, 4};
  BufferPtr x = upload(a, DType::kF32, {4}, 0, nullptr);
  synchronize(0);
  auto first = compile(kAddProgram, {{DType::kF32, {4}}});
  first->set_name("aten::first_op");
  auto second = compile(kAddProgram, {{DType::kF32, {4}}});
  second->set_name("aten::second_op");
  PendingInput input({4});
  // Both executions are launched (the calls return) before the failure exists.
  auto failed = first->execute(0, {input.buffer.get(), x.get()});
  auto downstream = second->execute(0, {failed[0].get(), x.get()});
  input.fail("injected failure");
  std::string message;
  int code = 0;
  try {
    synchronize(0);
  } catch (const PjrtError& e) {
    message = e.what();
    code = e.code();
  }
  // The CPU plugin reports a computation whose input failed as INTERNAL ("Compute error: ..."); the
  // message and the exception keep that code.
  EXPECT(contains(message, "asynchronous execution of aten::first_op failed (INTERNAL)"));
  EXPECT(contains(message, "injected failure"));
  EXPECT(code == PJRT_Error_Code_INTERNAL);
  message.clear();
  float out[4] = {};
  try {
    download(*downstream[0], out);
  } catch (const PjrtError& e) {
    message = e.what();
  }
  EXPECT(contains(message, "device-to-host transfer of a result of aten::second_op failed"));
  EXPECT(contains(message, "injected failure"));
  // Later work runs, and the error was reported once.
  auto later = first->execute(0, {x.get(), x.get()});
  download(*later[0], out);
  EXPECT(out[3] == 8);
  synchronize(0);
}

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

TEST_CASE("a queue mark is reached once the work before it is done, never before an earlier mark") {
  auto exe = compile(kAddProgram, {{DType::kF32, {4}}});
  EXPECT(QueueMark(0).reached());  // nothing queued
  PendingInput input({4});
  auto outputs = exe->execute(0, {input.buffer.get(), input.buffer.get()});  // waits for the input
  QueueMark first(0);
  QueueMark second(0);
  EXPECT(!first.reached() && !second.reached());
  // A synchronize in another thread takes the execution off the pending list while it awaits it: a mark
  // made meanwhile still sees it.
  std::thread waiter([] {
    try {
      synchronize(0);
    } catch (const PjrtError&) {
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  QueueMark during(0);
  EXPECT(!during.reached());
  input.fail("the input never came");
  waiter.join();
  first.wait();
  second.wait();
  during.wait();
  EXPECT(first.reached() && second.reached() && during.reached());
  EXPECT(second.reached_at() >= first.reached_at() && during.reached_at() >= second.reached_at());
}

TEST_CASE("8 threads upload, execute, read back and synchronize at once") {
  auto exe = compile(kAddProgram, {{DType::kF32, {4}}});
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        const float v = static_cast<float>(t * 100 + i);
        float a[4] = {v, v, v, v};
        BufferPtr x = upload(a, DType::kF32, {4}, 0, nullptr);
        auto y = exe->execute(0, {x.get(), x.get()});
        float out[4] = {};
        download(*y[0], out);
        if (out[0] != 2 * v || out[3] != 2 * v) wrong++;
        if (i % 10 == 0) synchronize(0);
        if (memory_stats(0).allocated < 0) wrong++;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  synchronize(0);
  EXPECT(wrong == 0);
}

int main() { return torchtpu::testing::run_all(); }
