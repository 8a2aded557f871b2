// Completion events of executions not yet known to be finished, per device, so synchronize() waits for
// all queued work: the CPU plugin may run independent programs out of order, so the last result alone
// does not tell that everything before it is done.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/error.h"
#include "runtime/pjrt_api.h"
#include "runtime/plugin.h"

namespace torchtpu::runtime {
namespace {

// Finished events are dropped in batches: polling after every execution would cost a plugin call per op.
constexpr size_t kPollEvery = 64;

struct PendingExecution {
  PJRT_Event* done;
  std::shared_ptr<const std::string> program;  // its name, for the error message
  uint64_t number;                             // in launch order on its device
};

// A donated buffer's handle, destroyed once executions up to `last_execution` (by number) have finished.
struct DonatedHandle {
  PJRT_Buffer* buffer;
  uint64_t last_execution;
};

// One device's queued executions, and the donated handles waiting for them. Each device has its own lock,
// so threads driving different devices never meet here.
struct PendingDevice {
  std::mutex mutex;
  std::deque<PendingExecution> executions;
  uint64_t executions_tracked = 0;
  std::deque<DonatedHandle> donated;
  // Executions a synchronize() took off the list and is awaiting; their events are destroyed only after
  // they leave this list, so a QueueMark made meanwhile can still watch them.
  std::list<std::deque<PendingExecution>> awaited;
  std::weak_ptr<QueueMark::State> last_mark;  // the latest QueueMark made on the device
};

PendingDevice& pending(int device) {
  static std::vector<std::unique_ptr<PendingDevice>> devices = [] {
    std::vector<std::unique_ptr<PendingDevice>> all;
    for (size_t i = 0; i < plugin().devices.size(); ++i) all.push_back(std::make_unique<PendingDevice>());
    return all;
  }();
  return *devices.at(static_cast<size_t>(device));
}

bool is_ready(const PJRT_Api* api, PJRT_Event* event) {
  PJRT_Event_IsReady_Args args{};
  args.struct_size = PJRT_Event_IsReady_Args_STRUCT_SIZE;
  args.event = event;
  PJRT_Error* error = api->PJRT_Event_IsReady(&args);
  if (error != nullptr) {
    destroy_error(api, error);
    return false;
  }
  return args.is_ready;
}

// Drops finished work from the front (keeping any that failed, so synchronize reports the error), so the
// list stays short in a long eager loop.
void drop_finished(const PJRT_Api* api, std::deque<PendingExecution>& executions) {
  while (executions.size() > 1 && is_ready(api, executions.front().done)) {
    PJRT_Event_Error_Args error_args{};
    error_args.struct_size = PJRT_Event_Error_Args_STRUCT_SIZE;
    error_args.event = executions.front().done;
    PJRT_Error* error = api->PJRT_Event_Error(&error_args);
    if (error != nullptr) {
      destroy_error(api, error);
      break;
    }
    destroy_event(api, executions.front().done);
    executions.pop_front();
  }
}

// Takes the donated handles whose executions have all finished: those launched before the oldest
// execution still listed (or all, when none is). Called under the device's lock.
std::vector<PJRT_Buffer*> take_released_handles(PendingDevice& queue, uint64_t finished_before) {
  std::vector<PJRT_Buffer*> released;
  while (!queue.donated.empty() && queue.donated.front().last_execution < finished_before) {
    released.push_back(queue.donated.front().buffer);
    queue.donated.pop_front();
  }
  return released;
}

void destroy_handles(const PJRT_Api* api, const std::vector<PJRT_Buffer*>& handles) {
  for (PJRT_Buffer* buffer : handles) {
    PJRT_Buffer_Destroy_Args args{};
    args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
    args.buffer = buffer;
    destroy_error(api, api->PJRT_Buffer_Destroy(&args));  // a failed free only leaks
  }
}

uint64_t oldest_listed(const PendingDevice& queue) {
  return queue.executions.empty() ? queue.executions_tracked : queue.executions.front().number;
}

}  // namespace

void destroy_after_queued_work(int device, PJRT_Buffer* donated) {
  PendingDevice& queue = pending(device);
  std::lock_guard<std::mutex> lock(queue.mutex);
  if (queue.executions_tracked == 0) {
    destroy_handles(plugin().api, {donated});
    return;
  }
  queue.donated.push_back({donated, queue.executions_tracked - 1});
}

void track_execution(int device, PJRT_Event* done, std::shared_ptr<const std::string> program) {
  PendingDevice& queue = pending(device);
  std::vector<PJRT_Buffer*> released;
  const PJRT_Api* api = plugin().api;
  {
    std::lock_guard<std::mutex> lock(queue.mutex);
    std::deque<PendingExecution>& executions = queue.executions;
    executions.push_back({done, std::move(program), queue.executions_tracked++});
    // A fused step donates many handles per execution: poll for them too, so they do not pile up.
    if (executions.size() % kPollEvery != 0 && queue.donated.size() < kPollEvery) return;
    drop_finished(api, executions);
    released = take_released_handles(queue, oldest_listed(queue));
  }
  destroy_handles(api, released);
}

void synchronize(int device) {
  const OpScope scope;  // a thread returning from a wait must not meet an exiting interpreter
  exit_gate();
  const PJRT_Api* api = plugin().api;
  PendingDevice& queue = pending(device);
  std::list<std::deque<PendingExecution>>::iterator executions;
  uint64_t awaited_before = 0;  // executions numbered below this are among those awaited here
  {
    std::lock_guard<std::mutex> lock(queue.mutex);
    executions = queue.awaited.emplace(queue.awaited.end());
    executions->swap(queue.executions);
    awaited_before = queue.executions_tracked;
  }
  // Await every event even after a failure, so none leaks; then report the first failure, which names the
  // program that launched it: the error surfaces here, long after the op returned.
  std::optional<PjrtError> first_error;
  for (const PendingExecution& execution : *executions) {
    PJRT_Event_Await_Args args{};
    args.struct_size = PJRT_Event_Await_Args_STRUCT_SIZE;
    args.event = execution.done;
    PJRT_Error* error = api->PJRT_Event_Await(&args);
    try {
      check(api, error, ("asynchronous execution of " + *execution.program).c_str());
    } catch (const PjrtError& e) {
      if (!first_error) first_error = e;
    }
  }
  std::deque<PendingExecution> finished;
  std::vector<PJRT_Buffer*> released;
  {
    std::lock_guard<std::mutex> lock(queue.mutex);
    finished.swap(*executions);
    queue.awaited.erase(executions);
    released = take_released_handles(queue, awaited_before);
  }
  for (const PendingExecution& execution : finished) destroy_event(api, execution.done);
  destroy_handles(api, released);
  exit_gate();
  if (first_error) throw_execution_error(*first_error, device);
}

// ---- queue marks (device events) ---------------------------------------------------------------------

struct QueueMark::State {
  std::mutex mutex;
  std::condition_variable finished;
  int unfinished = 0;    // executions before the mark not yet finished, plus the previous mark if unreached
  Clock::time_point at;  // when made, then moved to each execution's finish
  std::vector<std::shared_ptr<State>> later_marks;  // waiting for this one to be reached
};

namespace {

// One of what a mark waits for is done, at `when`; a mark reached passes its time on to the marks made
// after it, so a later mark is never reached before an earlier one (the plugin's callbacks run late, and
// in any order).
void count_down(std::shared_ptr<QueueMark::State> state, QueueMark::Clock::time_point when) {
  using Step = std::pair<std::shared_ptr<QueueMark::State>, QueueMark::Clock::time_point>;
  std::vector<Step> work{{std::move(state), when}};  // a loop, not recursion: many marks may wait in a chain
  while (!work.empty()) {
    auto [mark, time] = std::move(work.back());
    work.pop_back();
    std::lock_guard<std::mutex> lock(mark->mutex);
    mark->at = std::max(mark->at, time);
    if (--mark->unfinished > 0) continue;
    mark->finished.notify_all();
    for (std::shared_ptr<QueueMark::State>& later : mark->later_marks) work.emplace_back(std::move(later), mark->at);
    mark->later_marks.clear();
  }
}

// The plugin calls this once an execution before a mark has finished (on its own thread, or at once).
void on_execution_finished(PJRT_Error* error, void* user_arg) {
  std::unique_ptr<std::shared_ptr<QueueMark::State>> state(
      static_cast<std::shared_ptr<QueueMark::State>*>(user_arg));
  if (error != nullptr) destroy_error(plugin().api, error);  // reported by synchronize()
  count_down(*state, QueueMark::Clock::now());
}

}  // namespace

QueueMark::QueueMark(int device) : device_(device), state_(std::make_shared<State>()) {
  state_->at = Clock::now();
  const PJRT_Api* api = plugin().api;
  PendingDevice& queue = pending(device);
  std::lock_guard<std::mutex> lock(queue.mutex);
  executions_before_ = queue.executions_tracked;
  if (std::shared_ptr<State> previous = queue.last_mark.lock()) {
    std::lock_guard<std::mutex> previous_lock(previous->mutex);
    std::lock_guard<std::mutex> count(state_->mutex);
    if (previous->unfinished > 0) {
      ++state_->unfinished;
      previous->later_marks.push_back(state_);
    } else {
      state_->at = std::max(state_->at, previous->at);
    }
  }
  queue.last_mark = state_;
  // Every execution launched so far that is not known to be finished is listed, or awaited by a
  // synchronize(); a callback on each unfinished one counts it down.
  auto watch = [&](const std::deque<PendingExecution>& executions) {
    for (const PendingExecution& execution : executions) {
      if (is_ready(api, execution.done)) continue;
      {
        std::lock_guard<std::mutex> count(state_->mutex);
        ++state_->unfinished;  // before registering: the callback may run at once
      }
      PJRT_Event_OnReady_Args args{};
      args.struct_size = PJRT_Event_OnReady_Args_STRUCT_SIZE;
      args.event = execution.done;
      args.callback = &on_execution_finished;
      args.user_arg = new std::shared_ptr<State>(state_);
      if (PJRT_Error* error = api->PJRT_Event_OnReady(&args)) {
        delete static_cast<std::shared_ptr<State>*>(args.user_arg);
        count_down(state_, Clock::now());  // so that marks made later do not wait for this one forever
        check(api, error, "PJRT_Event_OnReady");  // throws; callbacks registered so far hold their own state
      }
    }
  };
  watch(queue.executions);
  for (const std::deque<PendingExecution>& executions : queue.awaited) watch(executions);
}

// Asks the plugin about the executions themselves, not the callbacks, which may run a little after an
// execution is done: once synchronize() returns, every mark made before it is reached.
bool QueueMark::reached() const {
  const PJRT_Api* api = plugin().api;
  PendingDevice& queue = pending(device_);
  std::lock_guard<std::mutex> lock(queue.mutex);
  auto finished = [&](const std::deque<PendingExecution>& executions) {
    for (const PendingExecution& execution : executions) {
      if (execution.number >= executions_before_) break;  // listed in launch order
      if (!is_ready(api, execution.done)) return false;
    }
    return true;
  };
  if (!finished(queue.executions)) return false;
  for (const std::deque<PendingExecution>& executions : queue.awaited) {
    if (!finished(executions)) return false;
  }
  return true;
}

void QueueMark::wait() const {
  const OpScope scope;  // as synchronize(): a thread returning from a wait must not meet an exiting interpreter
  exit_gate();
  {
    std::unique_lock<std::mutex> lock(state_->mutex);
    state_->finished.wait(lock, [&] { return state_->unfinished == 0; });
  }
  exit_gate();
}

QueueMark::Clock::time_point QueueMark::reached_at() const {
  // Once reached, what is left to count down are callbacks about to run.
  std::unique_lock<std::mutex> lock(state_->mutex);
  state_->finished.wait(lock, [&] { return state_->unfinished == 0; });
  return state_->at;
}

// ---- process exit ---------------------------------------------------------------------------------------
//
// Python stops daemon threads at exit by calling pthread_exit when they next take the GIL. A thread
// returning from a tpu op takes the GIL inside torch's C++ (a gil_scoped_release destructor, a
// Python-object decref), and the forced unwind of pthread_exit through those noexcept frames calls
// std::terminate: "terminate called without an active exception", exit status 134. prepare_exit runs
// from atexit, before Python stops them, and makes such threads park here instead, holding no lock and no
// GIL, until the process is gone.

namespace {

std::atomic<bool> g_exiting{false};
std::thread::id g_exiting_thread;
// Threads inside an OpScope and not parked; the depth of the calling thread's scopes.
std::atomic<int> g_in_op{0};
thread_local int t_op_depth = 0;

// Never destroyed: parked threads wait on them while static destructors run.
std::mutex& park_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::condition_variable& park_cv() {
  static auto* cv = new std::condition_variable;
  return *cv;
}

}  // namespace

void exit_gate() {
  if (!g_exiting.load(std::memory_order_acquire)) return;
  if (std::this_thread::get_id() == g_exiting_thread) return;
  if (t_op_depth > 0) g_in_op--;  // parked: prepare_exit need not wait for this thread any more
  std::unique_lock<std::mutex> lock(park_mutex());
  park_cv().wait(lock, [] { return false; });  // never returns: the process ends around this thread
}

OpScope::OpScope() {
  if (t_op_depth == 0) exit_gate();  // before counting: a thread parked here was never inside
  if (t_op_depth++ == 0) g_in_op++;
}

OpScope::~OpScope() {
  if (--t_op_depth > 0) return;
  g_in_op--;
  exit_gate();
}

void prepare_exit() {
  if (in_bad_fork() || g_exiting.load()) return;
  g_exiting_thread = std::this_thread::get_id();
  g_exiting.store(true, std::memory_order_release);
  // Work already queued finishes before the plugin's statics are torn down; errors no longer matter. (A
  // thread may still be loading the plugin: it is inside an op, and waited for below.)
  for (int device = 0; plugin_loaded() && device < device_count(); ++device) {
    try {
      synchronize(device);
    } catch (const std::exception&) {
    }
  }
  // Threads inside an op run on (our caller released the GIL) until they reach a gate; loading the plugin and
  // a first compile on a busy machine take seconds, so the wait is generous, but bounded so that a thread
  // stuck in an op cannot hang the exit. Threads outside ops are in Python code or waiting, where Python
  // stops them safely.
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  // A thread that left its op just before the flag was set needs a moment to get back into Python (and on
  // to its next op, where it parks): wait until no thread has been inside an op for a while.
  auto quiet_since = Clock::now();
  while (Clock::now() - start < std::chrono::seconds(30)) {
    const auto now = Clock::now();
    if (g_in_op.load() > 0) quiet_since = now;
    else if (now - quiet_since > std::chrono::milliseconds(20)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace torchtpu::runtime
