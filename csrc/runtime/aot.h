// Ahead-of-time compilation for a named device topology, without the devices: libtpu's PJRT compiles
// StableHLO for e.g. "v5e:2x2" on a host with no TPU. Used by the torchtpu_aot_compile tool (csrc/aot/),
// which runs it in a child process because the TPU compiler aborts the process on a few inputs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace torchtpu::runtime {

// One named topology option, e.g. {"num_slices", "2"} or {"chips_per_host_bounds", "2,2,1"}. Values that
// parse as an integer become int64, comma-separated integers an int64 array, true/false a bool, anything
// else a string.
using TopologyOption = std::pair<std::string, std::string>;

struct TopologyInfo {
  std::string platform;          // e.g. "tpu"
  std::string platform_version;  // the compiler's own version string
  std::string device_kind;       // e.g. "TPU v5 lite"
  int num_devices = 0;
  int api_major = 0;
  int api_minor = 0;
};

// What the compiler said about one program. Memory figures are bytes of device memory (HBM on a TPU).
struct AotResult {
  bool accepted = false;
  std::string error;  // the compiler's message when rejected
  double compile_seconds = 0;
  std::vector<std::pair<std::string, double>> cost;  // cost analysis: flops, bytes accessed, ... (numeric ones)
  int64_t argument_bytes = 0;
  int64_t output_bytes = 0;
  int64_t alias_bytes = 0;
  int64_t temp_bytes = 0;
  int64_t generated_code_bytes = 0;
  int64_t peak_bytes = 0;
  std::string fingerprint;
};

// Owns a loaded plugin (never unloaded: a plugin cannot be safely dlclosed) and one topology description.
class AotCompiler {
 public:
  // Loads and initialises the plugin at `plugin_path` and describes `topology`. Throws PjrtError with the
  // plugin's message when either fails.
  AotCompiler(const std::string& plugin_path, const std::string& topology,
              const std::vector<TopologyOption>& options = {});
  ~AotCompiler();
  AotCompiler(const AotCompiler&) = delete;
  AotCompiler& operator=(const AotCompiler&) = delete;

  const TopologyInfo& info() const { return info_; }
  // Compiles StableHLO text with serialized CompileOptionsProto bytes. A rejection is a result, not an
  // exception; only a failure of the plugin around the compile (e.g. reading stats) throws.
  AotResult compile(const std::string& stablehlo, const std::string& compile_options) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
  TopologyInfo info_;
};

}  // namespace torchtpu::runtime
