#include "runtime/executable.h"

#include <algorithm>

#include "runtime/compile_options.h"
#include "runtime/error.h"
#include "runtime/mapping_budget.h"
#include "runtime/pjrt_api.h"
#include "runtime/plugin.h"

namespace torchtpu::runtime {
namespace {

// The bytes an array of `dtype` and `dims` takes on a device.
int64_t array_bytes(DType dtype, const std::vector<int64_t>& dims) {
  int64_t bytes = static_cast<int64_t>(element_size(dtype));
  for (int64_t d : dims) bytes *= d;
  return bytes;
}

}  // namespace

template <class Body>
void Executable::with_executable(const char* what, const Body& body) const {
  const PJRT_Api* api = plugin().api;
  PJRT_LoadedExecutable_GetExecutable_Args get{};
  get.struct_size = PJRT_LoadedExecutable_GetExecutable_Args_STRUCT_SIZE;
  get.loaded_executable = static_cast<PJRT_LoadedExecutable*>(loaded_executable_);
  check(api, api->PJRT_LoadedExecutable_GetExecutable(&get), "PJRT_LoadedExecutable_GetExecutable");
  PJRT_Error* error = body(api, get.executable);
  PJRT_Executable_Destroy_Args destroy{};
  destroy.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
  destroy.executable = get.executable;
  destroy_error(api, api->PJRT_Executable_Destroy(&destroy));
  check(api, error, what);
}

Executable::Executable(void* loaded_executable, std::vector<ArrayType> output_types, std::vector<int64_t> aliased_inputs)
    : loaded_executable_(loaded_executable),
      output_types_(std::move(output_types)),
      aliased_inputs_(std::move(aliased_inputs)),
      name_(std::make_shared<const std::string>("a program")) {
  // A partitioned program's result shardings are the partitioner's choice: read them from the optimized
  // module (the C API has no call for them).
  with_executable("PJRT_Executable_OptimizedProgram", [&](const PJRT_Api* api, PJRT_Executable* executable) {
    PJRT_Executable_NumPartitions_Args partitions{};
    partitions.struct_size = PJRT_Executable_NumPartitions_Args_STRUCT_SIZE;
    partitions.executable = executable;
    if (PJRT_Error* error = api->PJRT_Executable_NumPartitions(&partitions)) return error;
    num_partitions_ = static_cast<int>(partitions.num_partitions);
    if (num_partitions_ <= 1) return static_cast<PJRT_Error*>(nullptr);
    PJRT_Program program{};
    program.struct_size = PJRT_Program_STRUCT_SIZE;
    program.format = "hlo";
    program.format_size = 3;
    PJRT_Executable_OptimizedProgram_Args args{};
    args.struct_size = PJRT_Executable_OptimizedProgram_Args_STRUCT_SIZE;
    args.executable = executable;
    args.program = &program;
    if (PJRT_Error* error = api->PJRT_Executable_OptimizedProgram(&args)) return error;  // the size
    std::string module(program.code_size, '\0');

    program.code = module.data();
    if (PJRT_Error* error = api->PJRT_Executable_OptimizedProgram(&args)) return error;
    std::vector<int64_t> ranks;
    for (const ArrayType& type : output_types_) ranks.push_back(static_cast<int64_t>(type.dims.size()));
    const bool with_config = std::string_view(program.format, program.format_size) == "hlo_with_config";
    output_shardings_ = output_shardings_from_hlo_module(module, with_config, ranks, num_partitions_);
    return static_cast<PJRT_Error*>(nullptr);
  });
}

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
  if (num_partitions_ > 1) return execute_partitioned(arguments, kept);
  exit_gate();
  const Plugin& p = plugin();
  std::vector<PJRT_Buffer*> inputs;
  inputs.reserve(arguments.size());
  for (const Buffer* argument : arguments) {
    if (argument->sharding() != nullptr) {
      throw PjrtError(3, "a sharded tensor reached a program compiled for one device");
    }
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
  for (const ArrayType& type : output_types_) requested += array_bytes(type.dtype, type.dims);
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

std::vector<BufferPtr> Executable::execute_partitioned(const std::vector<const Buffer*>& arguments,
                                                       const std::vector<int64_t>& kept) const {
  exit_gate();
  const Plugin& p = plugin();
  const auto n = static_cast<size_t>(num_partitions_);
  if (p.devices.size() < n) {
    throw PjrtError(3, "the program is partitioned over " + std::to_string(n) + " devices but the client has " +
                           std::to_string(p.devices.size()));
  }
  std::vector<BufferPtr> copies;  // unsharded arguments' copies on the other devices, alive through the call
  std::vector<std::vector<PJRT_Buffer*>> inputs(n);
  for (const Buffer* argument : arguments) {
    if (const Sharding* sharding = argument->sharding()) {
      if (static_cast<size_t>(sharding->num_devices()) != n) {
        throw PjrtError(3, "a tensor sharded over " + std::to_string(sharding->num_devices()) +
                               " devices reached a program partitioned over " + std::to_string(n));
      }
      for (size_t d = 0; d < n; ++d) inputs[d].push_back(static_cast<PJRT_Buffer*>(argument->shards()[d]->pjrt()));
      continue;
    }
    for (size_t d = 0; d < n; ++d) {
      if (static_cast<int>(d) == argument->device()) {
        inputs[d].push_back(static_cast<PJRT_Buffer*>(argument->pjrt()));
      } else {
        copies.push_back(copy_to_device(*argument, static_cast<int>(d)));
        inputs[d].push_back(static_cast<PJRT_Buffer*>(copies.back()->pjrt()));
      }
    }
  }
  // A replicated argument's copies are not the caller's to donate.
  std::vector<int64_t> not_donated = kept;
  for (size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i]->sharding() == nullptr) not_donated.push_back(static_cast<int64_t>(i));
  }
  std::vector<std::vector<PJRT_Buffer*>> outputs(n, std::vector<PJRT_Buffer*>(output_types_.size(), nullptr));
  std::vector<PJRT_Buffer* const*> argument_lists;
  std::vector<PJRT_Buffer**> output_lists;
  for (size_t d = 0; d < n; ++d) {
    argument_lists.push_back(inputs[d].data());
    output_lists.push_back(outputs[d].data());
  }
  std::vector<PJRT_Event*> done(n, nullptr);
  PJRT_ExecuteOptions options{};
  options.struct_size = PJRT_ExecuteOptions_STRUCT_SIZE;
  options.non_donatable_input_indices = not_donated.data();
  options.num_non_donatable_input_indices = not_donated.size();
  // The CPU plugin names an execution's collectives by its launch id: executions queued one after another
  // must not share one, or their rendezvous mix and never complete.
  static std::atomic<int> next_launch{1};
  options.launch_id = next_launch.fetch_add(1, std::memory_order_relaxed);
  PJRT_LoadedExecutable_Execute_Args args{};
  args.struct_size = PJRT_LoadedExecutable_Execute_Args_STRUCT_SIZE;
  args.executable = static_cast<PJRT_LoadedExecutable*>(loaded_executable_);
  args.options = &options;
  args.argument_lists = argument_lists.data();
  args.num_devices = n;
  args.num_args = arguments.size();
  args.output_lists = output_lists.data();
  args.device_complete_events = done.data();
  // What the outputs add to each device's live bytes: its pieces.
  std::vector<std::vector<int64_t>> piece_dims;
  int64_t requested = 0;
  for (size_t i = 0; i < output_types_.size(); ++i) {
    piece_dims.push_back(output_shardings_[i]->shard_dims(output_types_[i].dims));
    requested += array_bytes(output_types_[i].dtype, piece_dims.back());
  }
  for (size_t d = 0; d < n; ++d) check_memory_limit(static_cast<int>(d), requested);
  check_allocation(p.api, p.api->PJRT_LoadedExecutable_Execute(&args), "PJRT_LoadedExecutable_Execute", 0, requested);
  for (int64_t aliased : aliased_inputs_) {
    if (std::find(not_donated.begin(), not_donated.end(), aliased) == not_donated.end()) {
      arguments[static_cast<size_t>(aliased)]->mark_donated();
    }
  }
  std::vector<BufferPtr> results;
  for (size_t i = 0; i < output_types_.size(); ++i) {
    std::vector<BufferPtr> pieces;
    for (size_t d = 0; d < n; ++d) {
      pieces.push_back(std::make_shared<Buffer>(outputs[d][i], output_types_[i].dtype, piece_dims[i],
                                                static_cast<int>(d), name_));
    }
    results.push_back(std::make_shared<Buffer>(std::move(pieces), output_types_[i].dtype, output_types_[i].dims,
                                               output_shardings_[i]));
  }
  for (size_t d = 0; d < n; ++d) track_execution(static_cast<int>(d), done[d], name_);
  // The result shardings were read from the optimized module; the first run checks them against the pieces
  // the devices really hold, so a misread is an error here and never a wrong-sized read later.
  if (!pieces_checked_.exchange(true)) {
    for (size_t i = 0; i < output_types_.size(); ++i) {
      for (size_t d = 0; d < n; ++d) {
        PJRT_Buffer_Dimensions_Args dims{};
        dims.struct_size = PJRT_Buffer_Dimensions_Args_STRUCT_SIZE;
        dims.buffer = outputs[d][i];
        check(p.api, p.api->PJRT_Buffer_Dimensions(&dims), "PJRT_Buffer_Dimensions");
        if (std::vector<int64_t>(dims.dims, dims.dims + dims.num_dims) != piece_dims[i]) {
          throw PjrtError(13, "the partitioned program " + *name_ + " gave result " + std::to_string(i) +
                                  " pieces of another shape than its sharding " + output_shardings_[i]->mhlo() +
                                  " says");  // `results` frees them
        }
      }
    }
  }
  exit_gate();
  return results;
}

