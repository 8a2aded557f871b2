#include "runtime/plugin.h"

#include <dlfcn.h>
#include <pthread.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <mutex>
#include <string>

#include "runtime/error.h"
#include "runtime/pjrt_api.h"

namespace torchtpu::runtime {
namespace {

constexpr const char* kInstallHint =
    "Install a PJRT plugin: `pip install xla-cpu-pjrt==0.0.1` (CPU), libtpu on a Cloud TPU VM, "
    "or point TORCHTPU_PJRT_PLUGIN at a plugin .so file.";

std::mutex& state_mutex() {
  static std::mutex m;
  return m;
}
std::vector<std::string>& candidates() {
  static std::vector<std::string> paths;
  return paths;
}
// Set once under state_mutex(); never freed (the plugin lives as long as the process).
Plugin* g_plugin = nullptr;
PluginInfo* g_info = nullptr;
// Set in a child forked after the plugin was loaded (see in_bad_fork). Written only by the fork handler.
bool g_bad_fork = false;
// Set when loading failed, so is_available() stops answering yes for a file that is no plugin.
bool g_load_failed = false;

constexpr const char* kBadForkMessage =
    "Cannot re-initialize the tpu device in a forked subprocess: the parent process had already initialised "
    "it, and the PJRT client and its threads do not survive fork(). To use tpu with multiprocessing, use the "
    "'spawn' (or 'forkserver') start method, e.g. torch.multiprocessing.set_start_method('spawn'), or "
    "DataLoader(..., multiprocessing_context='spawn'). Workers that touch only CPU data may still fork.";

// The child gets a copy of the parent's pointers but not the plugin's threads: any call into the client
// would wait forever for them. Mark the child so that the first device use raises instead.
void on_fork_child() { __atomic_store_n(&g_bad_fork, true, __ATOMIC_RELAXED); }

int requested_cpu_device_count() {
  const char* env = std::getenv("TORCHTPU_NUM_DEVICES");
  if (env == nullptr || *env == '\0') return 1;
  char* end = nullptr;
  long n = std::strtol(env, &end, 10);
  if (*end != '\0' || n < 1 || n > 4096) {
    throw PjrtError(3, std::string("TORCHTPU_NUM_DEVICES must be a positive integer, got '") + env + "'");
  }
  return static_cast<int>(n);
}

const PJRT_Api* open_api(const std::string& path) {
  // RTLD_LOCAL keeps the plugin's own copies of LLVM/protobuf symbols away from torch's.
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw PjrtError(5, "Could not load the PJRT plugin '" + path + "': " + (why ? why : "unknown error") +
                           ". " + kInstallHint);
  }
  using GetPjrtApiFn = const PJRT_Api* (*)();
  auto get_api = reinterpret_cast<GetPjrtApiFn>(dlsym(handle, "GetPjrtApi"));
  if (get_api == nullptr) {
    throw PjrtError(5, "'" + path + "' is not a PJRT plugin (it has no GetPjrtApi symbol). " + kInstallHint);
  }
  const PJRT_Api* api = get_api();
  if (api == nullptr) throw PjrtError(13, "GetPjrtApi in '" + path + "' returned null");
  return api;
}

void check_version(const PJRT_Api* api, const std::string& path) {
  const int major = api->pjrt_api_version.major_version;
  const int minor = api->pjrt_api_version.minor_version;
  // We call functions up to PJRT_Client_TopologyDescription's neighbours; the table must reach them and
  // the major version must match ours (minor versions only add fields).
  if (major != PJRT_API_MAJOR || api->struct_size < PJRT_Api_STRUCT_SIZE || minor < 40) {
    throw PjrtError(9, "The PJRT plugin '" + path + "' speaks PJRT C API " + std::to_string(major) + "." +
                           std::to_string(minor) + " but torchtpu needs " + std::to_string(PJRT_API_MAJOR) +
                           ".40 or newer (built against " + std::to_string(PJRT_API_MAJOR) + "." +
                           std::to_string(PJRT_API_MINOR) + "). " + kInstallHint);
  }
}

PJRT_Client* create_client(const PJRT_Api* api, const std::string& platform_hint) {
  PJRT_Plugin_Initialize_Args init{};
  init.struct_size = PJRT_Plugin_Initialize_Args_STRUCT_SIZE;
  check(api, api->PJRT_Plugin_Initialize(&init), "PJRT_Plugin_Initialize");

  std::vector<PJRT_NamedValue> options;
  static const char kCpuDeviceCount[] = "cpu_device_count";
  PJRT_NamedValue device_count{};
  if (platform_hint == "cpu") {
    device_count.struct_size = PJRT_NamedValue_STRUCT_SIZE;
    device_count.name = kCpuDeviceCount;
    device_count.name_size = sizeof(kCpuDeviceCount) - 1;
    device_count.type = PJRT_NamedValue_kInt64;
    device_count.int64_value = requested_cpu_device_count();
    device_count.value_size = 1;
    options.push_back(device_count);
  }
  PJRT_Client_Create_Args args{};
  args.struct_size = PJRT_Client_Create_Args_STRUCT_SIZE;
  args.create_options = options.data();
  args.num_options = options.size();
  check(api, api->PJRT_Client_Create(&args), "PJRT_Client_Create");
  return args.client;
}

std::string platform_name(const PJRT_Api* api, PJRT_Client* client) {
  PJRT_Client_PlatformName_Args args{};
  args.struct_size = PJRT_Client_PlatformName_Args_STRUCT_SIZE;
  args.client = client;
  check(api, api->PJRT_Client_PlatformName(&args), "PJRT_Client_PlatformName");
  return std::string(args.platform_name, args.platform_name_size);
}

// The named string and integer attributes the plugin reports (PJRT_Plugin_Attributes).
std::map<std::string, std::string> plugin_attributes(const PJRT_Api* api) {
  PJRT_Plugin_Attributes_Args args{};
  args.struct_size = PJRT_Plugin_Attributes_Args_STRUCT_SIZE;
  check(api, api->PJRT_Plugin_Attributes(&args), "PJRT_Plugin_Attributes");
  std::map<std::string, std::string> attributes;
  for (size_t i = 0; i < args.num_attributes; ++i) {
    const PJRT_NamedValue& v = args.attributes[i];
    std::string value;
    if (v.type == PJRT_NamedValue_kString) {
      value.assign(v.string_value, v.value_size);
    } else if (v.type == PJRT_NamedValue_kInt64) {
      value = std::to_string(v.int64_value);
    } else if (v.type == PJRT_NamedValue_kInt64List) {
      for (size_t k = 0; k < v.value_size; ++k) value += (k ? "." : "") + std::to_string(v.int64_array_value[k]);
    }
    attributes[std::string(v.name, v.name_size)] = value;
  }
  return attributes;
}

std::vector<PJRT_Device*> addressable_devices(const PJRT_Api* api, PJRT_Client* client) {
  PJRT_Client_AddressableDevices_Args args{};
  args.struct_size = PJRT_Client_AddressableDevices_Args_STRUCT_SIZE;
  args.client = client;
  check(api, api->PJRT_Client_AddressableDevices(&args), "PJRT_Client_AddressableDevices");
  return {args.addressable_devices, args.addressable_devices + args.num_addressable_devices};
}

std::string resolve_plugin_path() {
  const char* env = std::getenv("TORCHTPU_PJRT_PLUGIN");
  if (env != nullptr && *env != '\0') return env;
  if (candidates().empty()) {
    throw PjrtError(5, std::string("No PJRT plugin found. ") + kInstallHint);
  }
  return candidates().front();
}

// The CPU plugin leaves XNNPACK-style (YNN) fusion of reductions off unless told; without it every reduce
// becomes a reduce-window tree whose last stage runs on one thread, and softmax runs ~20% slower than under
// JAX, which turns it on (docs/performance.md). With several devices it stays off: the plugin builds a YNN
// fusion's executable lazily into state shared by the devices, and a partitioned program running on them at
// once races there (a double free under ASan; docs/distributed.md). XLA_FLAGS is read when the client is
// created; a user's own setting of the flag wins.
void choose_cpu_reduce_fusion(int devices) {
  static const char kFlag[] = "--xla_cpu_experimental_ynn_fusion_type";
  const char* current = std::getenv("XLA_FLAGS");
  std::string flags = current != nullptr ? current : "";
  if (flags.find(kFlag) != std::string::npos) return;
  flags += std::string(flags.empty() ? "" : " ") + kFlag + (devices == 1 ? "=reduce" : "=");
  setenv("XLA_FLAGS", flags.c_str(), 1);
}

void load_locked() {
  const std::string path = resolve_plugin_path();
  // The CPU plugin is the only one that takes a device count; recognise it by file name before the
  // client exists, since the count must be given at creation.
  const bool looks_cpu = path.find("cpu") != std::string::npos;
  if (looks_cpu) choose_cpu_reduce_fusion(requested_cpu_device_count());
  const PJRT_Api* api = open_api(path);
  check_version(api, path);
  PJRT_Client* client = create_client(api, looks_cpu ? "cpu" : "");
  auto* loaded = new Plugin{api, client, addressable_devices(api, client)};
  if (loaded->devices.empty()) throw PjrtError(5, "The PJRT plugin '" + path + "' reports no devices");
  g_info = new PluginInfo{};
  g_info->path = path;
  g_info->platform = platform_name(api, client);
  g_info->api_major = api->pjrt_api_version.major_version;
  g_info->api_minor = api->pjrt_api_version.minor_version;
  std::map<std::string, std::string> attributes = plugin_attributes(api);
  g_info->stablehlo_current = attributes["stablehlo_current_version"];
  g_info->stablehlo_minimum = attributes["stablehlo_minimum_version"];
  g_info->xla_version = attributes["xla_version"];
  __atomic_store_n(&g_plugin, loaded, __ATOMIC_RELEASE);
  static const bool fork_handler = pthread_atfork(nullptr, nullptr, &on_fork_child) == 0;
  (void)fork_handler;
}

[[noreturn]] void throw_bad_fork() { throw BadFork(kBadForkMessage); }

}  // namespace

