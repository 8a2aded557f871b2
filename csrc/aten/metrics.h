// Counters behind torchtpu.metrics(): per op compiles, cache hits, executions and CPU fallbacks, and
// host<->device transfers.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>

namespace torchtpu::aten {

struct OpCounters {
  std::atomic<int64_t> compiles{0};
  std::atomic<int64_t> cache_hits{0};
  std::atomic<int64_t> executions{0};
  std::atomic<int64_t> fallbacks{0};
};

// Stable for the life of the process; safe to keep and bump from any thread.
OpCounters& op_counters(const std::string& op);
void record_transfer(bool to_device, size_t nbytes);

struct MetricsSnapshot {
  std::map<std::string, std::map<std::string, int64_t>> ops;  // op -> counter -> value
  int64_t transfers_to_device = 0, bytes_to_device = 0;
  int64_t transfers_to_host = 0, bytes_to_host = 0;
};
MetricsSnapshot metrics_snapshot();
void reset_metrics();

// TORCHTPU_LOG_COMPILES: every op program and fused program compiled is printed to stderr.
bool log_compiles();

}  // namespace torchtpu::aten
