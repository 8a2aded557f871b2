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

std::vector<runtime::BufferPtr> execute(const runtime::Executable& executable, int device,
                                        const std::vector<const runtime::Buffer*>& arguments,
                                        const std::vector<int64_t>& kept) {
  std::vector<runtime::BufferPtr> outputs = executable.execute(device, arguments, kept);
  if (mode() == Mode::kDebug) runtime::synchronize(device);
  return outputs;
}

}  // namespace torchtpu::eager