void check(const PJRT_Api* api, PJRT_Error* error, const char* what) {
  if (error == nullptr) return;
  PJRT_Error_Message_Args message{};
  message.struct_size = PJRT_Error_Message_Args_STRUCT_SIZE;
  message.error = error;
  api->PJRT_Error_Message(&message);
  std::string text(message.message, message.message_size);
  PJRT_Error_GetCode_Args code{};
  code.struct_size = PJRT_Error_GetCode_Args_STRUCT_SIZE;
  code.error = error;
  api->PJRT_Error_GetCode(&code);
  destroy_error(api, error);
  const int status = static_cast<int>(code.code);
  throw PjrtError(status, std::string(what) + " failed (" + status_code_name(status) + "): " + text);
}

void destroy_error(const PJRT_Api* api, PJRT_Error* error) {
  if (error == nullptr) return;
  PJRT_Error_Destroy_Args args{};
  args.struct_size = PJRT_Error_Destroy_Args_STRUCT_SIZE;
  args.error = error;
  api->PJRT_Error_Destroy(&args);
}

void destroy_event(const PJRT_Api* api, PJRT_Event* event) {
  PJRT_Event_Destroy_Args args{};
  args.struct_size = PJRT_Event_Destroy_Args_STRUCT_SIZE;
  args.event = event;
  api->PJRT_Event_Destroy(&args);
}

