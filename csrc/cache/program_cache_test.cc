// Tier-1 cache tests: threads racing for one new program build it once, without blocking other keys;
// shrinking keeps the recent programs.
#include <atomic>
#include <chrono>
#include <future>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cache/program_cache.h"
#include "testing/check.h"

using namespace torchtpu;
using namespace std::chrono_literals;

namespace {

cache::ProgramKey key_of(int64_t word) {
  cache::ProgramKey key;
  key.add(word);
  return key;
}

// Starts `n` threads running `body(i)` at once and joins them.
template <class Body>
void race(int n, const Body& body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      ready++;
      while (ready.load() < n) std::this_thread::yield();
      body(i);
    });
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace

TEST_CASE("threads missing one key build it once and share the program") {
  cache::ProgramCache<int> programs(64);
  std::atomic<int> builds{0};
  std::vector<std::shared_ptr<int>> got(8);
  std::vector<int> built(8);  // not vector<bool>: threads write neighbouring elements
  race(8, [&](int i) {
    bool b = false;
    got[i] = programs.find_or_build(key_of(1), [&] {
      builds++;
      std::this_thread::sleep_for(50ms);  // a compile: the others arrive meanwhile
      return std::make_pair(std::make_shared<int>(42), true);
    }, b);
    built[i] = b;
  });
  EXPECT(builds == 1);
  int builders = 0;
  for (int i = 0; i < 8; ++i) {
    EXPECT(got[i] == got[0] && *got[i] == 42);
    builders += built[i];
  }
  EXPECT(builders == 1);
  EXPECT(programs.size() == 1);
}

TEST_CASE("a build in flight does not hold up other keys") {
  cache::ProgramCache<int> programs(64);
  std::promise<void> other_built;
  std::future<void> other = other_built.get_future();
  bool waited = false;
  std::thread slow([&] {
    bool b = false;
    programs.find_or_build(key_of(1), [&] {
      // Finishes only once another key has been built while this build runs.
      waited = other.wait_for(10s) == std::future_status::ready;
      return std::make_pair(std::make_shared<int>(1), true);
    }, b);
  });
  bool b = false;
  programs.find_or_build(key_of(2), [] { return std::make_pair(std::make_shared<int>(2), true); }, b);
  other_built.set_value();
  slow.join();
  EXPECT(waited);
}

TEST_CASE("a failed or unfiled build leaves each waiter to build its own") {
  cache::ProgramCache<int> programs(64);
  std::atomic<int> builds{0};
  std::atomic<int> failures{0};
  std::atomic<int> built{0};
  race(4, [&](int) {
    try {
      bool b = false;
      programs.find_or_build(key_of(3), [&]() -> std::pair<std::shared_ptr<int>, bool> {
        std::this_thread::sleep_for(20ms);
        if (builds++ == 0) throw std::runtime_error("first build fails");
        return {std::make_shared<int>(3), false};  // not filed: the next caller builds again
      }, b);
      built += b;
    } catch (const std::runtime_error&) {
      failures++;
    }
  });
  EXPECT(failures == 1);
  EXPECT(builds == 4);
  EXPECT(built == 3);
  EXPECT(programs.size() == 0);
}

TEST_CASE("shrink drops the least recently used half and keeps the recent programs") {
  cache::ProgramCache<int> programs(4096);
  for (int64_t i = 0; i < 400; ++i) programs.insert(key_of(i), std::make_shared<int>(static_cast<int>(i)));
  for (int64_t i = 0; i < 10; ++i) EXPECT(programs.find(key_of(i)) != nullptr);  // now the most recent
  programs.shrink();
  EXPECT(programs.size() <= 200 + 16 && programs.size() >= 200 - 16);  // half of each of 16 shards, rounded
  EXPECT(programs.evictions() == static_cast<int64_t>(400 - programs.size()));
  for (int64_t i = 0; i < 10; ++i) EXPECT(programs.find(key_of(i)) != nullptr);
}

int main() { return torchtpu::testing::run_all(); }
