#include "aten/value_checks.h"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "aten/device_error.h"
#include "aten/fused.h"
#include "aten/storage.h"
#include "aten/storage_ops.h"
#include "eager/driver.h"
#include "runtime/buffer.h"

namespace torchtpu::aten {
namespace {

std::atomic<bool>& enabled_flag() {
  static std::atomic<bool> enabled = [] {
    const char* env = std::getenv("TORCHTPU_VALUE_CHECKS");
    return env == nullptr || std::strcmp(env, "0") != 0;
  }();
  return enabled;
}

struct RegisteredCheck {
  std::string op;
  lowering::CheckKind kind;
  std::vector<int64_t> facts;
};

struct Registry {
  std::mutex mutex;
  std::unordered_map<int64_t, RegisteredCheck> checks;
};
Registry& registry() {
  static Registry r;
  return r;
}

// FNV-1a over the bytes that identify a check.
class Hash {
 public:
  void add(const void* data, size_t size) {
    for (size_t i = 0; i < size; ++i) {
      value_ ^= static_cast<const unsigned char*>(data)[i];
      value_ *= 1099511628211ull;
    }
  }
  // Positive and nonzero, as the state's "no failure" is 0.
  int64_t id() const { return static_cast<int64_t>(value_ >> 2) | 1; }

 private:
  uint64_t value_ = 14695981039346656037ull;
};

// "aten::index_copy_.dim" -> "index_copy_", the name CPU's messages use.
std::string short_name(const std::string& op) {
  const size_t begin = op.find("::") == std::string::npos ? 0 : op.find("::") + 2;
  return op.substr(begin, op.find('.', begin) - begin);
}

std::string describe(const int64_t word[3]) {
  RegisteredCheck check;
  {
    std::lock_guard<std::mutex> lock(registry().mutex);
    auto it = registry().checks.find(word[0]);
    if (it == registry().checks.end()) return "a device-side value check failed (unknown check " + std::to_string(word[0]) + ")";
    check = it->second;
  }
  std::string message = lowering::check_message(check.kind, check.facts, word[1], word[2]);
  if (!lowering::message_names_api(check.kind)) message = short_name(check.op) + "(): " + message;
  if (eager::mode() != eager::Mode::kDebug) {
    message += "\n(checked on the device and reported at the next synchronization, so an earlier op than this "
               "line's may have failed; TORCHTPU_LAUNCH_BLOCKING=1 raises at the op itself, "
               "TORCHTPU_VALUE_CHECKS=0 turns the checks off)";
  }
  return message;
}

}  // namespace

bool value_checks_enabled() { return enabled_flag().load(std::memory_order_relaxed); }
void set_value_checks_enabled(bool enabled) { enabled_flag().store(enabled); }

int64_t register_check(const std::string& op, const lowering::ValueCheck& check) {
  Hash hash;
  hash.add(op.data(), op.size());
  const auto kind = static_cast<int32_t>(check.kind);
  hash.add(&kind, sizeof kind);
  hash.add(check.facts.data(), check.facts.size() * sizeof(int64_t));
  const int64_t id = hash.id();
  std::lock_guard<std::mutex> lock(registry().mutex);
  registry().checks.emplace(id, RegisteredCheck{op, check.kind, check.facts});
  return id;
}

namespace {

struct CheckStates {
  std::mutex mutex;
  // Shared: a sync reading a state keeps it alive while an ended owner's state is forgotten.
  std::map<std::pair<int, std::thread::id>, std::shared_ptr<CheckState>> by_owner;  // by device, then owner
  std::set<std::thread::id> ended;  // owners whose threads have ended: their failures go to any thread
};
// Leaked on purpose, like the fused traces: the states' buffers must not be destroyed after the plugin.
CheckStates& check_states() {
  static auto* states = new CheckStates;
  return *states;
}

}  // namespace

CheckState& check_state(int device, std::thread::id owner) {
  CheckStates& states = check_states();
  std::lock_guard<std::mutex> lock(states.mutex);
  std::shared_ptr<CheckState>& state = states.by_owner[{device, owner}];
  if (!state) {
    state = std::make_shared<CheckState>();
    // Never written, its storage reads as zeros: no failure.
    state->tensor = empty_memory_format({3}, at::kLong, std::nullopt,
                                        c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device)),
                                        std::nullopt, std::nullopt);
  }
  return *state;
}

void bind_check_state(CheckState& state, runtime::BufferPtr returned) {
  if (returned->sharding() != nullptr) {
    returned = returned->shards().at(static_cast<size_t>(state.tensor.device().index()));
  }
  storage_handle(state.tensor).set_buffer(std::move(returned));
}

