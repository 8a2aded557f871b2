#include "runtime/mapping_budget.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <mutex>
#include <string>
#include <vector>

namespace torchtpu::runtime {
namespace {

// No compile adds more mappings than this (a program of many kernels included); the count is read again
// once the last reading plus this much per compile since could reach the high-water mark.
constexpr long kMappingsPerCompileBound = 32;

// The cap used: TORCHTPU_MAX_MAP_COUNT when set, else the kernel's vm.max_map_count.
long read_cap() {
  if (const char* env = std::getenv("TORCHTPU_MAX_MAP_COUNT"); env != nullptr && *env != '\0') {
    const long value = std::atol(env);
    if (value > 0) return value;
  }
  long cap = 0;
  std::ifstream("/proc/sys/vm/max_map_count") >> cap;
  return cap > 0 ? cap : 65530;
}

// Lines of /proc/self/maps; 0 where it cannot be read (then no budget applies).
long count_mappings() {
  const int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::vector<char> chunk(1 << 16);
  long lines = 0;
  ssize_t n;
  while ((n = read(fd, chunk.data(), chunk.size())) > 0) lines += std::count(chunk.data(), chunk.data() + n, '\n');
  close(fd);
  return lines;
}

struct Budget {
  std::mutex mutex;
  std::vector<std::function<void()>> shrinkers;
  long last_count = -1;  // not read yet
  long compiles_since_count = 0;
};
Budget& budget() {
  static auto* b = new Budget;  // never destroyed: caches are not either
  return *b;
}

long mapping_cap() {
  static const long cap = read_cap();
  return cap;
}

}  // namespace

void add_mapping_shrinker(std::function<void()> shrink) {
  std::lock_guard<std::mutex> lock(budget().mutex);
  budget().shrinkers.push_back(std::move(shrink));
}

void make_room_for_a_program() {
  const long cap = mapping_cap();
  const long high_water = cap / 4 * 3;
  std::vector<std::function<void()>> shrinkers;
  {
    std::lock_guard<std::mutex> lock(budget().mutex);
    Budget& b = budget();
    if (b.last_count >= 0 && b.last_count + kMappingsPerCompileBound * ++b.compiles_since_count < high_water) return;
    b.last_count = count_mappings();
    b.compiles_since_count = 0;
    if (b.last_count < high_water) return;
    shrinkers = b.shrinkers;
  }
  // Shrinking destroys executables, which takes the plugin's locks: not under ours.
  for (const auto& shrink : shrinkers) shrink();
  const long count = count_mappings();
  {
    std::lock_guard<std::mutex> lock(budget().mutex);
    budget().last_count = count;
  }
  if (count + kMappingsPerCompileBound >= cap / 16 * 15) {
    throw TooManyMappings("torchtpu: the process holds " + std::to_string(count) +
                          " memory mappings, near the kernel's limit of " + std::to_string(cap) +
                          " (vm.max_map_count), and compiling another program could exceed it. Each compiled "
                          "program keeps a few; the program caches gave back what they could. Hold fewer "
                          "compiled programs (fewer distinct shapes, TORCHTPU_CACHE_MAX_PROGRAMS) or raise "
                          "vm.max_map_count.");
  }
}

}  // namespace torchtpu::runtime
