#include "runtime/aot.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>

#include "runtime/error.h"
#include "runtime/pjrt_api.h"

namespace torchtpu::runtime {
namespace {

// The plugin's message for a rejected call; frees the error.
std::string take_message(const PJRT_Api* api, PJRT_Error* error) {
  PJRT_Error_Message_Args message{};
  message.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  message.error = error;
  api->PJRT_Error_Message(&message);
  std::string text(message.message, message.message_size);
  destroy_error(api, error);
  return text;
}

const PJRT_Api* load_api(const std::string& path) {
  // RTLD_LOCAL: libtpu carries its own LLVM and protobuf; keep them away from anything else loaded.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw PjrtError(5, "Could not load '" + path + "': " + (why ? why : "unknown error"));
  }
  using GetPjrtApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) throw PjrtError(5, "'" + path + "' is not a PJRT plugin (no GetPjrtApi)");
  const PJRT_Api* api = get_api();
  if (api == nullptr) throw PjrtError(13, "GetPjrtApi in '" + path + "' returned null");
  // Newer plugins only append to the table and to argument structs (each call carries our struct_size), so
  // a table at least as long as our header's is enough; the major version must match.
  if (api->pjrt_api_version.major_version != PJRT_API_MAJOR || api->struct_size < PJRT_Api_STRUCT_SIZE) {
    throw PjrtError(9, "'" + path + "' speaks PJRT C API " + std::to_string(api->pjrt_api_version.major_version) +
                           "." + std::to_string(api->pjrt_api_version.minor_version) + "; torchtpu was built against " +
                           std::to_string(PJRT_API_MAJOR) + "." + std::to_string(PJRT_API_MINOR));
  }
  return api;
}

// Parses one option value as described in aot.h. `arrays` keeps array values alive; strings point into `option`.
PJRT_NamedValue named_value(const TopologyOption& option, std::vector<std::vector<int64_t>>& arrays) {
  PJRT_NamedValue v{};
  v.struct_size = PJRT_NamedValue_STRUCT_SIZE;
  v.name = option.first.c_str();
  v.name_size = option.first.size();
  const std::string& text = option.second;
  if (text == "true" || text == "false") {
    v.type = PJRT_NamedValue_kBool;
    v.bool_value = text == "true";
    v.value_size = 1;
    return v;
  }
  std::vector<int64_t> numbers;
  size_t start = 0;
  bool numeric = !text.empty();
  while (numeric && start <= text.size()) {
    size_t comma = text.find(',', start);
    if (comma == std::string::npos) comma = text.size();
    const std::string part = text.substr(start, comma - start);
    char* end = nullptr;
    const long long n = std::strtoll(part.c_str(), &end, 10);
    numeric = !part.empty() && *end == '\0';
    numbers.push_back(n);
    start = comma + 1;
  }
  if (numeric && text.find(',') == std::string::npos) {
    v.type = PJRT_NamedValue_kInt64;
    v.int64_value = numbers[0];
    v.value_size = 1;
  } else if (numeric) {
    arrays.push_back(std::move(numbers));
    v.type = PJRT_NamedValue_kInt64List;
    v.int64_array_value = arrays.back().data();
    v.value_size = arrays.back().size();
  } else {
    v.type = PJRT_NamedValue_kString;
    v.string_value = text.c_str();
    v.value_size = text.size();
  }
  return v;
}

// Owns one PJRT_Executable from PJRT_Compile.
struct ExecutableDeleter {
  const PJRT_Api* api;
  void operator()(PJRT_Executable* executable) const {
    PJRT_Executable_Destroy_Args args{};
    args.struct_size = PJRT_Executable_Destroy_Args_STRUCT_SIZE;
    args.executable = executable;
    destroy_error(api, api->PJRT_Executable_Destroy(&args));
  }
};
using ExecutablePtr = std::unique_ptr<PJRT_Executable, ExecutableDeleter>;

void read_stats(const PJRT_Api* api, PJRT_Executable* executable, AotResult& result) {
  PJRT_Executable_GetCostAnalysis_Args cost{};
  cost.struct_size = PJRT_Executable_GetCostAnalysis_Args_STRUCT_SIZE;
  cost.executable = executable;
  check(api, api->PJRT_Executable_GetCostAnalysis(&cost), "PJRT_Executable_GetCostAnalysis");
  for (size_t i = 0; i < cost.num_properties; ++i) {
    const PJRT_NamedValue& p = cost.properties[i];
    double value;
    if (p.type == PJRT_NamedValue_kFloat) {
      value = p.float_value;
    } else if (p.type == PJRT_NamedValue_kInt64) {
      value = static_cast<double>(p.int64_value);
    } else {
      continue;
    }
    result.cost.emplace_back(std::string(p.name, p.name_size), value);
  }

  PJRT_Executable_GetCompiledMemoryStats_Args memory{};
  memory.struct_size = PJRT_Executable_GetCompiledMemoryStats_Args_STRUCT_SIZE;
  memory.executable = executable;
  check(api, api->PJRT_Executable_GetCompiledMemoryStats(&memory), "PJRT_Executable_GetCompiledMemoryStats");
  result.argument_bytes = memory.argument_size_in_bytes;
  result.output_bytes = memory.output_size_in_bytes;
  result.alias_bytes = memory.alias_size_in_bytes;
  result.temp_bytes = memory.temp_size_in_bytes;
  result.generated_code_bytes = memory.generated_code_size_in_bytes;
  result.peak_bytes = memory.peak_memory_in_bytes;

  PJRT_Executable_Fingerprint_Args fingerprint{};
  fingerprint.struct_size = PJRT_Executable_Fingerprint_Args_STRUCT_SIZE;
  fingerprint.executable = executable;
  // Optional in the API: a plugin without fingerprints still compiled the program.
  if (PJRT_Error* error = api->PJRT_Executable_Fingerprint(&fingerprint)) {
    destroy_error(api, error);
  } else {
    result.fingerprint.assign(fingerprint.executable_fingerprint, fingerprint.executable_fingerprint_size);
  }
}

}  // namespace

