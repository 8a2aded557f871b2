// Plugin discovery and the process-wide PJRT client.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace torchtpu::runtime {

// Candidate plugin paths, tried in order when TORCHTPU_PJRT_PLUGIN is unset. The Python package fills
// this from what is installed (libtpu when a TPU is present, then the xla-cpu-pjrt wheel).
void set_plugin_candidates(std::vector<std::string> paths);

struct PluginInfo {
  std::string path;
  std::string platform;  // e.g. "cpu", "tpu", "cuda"
  int api_major = 0;
  int api_minor = 0;
  // From the plugin's attributes (empty when it does not say): the StableHLO versions its parser accepts,
  // newest and oldest ("1.13.0"), and the XLA version it was built from.
  std::string stablehlo_current;
  std::string stablehlo_minimum;
  std::string xla_version;
};

// Loads the plugin if needed. Throws PjrtError with an actionable message when no plugin can be loaded.
const PluginInfo& plugin_info();
// True once a plugin has been loaded successfully; never throws and never loads.
bool plugin_loaded();
int device_count();
// What the plugin calls device `index` ("TPU v5 lite", "cpu", ...).
std::string device_kind(int index);
// (free, total) bytes of device `index`: the host's memory on the CPU plugin (its devices allocate there),
// else the plugin's memory statistics. Throws PjrtError (unimplemented) when the plugin reports no limit.
std::pair<int64_t, int64_t> device_memory_info(int index);

// True when a plugin can be found (TORCHTPU_PJRT_PLUGIN or a candidate names an existing file) or is
// loaded. Never loads it and never creates the client, so asking costs nothing and keeps fork() safe.
bool plugin_available();

// True in a child forked after the parent had loaded the plugin. The child cannot use the parent's client
// (its threads did not survive the fork): every device call there throws BadFork (runtime/error.h) saying
// to use the 'spawn' start method, and buffers inherited from the parent are left alone.
bool in_bad_fork();

// Called once when the interpreter starts to exit (Python's atexit, before daemon threads are stopped):
// waits for the work queued on every device, then parks every other thread that reaches a device call or
// returns from a blocking one, so none is inside the plugin, or unwinding through torch, while the
// process tears down. The exiting thread itself keeps working (tensors freed during finalization).
void prepare_exit();

// Marks the calling thread as inside a device op (the aten kernel wrapper holds one per op; nesting is
// fine). prepare_exit waits until no thread is inside an op, so none is stopped by Python in the middle of
// one (in a Python meta kernel, a warning, a decref), where the stop would unwind through torch's noexcept
// frames and abort the process. Entering or leaving the outermost scope after prepare_exit parks the thread.
class OpScope {
 public:
  OpScope();
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;
};

}  // namespace torchtpu::runtime
