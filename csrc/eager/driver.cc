#include "eager/driver.h"

#include <cstdlib>
#include <cstring>

namespace torchtpu::eager {

Mode mode() {
  static const Mode chosen = [] {
    const char* env = std::getenv("TORCHTPU_SYNC");
    return env != nullptr && std::strcmp(env, "1") == 0 ? Mode::kDebug : Mode::kStrict;
  }();
  return chosen;
}

void after_execute(const std::vector<runtime::BufferPtr>& outputs) {
  if (mode() != Mode::kDebug || outputs.empty()) return;
  runtime::synchronize(outputs.front()->device());
}

}  // namespace torchtpu::eager
