// Ops without a lowering run on the CPU: arguments are copied to the host, the CPU kernel runs, results
// and mutated arguments are copied back. Each op warns once; TORCHTPU_FALLBACK=error makes it an error.
#include "aten/fallback.h"

#include <ATen/CPUGeneratorImpl.h>
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

// A tpu generator cannot drive a CPU kernel (poisson, binomial, ... with `generator=`): the op gets a CPU
// generator seeded from the tpu one's (seed, offset), and the tpu one advances, so a seeded tpu generator
// reproduces the op's draws and two calls draw differently.
void replace_tpu_generators(torch::jit::Stack& stack) {
  for (c10::IValue& v : stack) {
    if (!v.isGenerator() || v.toGenerator().device().type() != c10::DeviceType::PrivateUse1) continue;
    at::Generator tpu = v.toGenerator();
    uint64_t seed;
    {
      std::lock_guard<std::mutex> lock(tpu.mutex());
      // splitmix64 of (seed, offset): nearby offsets give unrelated CPU streams.
      seed = tpu.current_seed() + 0x9E3779B97F4A7C15ULL * (tpu.get_offset() + 1);
      seed = (seed ^ (seed >> 30)) * 0xBF58476D1CE4E5B9ULL;
      seed = (seed ^ (seed >> 27)) * 0x94D049BB133111EBULL;
      seed ^= seed >> 31;
      tpu.set_offset(tpu.get_offset() + 1);
    }
    v = at::make_generator<at::CPUGeneratorImpl>(seed);
  }
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
  replace_tpu_generators(*stack);
  at::native::cpu_fallback(op, stack);
}

}  // namespace torchtpu::aten
