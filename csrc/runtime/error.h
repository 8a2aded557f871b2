// The exception types for everything the PJRT plugin, or the runtime around it, reports.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

namespace torchtpu::runtime {

// The absl status code names PJRT_Error_Code uses, so messages say which kind of failure a plugin reported.
inline const char* status_code_name(int code) {
  switch (code) {
    case 0: return "OK";
    case 1: return "CANCELLED";
    case 2: return "UNKNOWN";
    case 3: return "INVALID_ARGUMENT";
    case 4: return "DEADLINE_EXCEEDED";
    case 5: return "NOT_FOUND";
    case 6: return "ALREADY_EXISTS";
    case 7: return "PERMISSION_DENIED";
    case 8: return "RESOURCE_EXHAUSTED";
    case 9: return "FAILED_PRECONDITION";
    case 10: return "ABORTED";
    case 11: return "OUT_OF_RANGE";
    case 12: return "UNIMPLEMENTED";
    case 13: return "INTERNAL";
    case 14: return "UNAVAILABLE";
    case 15: return "DATA_LOSS";
    case 16: return "UNAUTHENTICATED";
  }
  return "UNKNOWN";
}

constexpr int kResourceExhausted = 8;

class PjrtError : public std::runtime_error {
 public:
  // `code` follows absl status codes (PJRT_Error_Code); 2 = UNKNOWN when the runtime itself fails.
  PjrtError(int code, const std::string& message) : std::runtime_error(message), code_(code) {}
  int code() const { return code_; }

 private:
  int code_;
};

// The device was used in a child forked after the parent had initialised it. Not a PjrtError on purpose:
// callers that treat a PjrtError as "this cached program is unusable, compile instead" must not swallow it.
class BadFork : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A device allocation failed (the plugin said RESOURCE_EXHAUSTED, or the request passed the limit set with
// set_memory_limit). Carries what the aten layer needs to raise torch.OutOfMemoryError the way CUDA does:
// the request and the device's live and peak bytes when it failed.
class OutOfMemory : public PjrtError {
 public:
  OutOfMemory(int device, int64_t requested, int64_t allocated, int64_t peak, int64_t limit, const std::string& detail)
      : PjrtError(kResourceExhausted, detail),
        device(device),
        requested(requested),
        allocated(allocated),
        peak(peak),
        limit(limit) {}
  int device;
  int64_t requested;  // bytes the failed call would have added; -1 when unknown
  int64_t allocated;  // bytes in live buffers on the device when it failed
  int64_t peak;       // high-water mark since the last reset
  int64_t limit;      // the per-process limit, -1 when none is set
};

}  // namespace torchtpu::runtime
