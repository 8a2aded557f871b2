#include "eager/driver.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace torchtpu::eager {

Mode parse_mode(const std::string& name) {
  if (name == "debug") return Mode::kDebug;
  if (name == "strict") return Mode::kStrict;
  if (name == "fused") return Mode::kFused;
  throw std::invalid_argument("unknown eager mode '" + name + "': expected 'debug', 'strict' or 'fused'");
}

const char* mode_name(Mode mode) {
  switch (mode) {
    case Mode::kDebug: return "debug";
    case Mode::kFused: return "fused";
    case Mode::kStrict: break;
  }
  return "strict";
}

namespace {
std::atomic<Mode>& current_mode() {
  static std::atomic<Mode> chosen = [] {
    // TORCHTPU_LAUNCH_BLOCKING=1 is CUDA_LAUNCH_BLOCKING's name for debug mode. It wins over
    // TORCHTPU_EAGER_MODE: it is what a value-check error tells the user to set to find the failing op, and an
    // environment that picks fused mode for speed must not silently ignore it.
    for (const char* name : {"TORCHTPU_SYNC", "TORCHTPU_LAUNCH_BLOCKING"}) {
      const char* value = std::getenv(name);
      if (value != nullptr && std::strcmp(value, "1") == 0) return Mode::kDebug;
    }
    if (const char* env = std::getenv("TORCHTPU_EAGER_MODE"); env != nullptr && *env != '\0') return parse_mode(env);
    return Mode::kStrict;
  }();
  return chosen;
}

// The calling thread's own mode, when set (set_thread_mode); unset: the process's.
thread_local std::optional<Mode> thread_mode;

}  // namespace

Mode mode() { return thread_mode ? *thread_mode : current_mode().load(std::memory_order_relaxed); }
void set_mode(Mode mode) { current_mode().store(mode); }
void set_thread_mode(std::optional<Mode> mode) { thread_mode = mode; }
std::optional<Mode> thread_mode_set() { return thread_mode; }

std::vector<runtime::BufferPtr> execute(const runtime::Executable& executable, int device,
                                        const std::vector<const runtime::Buffer*>& arguments,
                                        const std::vector<int64_t>& kept) {
  std::vector<runtime::BufferPtr> outputs = executable.execute(device, arguments, kept);
  if (mode() == Mode::kDebug) runtime::synchronize(device);
  return outputs;
}

}  // namespace torchtpu::eager