void await_event(const PJRT_Api* api, PJRT_Event* event, const char* what) {
  PJRT_Event_Await_Args args{};
  args.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
  args.event = event;
  PJRT_Error* error = api->PJRT_Event_Await(&args);
  destroy_event(api, event);
  check(api, error, what);
}

const Plugin& plugin() {
  // Fast path without the lock: g_plugin is written once, before any reader can see it non-null.
  Plugin* loaded = __atomic_load_n(&g_plugin, __ATOMIC_ACQUIRE);
  // Checked before the lock: another thread of the parent may have held it at fork time.
  if (__atomic_load_n(&g_bad_fork, __ATOMIC_RELAXED)) throw_bad_fork();
  if (loaded != nullptr) return *loaded;
  std::lock_guard<std::mutex> lock(state_mutex());
  if (g_plugin == nullptr) {
    try {
      load_locked();  // a failure leaves g_plugin null so a later call retries
    } catch (...) {
      g_load_failed = true;
      throw;
    }
  }
  return *g_plugin;
}

void set_plugin_candidates(std::vector<std::string> paths) {
  std::lock_guard<std::mutex> lock(state_mutex());
  candidates() = std::move(paths);
}

const PluginInfo& plugin_info() {
  plugin();
  return *g_info;
}

bool plugin_loaded() {
  return __atomic_load_n(&g_plugin, __ATOMIC_ACQUIRE) != nullptr && !__atomic_load_n(&g_bad_fork, __ATOMIC_RELAXED);
}

