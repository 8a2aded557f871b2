// Completion events of executions not yet known to be finished, per device, so synchronize() waits for
// all queued work: the CPU plugin may run independent programs out of order, so the last result alone
// does not tell that everything before it is done.
#include <deque>
#include <mutex>
#include <unordered_map>

#include "runtime/buffer.h"
#include "runtime/error.h"
#include "runtime/pjrt_api.h"

namespace torchtpu::runtime {
namespace {

std::mutex& pending_mutex() {
  static std::mutex m;
  return m;
}
std::unordered_map<int, std::deque<PJRT_Event*>>& pending() {
  static std::unordered_map<int, std::deque<PJRT_Event*>> events;
  return events;
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
  const PJRT_Api* api = plugin().api;
  std::lock_guard<std::mutex> lock(pending_mutex());
  std::deque<PJRT_Event*>& events = pending()[device];
  // Drop finished work from the front (keeping any that failed, so synchronize reports the error), so
  // the list stays short in a long eager loop.
  while (!events.empty() && is_ready(api, events.front())) {
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
  events.push_back(done);
}

void synchronize(int device) {
  const PJRT_Api* api = plugin().api;
  std::deque<PJRT_Event*> events;
  {
    std::lock_guard<std::mutex> lock(pending_mutex());
    events.swap(pending()[device]);
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