struct AotCompiler::State {
  const PJRT_Api* api = nullptr;
  PJRT_TopologyDescription* topology = nullptr;
};

AotCompiler::AotCompiler(const std::string& plugin_path, const std::string& topology,
                         const std::vector<TopologyOption>& options)
    : state_(std::make_unique<State>()) {
  const PJRT_Api* api = load_api(plugin_path);
  state_->api = api;
  info_.api_major = api->pjrt_api_version.major_version;
  info_.api_minor = api->pjrt_api_version.minor_version;

  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  check(api, api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");

  std::vector<std::vector<int64_t>> arrays;
  arrays.reserve(options.size());  // named values point into it
  std::vector<PJRT_NamedValue> values;
  for (const TopologyOption& option : options) values.push_back(named_value(option, arrays));
  PJRT_TopologyDescription_Create_Args create{};
  create.struct_size = PJRT_TopologyDescription_Create_Args_STRUCT_SIZE;
  create.topology_name = topology.data();
  create.topology_name_size = topology.size();
  create.create_options = values.data();
  create.num_options = values.size();
  check(api, api->PJRT_TopologyDescription_Create(&create), "PJRT_TopologyDescription_Create");
  state_->topology = create.topology;

  PJRT_TopologyDescription_PlatformName_Args name{};
  name.struct_size = PJRT_TopologyDescription_PlatformName_Args_STRUCT_SIZE;
  name.topology = state_->topology;
  check(api, api->PJRT_TopologyDescription_PlatformName(&name), "PJRT_TopologyDescription_PlatformName");
  info_.platform.assign(name.platform_name, name.platform_name_size);

  PJRT_TopologyDescription_PlatformVersion_Args version{};
  version.struct_size = PJRT_TopologyDescription_PlatformVersion_Args_STRUCT_SIZE;
  version.topology = state_->topology;
  check(api, api->PJRT_TopologyDescription_PlatformVersion(&version), "PJRT_TopologyDescription_PlatformVersion");
  info_.platform_version.assign(version.platform_version, version.platform_version_size);

  PJRT_TopologyDescription_GetDeviceDescriptions_Args devices{};
  devices.struct_size = PJRT_TopologyDescription_GetDeviceDescriptions_Args_STRUCT_SIZE;
  devices.topology = state_->topology;
  check(api, api->PJRT_TopologyDescription_GetDeviceDescriptions(&devices),
        "PJRT_TopologyDescription_GetDeviceDescriptions");
  info_.num_devices = static_cast<int>(devices.num_descriptions);
  if (devices.num_descriptions > 0) {
    PJRT_DeviceDescription_Kind_Args kind{};
    kind.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
    kind.device_description = devices.descriptions[0];
    check(api, api->PJRT_DeviceDescription_Kind(&kind), "PJRT_DeviceDescription_Kind");
    info_.device_kind.assign(kind.device_kind, kind.device_kind_size);
  }
}

AotCompiler::~AotCompiler() {
  if (state_->topology == nullptr) return;
  PJRT_TopologyDescription_Destroy_Args args{};
  args.struct_size = PJRT_TopologyDescription_Destroy_Args_STRUCT_SIZE;
  args.topology = state_->topology;
  destroy_error(state_->api, state_->api->PJRT_TopologyDescription_Destroy(&args));
}

AotResult AotCompiler::compile(const std::string& stablehlo, const std::string& compile_options) const {
  const PJRT_Api* api = state_->api;
  PJRT_Program program = mlir_program(stablehlo);
  PJRT_Compile_Args args{};
  args.struct_size = PJRT_Compile_Args_STRUCT_SIZE;
  args.topology = state_->topology;
  args.program = &program;
  args.compile_options = compile_options.data();
  args.compile_options_size = compile_options.size();
  args.client = nullptr;  // no devices: the topology alone describes the target

  AotResult result;
  const auto start = std::chrono::steady_clock::now();
  PJRT_Error* error = api->PJRT_Compile(&args);
  result.compile_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (error != nullptr) {
    result.error = take_message(api, error);
    return result;
  }
  ExecutablePtr executable(args.executable, ExecutableDeleter{api});
  result.accepted = true;
  read_stats(api, executable.get(), result);
  return result;
}

}  // namespace torchtpu::runtime