namespace {

// Reads `state` from the device if a checked op ran since, keeping a failure; then raises the first kept
// failure not yet raised in `self`. `owns`: `self` is the state's owner, or the owner has ended.
void raise_recorded_failure(CheckState& state, std::thread::id self, bool owns) {
  TraceLock lock = lock_trace();
  StorageHandle& handle = storage_handle(state.tensor);
  // Checked ops still recorded in another thread's fused trace have not run: that thread's next sync, a read
  // of a value that trace computes, or torch.tpu.synchronize() runs and reads them. Reading them here would
  // run that trace at a point of this thread's choosing, a new program for every interleaving.
  if (!pending_in_another_thread(handle) && state.unread.exchange(false)) {
    std::array<int64_t, 3> word{0, 0, 0};
    try {
      runtime::download(*storage_buffer(state.tensor), word.data());  // a fused trace computing it runs first
    } catch (const runtime::PjrtError& e) {
      // The program computing the state failed, and that error is what the caller sees; the state starts
      // again from no failure.
      handle.set_buffer(nullptr);
      throw_device_error("reading the value checks", e);
    } catch (...) {
      handle.set_buffer(nullptr);  // a fused trace that failed took the state with it
      throw;
    }
    if (word[0] != 0) {
      handle.set_buffer(nullptr);
      state.failures.push_back({word, {}});
      state.failures_kept = state.failures.size();
    }
  }
  if (owns) {
    // The owner is never among a failure's told threads, so a failure told to `self` here belongs to an
    // ended owner and has had the one raise it is owed: drop it rather than keep it for a thread not told.
    state.failures.erase(std::remove_if(state.failures.begin(), state.failures.end(),
                                        [&](const auto& failure) { return failure.told.count(self) > 0; }),
                         state.failures.end());
    state.failures_kept = state.failures.size();
  }
  for (auto it = state.failures.begin(); it != state.failures.end(); ++it) {
    if (it->told.count(self) > 0) continue;
    std::string message = describe(it->word.data());
    if (owns) {
      state.failures.erase(it);
      state.failures_kept = state.failures.size();
    } else {
      it->told.insert(self);
      message += "\n(an op of another thread failed; that thread gets this error at its next synchronization too)";
    }
    lock.unlock();
    TORCH_CHECK(false, message);
  }
}

// Drops the states of ended threads that hold nothing unread and no kept failure: no op will update them
// again, so each would stay allocated (a device buffer) for the rest of the process. Also forgets the ended
// threads that have no state left.
void forget_ended_states() {
  std::vector<std::shared_ptr<CheckState>> forgotten;  // destroyed once the locks are released
  {
    // The trace lock first, as recording takes it before a state: a state is read or marked unread only
    // under it, so "nothing unread" cannot change while this decides.
    const TraceLock trace_lock = lock_trace();
    CheckStates& states = check_states();
    std::lock_guard<std::mutex> lock(states.mutex);
    std::set<std::thread::id> still_held;
    for (auto it = states.by_owner.begin(); it != states.by_owner.end();) {
      const std::thread::id owner = it->first.second;
      const CheckState& state = *it->second;
      if (states.ended.count(owner) == 0) {
        ++it;
      } else if (!state.unread.load() && state.failures_kept.load() == 0) {
        forgotten.push_back(std::move(it->second));
        it = states.by_owner.erase(it);
      } else {
        still_held.insert(owner);
        ++it;
      }
    }
    states.ended = std::move(still_held);
  }
}

}  // namespace

void raise_value_errors(int device) {
  const std::thread::id self = trace_owner();
  CheckStates& states = check_states();
  std::set<std::thread::id> ended;
  {
    std::lock_guard<std::mutex> lock(states.mutex);
    if (!states.ended.empty()) ended = states.ended;
  }
  if (!ended.empty()) {
    // In fused mode a thread may end with ops recorded: no sync of its own will run them, so this one does,
    // as a CUDA thread's launched work runs after the thread is gone (and its failures reach the next sync).
    flush_traces_of(ended, "trace of an ended thread");
    forget_ended_states();
  }
  std::vector<std::pair<std::shared_ptr<CheckState>, bool>> to_read;  // with whether `self` owns it
  {
    std::lock_guard<std::mutex> lock(states.mutex);
    for (const auto& [key, state] : states.by_owner) {
      const auto& [state_device, owner] = key;
      if (state_device == device && (state->unread.load() || state->failures_kept.load() > 0)) {
        to_read.emplace_back(state, owner == self || states.ended.count(owner) > 0);
      }
    }
  }
  for (const auto& [state, owns] : to_read) raise_recorded_failure(*state, self, owns);
}

namespace {

// Lives as long as its thread (a thread_local): marks the thread's states ended when it goes.
class OwnerExitWatch {
 public:
  OwnerExitWatch() {
    std::lock_guard<std::mutex> lock(check_states().mutex);
    check_states().ended.erase(id_);  // a new thread may reuse an ended one's id
  }
  ~OwnerExitWatch() {
    std::lock_guard<std::mutex> lock(check_states().mutex);
    check_states().ended.insert(id_);
  }
  OwnerExitWatch(const OwnerExitWatch&) = delete;
  OwnerExitWatch& operator=(const OwnerExitWatch&) = delete;

 private:
  const std::thread::id id_ = std::this_thread::get_id();
};

}  // namespace

void watch_owner_exit() { thread_local OwnerExitWatch watch; }

}  // namespace torchtpu::aten
