// Ops without a lowering run on the CPU: arguments are copied to the host, the CPU kernel runs, results
// and mutated arguments are copied back. Each op warns once; TORCHTPU_FALLBACK=error makes it an error.
#include "aten/fallback.h"

#include <ATen/native/CPUFallback.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>

#include "aten/metrics.h"

namespace torchtpu::aten {
namespace {

bool fallback_is_error() {
  const char* env = std::getenv("TORCHTPU_FALLBACK");
  return env != nullptr && std::strcmp(env, "error") == 0;
}

}  // namespace

void cpu_fallback(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto& schema = op.schema();
  const std::string name =
      schema.overload_name().empty() ? schema.name() : schema.name() + "." + schema.overload_name();
  TORCH_CHECK_NOT_IMPLEMENTED(!fallback_is_error(), "The operator '", name,
                              "' is not lowered for the tpu device and TORCHTPU_FALLBACK=error forbids the CPU "
                              "fallback.");
  {
    static std::mutex mutex;
    static std::set<std::string> warned;
    std::lock_guard<std::mutex> lock(mutex);
    if (warned.insert(name).second) {
      TORCH_WARN("The operator '", name, "' is not lowered for the tpu device; it runs on the CPU with copies ",
                 "to and from the device. This will be slow.");
    }
  }
  op_counters(name).fallbacks++;
  at::native::cpu_fallback(op, stack);
}

}  // namespace torchtpu::aten
