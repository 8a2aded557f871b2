#include "cache/program_cache.h"

#include <string>

namespace torchtpu::cache {

size_t max_programs() {
  static const size_t limit = [] {
    const char* env = std::getenv("TORCHTPU_CACHE_MAX_PROGRAMS");
    if (env == nullptr || *env == '\0') return size_t{4096};
    const long long value = std::atoll(env);
    return value > 0 ? static_cast<size_t>(value) : size_t{4096};
  }();
  return limit;
}

}  // namespace torchtpu::cache