std::unique_ptr<Executable> compile(const std::string& stablehlo, std::vector<ArrayType> output_types,
                                    std::vector<int64_t> aliased_inputs, const Partitioning& partitioning) {
  make_room_for_a_program();
  const Plugin& p = plugin();
  PJRT_Program program = mlir_program(stablehlo);
  const std::string options = compile_options(partitioning);
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

std::string compile_options(const Partitioning& partitioning) {
  if (partitioning.num_partitions <= 1) return compile_options();
  return compile_options_proto(/*portable=*/false, 1, partitioning.num_partitions, partitioning.free_result_shardings);
}

std::string Executable::serialize() const {
  std::string bytes;
  with_executable("PJRT_Executable_Serialize", [&](const PJRT_Api* api, PJRT_Executable* executable) {
    PJRT_Executable_Serialize_Args args{};
    args.struct_size = PJRT_Executable_Serialize_Args_STRUCT_SIZE;
    args.executable = executable;
    PJRT_Error* error = api->PJRT_Executable_Serialize(&args);
    if (error == nullptr) {
      bytes.assign(args.serialized_bytes, args.serialized_bytes_size);
      args.serialized_executable_deleter(args.serialized_executable);
    }
    return error;
  });
  return bytes;
}

std::unique_ptr<Executable> deserialize(const std::string& bytes, std::vector<ArrayType> output_types,
                                        std::vector<int64_t> aliased_inputs) {
  make_room_for_a_program();
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
