#include "runtime/executable.h"

#include <algorithm>

#include "runtime/compile_options.h"
#include "runtime/error.h"
#include "runtime/pjrt_api.h"
#include "runtime/plugin.h"

namespace torchtpu::runtime {

Executable::Executable(void* loaded_executable, std::vector<ArrayType> output_types, std::vector<int64_t> aliased_inputs)
    : loaded_executable_(loaded_executable),
      output_types_(std::move(output_types)),
      aliased_inputs_(std::move(aliased_inputs)),
      name_(std::make_shared<const std::string>("a program")) {}

Executable::~Executable() {
  if (in_bad_fork()) return;  // the parent's executable; this process has no client to free it with
  const PJRT_Api* api = plugin().api;
  PJRT_LoadedExecutable_Destroy_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Destroy_Args_STRUCT_SIZE;
  args.executable = static_cast<PJRT_LoadedExecutable*>(loaded_executable_);
  destroy_error(api, api->PJRT_LoadedExecutable_Destroy(&args));  // a destructor must not throw
}

std::vector<BufferPtr> Executable::execute(int device, const std::vector<const Buffer*>& arguments,
                                           const std::vector<int64_t>& kept) const {
  exit_gate();
  const Plugin& p = plugin();
  std::vector<PJRT_Buffer*> inputs;
  inputs.reserve(arguments.size());
  for (const Buffer* argument : arguments) {
    if (argument->device() != device) {
      throw PjrtError(3, "argument buffer lives on device " + std::to_string(argument->device()) +
                             " but the execution targets device " + std::to_string(device));
    }
    inputs.push_back(static_cast<PJRT_Buffer*>(argument->pjrt()));
  }
  std::vector<PJRT_Buffer*> outputs(output_types_.size(), nullptr);
  PJRT_Buffer* const* argument_list = inputs.data();
  PJRT_Buffer** output_list = outputs.data();

  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  options.non_donatable_input_indices = kept.data();
  options.num_non_donatable_input_indices = kept.size();
  PJRT_LoadedExecutable_Execute_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  args.executable = static_cast<PJRT_LoadedExecutable*>(loaded_executable_);
  args.options = &options;
  args.argument_lists = &argument_list;
  args.num_devices = 1;
  args.num_args = inputs.size();
  args.output_lists = &output_list;
  PJRT_Event* done = nullptr;
  args.device_complete_events = &done;
  args.execute_device = p.devices.at(static_cast<size_t>(device));
  // What the outputs add to the device's live bytes: donated arguments lend theirs.
  int64_t requested = 0;
  for (const ArrayType& type : output_types_) {
    int64_t bytes = static_cast<int64_t>(element_size(type.dtype));
    for (int64_t d : type.dims) bytes *= d;
    requested += bytes;
  }
  for (int64_t aliased : aliased_inputs_) {
    if (std::find(kept.begin(), kept.end(), aliased) == kept.end()) {
      requested -= static_cast<int64_t>(arguments[static_cast<size_t>(aliased)]->nbytes());
    }
  }
  check_memory_limit(device, requested);
  check_allocation(p.api, p.api->PJRT_LoadedExecutable_Execute(&args), "PJRT_LoadedExecutable_Execute", device,
                   requested);

  for (int64_t aliased : aliased_inputs_) {
    if (std::find(kept.begin(), kept.end(), aliased) == kept.end()) arguments[static_cast<size_t>(aliased)]->mark_donated();
  }
  std::vector<BufferPtr> results;
  results.reserve(outputs.size());
  for (size_t i = 0; i < outputs.size(); ++i) {
    results.push_back(std::make_shared<Buffer>(outputs[i], output_types_[i].dtype, output_types_[i].dims, device, name_));
  }
  track_execution(device, done, name_);
  exit_gate();  // a thread must not go back to take the GIL while the interpreter is exiting
  return results;
}

std::unique_ptr<Executable> compile(const std::string& stablehlo, std::vector<ArrayType> output_types,
                                    std::vector<int64_t> aliased_inputs) {
  const Plugin& p = plugin();
  PJRT_Program program = mlir_program(stablehlo);
  const std::string& options = compile_options();
  PJRT_Client_Compile_Args args{};
  args.struct_size = PJRT_Client_Compile_Args_STRUCT_SIZE;
  args.client = p.client;
  args.program = &program;
  args.compile_options = options.data();
  args.compile_options_size = options.size();
  check(p.api, p.api->PJRT_Client_Compile(&args), "PJRT_Client_Compile");
  return std::make_unique<Executable>(args.executable, std::move(output_types), std::move(aliased_inputs));
}

const std::string& compile_options() {
  static const std::string options = compile_options_proto(/*portable=*/true);
  return options;
}

std::string Executable::serialize() const {
  const PJRT_Api* api = plugin().api;
  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get.loaded_executable = static_cast<PJRT_LoadedExecutable*>(loaded_executable_);
  check(api, api->PJRT_LoadedExecutable_GetExecutable(&get), "PJRT_LoadedExecutable_GetExecutable");
  PJRT_Executable_Serialize_Args args{};
  args.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
  args.executable = get.executable;
  PJRT_Error* error = api->PJRT_Executable_Serialize(&args);
  std::string bytes;
  if (error == nullptr) {
    bytes.assign(args.serialized_bytes, args.serialized_bytes_size);
    args.serialized_executable_deleter(args.serialized_executable);
  }
  PJRT_Executable_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  destroy.executable = get.executable;
  destroy_error(api, api->PJRT_Executable_Destroy(&destroy));
  check(api, error, "PJRT_Executable_Serialize");
  return bytes;
}

std::unique_ptr<Executable> deserialize(const std::string& bytes, std::vector<ArrayType> output_types,
                                        std::vector<int64_t> aliased_inputs) {
  const Plugin& p = plugin();
  PJRT_Executable_DeserializeAndLoad_Args args{};
  args.struct_size = PJRT_Executable_DeserializeAndLoad_Args_STRUCT_SIZE;
  args.client = p.client;
  args.serialized_executable = bytes.data();
  args.serialized_executable_size = bytes.size();
  check(p.api, p.api->PJRT_Executable_DeserializeAndLoad(&args), "PJRT_Executable_DeserializeAndLoad");
  return std::make_unique<Executable>(args.loaded_executable, std::move(output_types), std::move(aliased_inputs));
}

}  // namespace torchtpu::runtime
