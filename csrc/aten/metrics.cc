#include "aten/metrics.h"

#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>

namespace torchtpu::aten {
namespace {

std::mutex& mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<std::string, std::unique_ptr<OpCounters>>& counters() {
  static std::unordered_map<std::string, std::unique_ptr<OpCounters>> all;
  return all;
}
std::atomic<int64_t> g_to_device{0}, g_bytes_to_device{0}, g_to_host{0}, g_bytes_to_host{0};

}  // namespace

OpCounters& op_counters(const std::string& op) {
  std::lock_guard<std::mutex> lock(mutex());
  auto& slot = counters()[op];
  if (!slot) slot = std::make_unique<OpCounters>();
  return *slot;
}

void record_transfer(bool to_device, size_t nbytes) {
  (to_device ? g_to_device : g_to_host)++;
  (to_device ? g_bytes_to_device : g_bytes_to_host) += static_cast<int64_t>(nbytes);
}

MetricsSnapshot metrics_snapshot() {
  MetricsSnapshot snapshot;
  {
    std::lock_guard<std::mutex> lock(mutex());
    for (const auto& [op, c] : counters()) {
      const int64_t values[] = {c->compiles, c->cache_hits, c->executions, c->fallbacks};
      if (values[0] + values[1] + values[2] + values[3] == 0) continue;
      snapshot.ops[op] = {{"compiles", values[0]}, {"cache_hits", values[1]},
                          {"executions", values[2]}, {"fallbacks", values[3]}};
    }
  }
  snapshot.transfers_to_device = g_to_device;
  snapshot.bytes_to_device = g_bytes_to_device;
  snapshot.transfers_to_host = g_to_host;
  snapshot.bytes_to_host = g_bytes_to_host;
  return snapshot;
}

void reset_metrics() {
  std::lock_guard<std::mutex> lock(mutex());
  for (auto& [op, c] : counters()) {
    c->compiles = 0;
    c->cache_hits = 0;
    c->executions = 0;
    c->fallbacks = 0;
  }
  g_to_device = g_bytes_to_device = g_to_host = g_bytes_to_host = 0;
}

bool log_compiles() {
  static const bool enabled = std::getenv("TORCHTPU_LOG_COMPILES") != nullptr;
  return enabled;
}

}  // namespace torchtpu::aten
