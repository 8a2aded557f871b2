// Tier 1 of the program cache: compiled programs in memory, bounded, least recently used first out.
//
// Sharded by key hash so that threads dispatching different ops rarely meet on one mutex; each shard keeps
// its own LRU order and an equal share of the capacity (TORCHTPU_CACHE_MAX_PROGRAMS, default 4096).
#pragma once

#include <atomic>
#include <cstdlib>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <utility>

#include "cache/program_key.h"

namespace torchtpu::cache {

size_t max_programs();  // TORCHTPU_CACHE_MAX_PROGRAMS, read once

template <class Program>
class ProgramCache {
 public:
  using Entry = std::shared_ptr<Program>;

  explicit ProgramCache(size_t capacity) : shard_capacity_(std::max<size_t>(1, capacity / kShards)) {}

  // The cached program, now the most recently used of its shard; null on a miss.
  Entry find(const ProgramKey& key) {
    Shard& s = shard(key);
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.index.find(key);
    if (it == s.index.end()) return nullptr;
    s.order.splice(s.order.begin(), s.order, it->second);
    return it->second->second;
  }

  // Adds (or replaces) `key`, evicting the shard's least recently used entry when it is full.
  void insert(const ProgramKey& key, Entry program) {
    Shard& s = shard(key);
    std::lock_guard<std::mutex> lock(s.mutex);
    auto it = s.index.find(key);
    if (it != s.index.end()) {
      it->second->second = std::move(program);
      s.order.splice(s.order.begin(), s.order, it->second);
      return;
    }
    s.order.emplace_front(key, std::move(program));
    s.index.emplace(key, s.order.begin());
    if (s.order.size() > shard_capacity_) {
      s.index.erase(s.order.back().first);
      s.order.pop_back();
      evictions_++;
    }
  }

  size_t size() {
    size_t n = 0;
    for (Shard& s : shards_) {
      std::lock_guard<std::mutex> lock(s.mutex);
      n += s.order.size();
    }
    return n;
  }
  int64_t evictions() const { return evictions_.load(); }

 private:
  static constexpr size_t kShards = 16;
  struct Shard {
    std::mutex mutex;
    std::list<std::pair<ProgramKey, Entry>> order;  // most recently used first
    std::unordered_map<ProgramKey, typename std::list<std::pair<ProgramKey, Entry>>::iterator, ProgramKeyHash> index;
  };
  Shard& shard(const ProgramKey& key) { return shards_[(key.hash() >> 7) % kShards]; }

  size_t shard_capacity_;
  std::array<Shard, kShards> shards_;
  std::atomic<int64_t> evictions_{0};
};

}  // namespace torchtpu::cache
