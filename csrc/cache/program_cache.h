// Tier 1 of the program cache: compiled programs in memory, bounded, least recently used first out.
//
// Sharded by key hash so that threads dispatching different ops rarely meet on one mutex; each shard keeps
// its own LRU order and an equal share of the capacity (TORCHTPU_CACHE_MAX_PROGRAMS, default 4096).
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <list>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "cache/program_key.h"
#include "runtime/mapping_budget.h"

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
    return find_locked(s, key);
  }

  // The program of `key`, built on a miss by `build()`, which returns the program and whether to file it
  // under `key`. Threads that miss one key at once build it once: the first builds, holding no lock (so
  // other keys build meanwhile), and the others wait for it. A waiter finds the filed program; if the build
  // threw or filed nothing, one waiter builds in turn with its own `build`. `built` says whether this
  // call's `build` ran.
  template <class Build>
  Entry find_or_build(const ProgramKey& key, const Build& build, bool& built) {
    Shard& s = shard(key);
    {
      std::unique_lock<std::mutex> lock(s.mutex);
      while (true) {
        if (Entry hit = find_locked(s, key)) {
          built = false;
          return hit;
        }
        if (s.building.insert(key).second) break;
        s.built.wait(lock);
      }
    }
    // Runs however the build ends, so waiters never wait for a build that threw.
    struct Finish {
      Shard& s;
      const ProgramKey& key;
      ~Finish() {
        {
          std::lock_guard<std::mutex> lock(s.mutex);
          s.building.erase(key);
        }
        s.built.notify_all();
      }
    } finish{s, key};
    std::pair<Entry, bool> result = build();
    if (result.second) insert(key, result.first);
    built = true;
    return std::move(result.first);
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

  // Drops the older half of every shard (at least one entry of a non-empty shard): how the cache gives
  // back memory mappings when the process nears its cap (runtime/mapping_budget.h).
  void shrink() {
    for (Shard& s : shards_) {
      std::lock_guard<std::mutex> lock(s.mutex);
      for (size_t drop = (s.order.size() + 1) / 2; drop > 0; --drop) {
        s.index.erase(s.order.back().first);
        s.order.pop_back();
        evictions_++;
      }
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
    std::unordered_set<ProgramKey, ProgramKeyHash> building;  // keys a thread is building now
    std::condition_variable built;                           // a build of this shard ended
  };
  Shard& shard(const ProgramKey& key) { return shards_[(key.hash() >> 7) % kShards]; }

  // With s.mutex held.
  static Entry find_locked(Shard& s, const ProgramKey& key) {
    auto it = s.index.find(key);
    if (it == s.index.end()) return nullptr;
    s.order.splice(s.order.begin(), s.order, it->second);
    return it->second->second;
  }

  size_t shard_capacity_;
  std::array<Shard, kShards> shards_;
  std::atomic<int64_t> evictions_{0};
};

// The process's tier-1 cache of `Program`s, bounded by max_programs(). Never destroyed: freeing executables at
// exit would run into the plugin's own statics, already torn down (under ASan, a use after free in XLA's JIT
// listener). It gives back its older programs when the process nears its memory-map cap.
template <class Program>
ProgramCache<Program>& process_program_cache() {
  static auto* programs = [] {
    auto* cache = new ProgramCache<Program>(max_programs());
    runtime::add_mapping_shrinker([cache] { cache->shrink(); });
    return cache;
  }();
  return *programs;
}

}  // namespace torchtpu::cache
