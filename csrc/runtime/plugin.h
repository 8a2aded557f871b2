// Plugin discovery and the process-wide PJRT client.
#pragma once

#include <string>
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
};

// Loads the plugin if needed. Throws PjrtError with an actionable message when no plugin can be loaded.
const PluginInfo& plugin_info();
// True once a plugin has been loaded successfully; never throws and never loads.
bool plugin_loaded();
int device_count();

}  // namespace torchtpu::runtime