bool in_bad_fork() { return __atomic_load_n(&g_bad_fork, __ATOMIC_RELAXED); }

bool plugin_available() {
  // Like CUDA's, the answer in a bad fork is still yes: the device exists, this process just cannot use it.
  if (__atomic_load_n(&g_plugin, __ATOMIC_ACQUIRE) != nullptr) return true;
  std::lock_guard<std::mutex> lock(state_mutex());
  if (g_load_failed) return false;
  const char* env = std::getenv("TORCHTPU_PJRT_PLUGIN");
  const std::string path = env != nullptr && *env != '\0' ? env : (candidates().empty() ? "" : candidates().front());
  return !path.empty() && access(path.c_str(), R_OK) == 0;
}

int device_count() { return static_cast<int>(plugin().devices.size()); }

std::string device_kind(int index) {
  const Plugin& p = plugin();
  PJRT_Device_GetDescription_Args description{};
  description.struct_size = PJRT_Device_GetDescription_Args_STRUCT_SIZE;
  description.device = p.devices.at(static_cast<size_t>(index));
  check(p.api, p.api->PJRT_Device_GetDescription(&description), "PJRT_Device_GetDescription");
  PJRT_DeviceDescription_Kind_Args kind{};
  kind.struct_size = PJRT_DeviceDescription_Kind_Args_STRUCT_SIZE;
  kind.device_description = description.device_description;
  check(p.api, p.api->PJRT_DeviceDescription_Kind(&kind), "PJRT_DeviceDescription_Kind");
  return {kind.device_kind, kind.device_kind_size};
}

std::pair<int64_t, int64_t> device_memory_info(int index) {
  const Plugin& p = plugin();
  const std::string& platform = plugin_info().platform;
  if (platform == "cpu") {
    // MemAvailable and MemTotal, in kB.
    std::ifstream meminfo("/proc/meminfo");
    int64_t available = -1, total = -1;
    for (std::string key; meminfo >> key;) {
      int64_t kb = 0;
      meminfo >> kb;
      if (key == "MemAvailable:") available = kb * 1024;
      if (key == "MemTotal:") total = kb * 1024;
      meminfo.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
    }
    if (available >= 0 && total >= 0) return {available, total};
  } else {
    PJRT_Device_MemoryStats_Args stats{};
    stats.struct_size = PJRT_Device_MemoryStats_Args_STRUCT_SIZE;
    stats.device = p.devices.at(static_cast<size_t>(index));
    check(p.api, p.api->PJRT_Device_MemoryStats(&stats), "PJRT_Device_MemoryStats");
    if (stats.bytes_limit_is_set) return {stats.bytes_limit - stats.bytes_in_use, stats.bytes_limit};
  }
  throw PjrtError(12, "the " + platform + " plugin does not report how much memory device " +
                          std::to_string(index) + " has");
}

}  // namespace torchtpu::runtime
