// Completion events of executions not yet known to be finished, per device, so synchronize() waits for
// all queued work: the CPU plugin may run independent programs out of order, so the last result alone
// does not tell that everything before it is done.
#include <deque>
#include <memory>
#include <vector>
#include <mutex>

#include "runtime/buffer.h"
#include "runtime/error.h"
#include "runtime/pjrt_api.h"

namespace torchtpu::runtime {
namespace {

// Finished events are dropped in batches: polling after every execution would cost a plugin call per op.
constexpr size_t kPollEvery = 64;

// One device's queued executions. Each device has its own lock, so threads driving different devices
// never meet here.
struct PendingDevice {
  std::mutex mutex;
  std::deque<PJRT_Event*> events;
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

}  // namespace

void track_execution(int device, PJRT_Event* done) {
  PendingDevice& queue = pending(device);
  std::lock_guard<std::mutex> lock(queue.mutex);
  std::deque<PJRT_Event*>& events = queue.events;
  events.push_back(done);
  if (events.size() % kPollEvery != 0) return;
  // Drop finished work from the front (keeping any that failed, so synchronize reports the error), so
  // the list stays short in a long eager loop.
  const PJRT_Api* api = plugin().api;
  while (events.size() > 1 && is_ready(api, events.front())) {
    PJRT_Event_Error_Args error_args{};
    error_args.struct_size = PJRT_Event_Error_Args_STRUCT_SIZE;
    error_args.event = events.front();
    PJRT_Error* error = api->PJRT_Event_Error(&error_args);
    if (error != nullptr) {
      destroy_error(api, error);
      break;
    }
    destroy_event(api, events.front());
    events.pop_front();
  }
}

void synchronize(int device) {
  const PJRT_Api* api = plugin().api;
  std::deque<PJRT_Event*> events;
  {
    PendingDevice& queue = pending(device);
    std::lock_guard<std::mutex> lock(queue.mutex);
    events.swap(queue.events);
  }
  // Await every event even after a failure, so none leaks; then report the first failure.
  std::string first_error;
  for (PJRT_Event* event : events) {
    try {
      await_event(api, event, "execution");
    } catch (const std::exception& e) {
      if (first_error.empty()) first_error = e.what();
    }
  }
  if (!first_error.empty()) throw PjrtError(13, first_error);
}

}  // namespace torchtpu::runtime
