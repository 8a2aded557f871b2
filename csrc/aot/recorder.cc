#include "aot/recorder.h"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <unordered_map>

namespace torchtpu::aot {
namespace {

std::atomic<bool> g_recording{false};

struct Recorded {
  std::mutex mutex;
  std::vector<RecordedProgram> programs;
  std::unordered_map<std::string, size_t> index;  // text -> position in programs
};

Recorded& recorded() {
  static Recorded* r = new Recorded();  // immortal: ops may build programs while the process exits
  return *r;
}

}  // namespace

void set_recording(bool on) { g_recording.store(on, std::memory_order_relaxed); }

bool recording() { return g_recording.load(std::memory_order_relaxed); }

void record(const std::string& op, const std::string& text, int partitions) {
  if (!recording()) return;
  Recorded& r = recorded();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto [it, inserted] = r.index.emplace(text, r.programs.size());
  if (inserted) r.programs.push_back({text, {}, 0, partitions});
  RecordedProgram& program = r.programs[it->second];
  ++program.builds;
  if (std::find(program.ops.begin(), program.ops.end(), op) == program.ops.end()) program.ops.push_back(op);
}

std::vector<RecordedProgram> recorded_programs() {
  Recorded& r = recorded();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.programs;
}

size_t recorded_count() {
  Recorded& r = recorded();
  std::lock_guard<std::mutex> lock(r.mutex);
  return r.programs.size();
}

void clear_recorded() {
  Recorded& r = recorded();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.programs.clear();
  r.index.clear();
}

}  // namespace torchtpu::aot
