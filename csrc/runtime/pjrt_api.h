// Runtime-internal access to the loaded plugin. Only files in runtime/ include this header,
// so no PJRT type leaks into the rest of the code base.
#pragma once

#include <pjrt_c_api.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace torchtpu::runtime {

// The plugin's API table and client. Valid for the life of the process once loaded.
struct Plugin {
  const PJRT_Api* api = nullptr;
  PJRT_Client* client = nullptr;
  std::vector<PJRT_Device*> devices;  // addressable devices, index = torch device index
};

// Loads the plugin on first use (throws PjrtError when none can be loaded).
const Plugin& plugin();

// Turns a PJRT error into PjrtError (carrying the plugin's message and code) and frees it.
// A null error is success.
void check(const PJRT_Api* api, PJRT_Error* error, const char* what);

// Frees an error without reading it (destructors and callbacks, which must not throw). Null is fine.
void destroy_error(const PJRT_Api* api, PJRT_Error* error);

// A textual StableHLO module as a PJRT program. It points into `stablehlo`, which must outlive it.
inline PJRT_Program mlir_program(const std::string& stablehlo) {
  static const char kFormat[] = "mlir";
  PJRT_Program program{};
  program.struct_size = PJRT_Program_STRUCT_SIZE;
  program.code = const_cast<char*>(stablehlo.data());
  program.code_size = stablehlo.size();
  program.format = kFormat;
  program.format_size = sizeof(kFormat) - 1;
  return program;
}

// Destroys an event; the event must not be used afterwards.
void destroy_event(const PJRT_Api* api, PJRT_Event* event);

// Blocks until `event` is ready, destroys it, and throws if it carries an error.
void await_event(const PJRT_Api* api, PJRT_Event* event, const char* what);

// Hands the completion event of one execution of `program` (its name) on `device` to the pending-work
// list that synchronize() drains. Takes ownership of the event.
void track_execution(int device, PJRT_Event* done, std::shared_ptr<const std::string> program);

// Destroys the handle of a buffer an execution took over (donation) once every execution queued on `device`
// so far has finished. The plugin's destroy of a donated handle waits for the execution that took it, so
// destroying it at once would stall the calling thread until the device catches up; the handle owns no
// device memory any more, so keeping it a while costs nothing.
void destroy_after_queued_work(int device, PJRT_Buffer* donated);

// Like check(), but a RESOURCE_EXHAUSTED error becomes OutOfMemory naming `requested` bytes on `device`
// and the device's live and peak bytes.
void check_allocation(const PJRT_Api* api, PJRT_Error* error, const char* what, int device, int64_t requested);

// Rethrows the failure of an asynchronous execution on `device`. An allocation that failed inside it (the CPU
// plugin says INTERNAL "... Out of memory allocating N bytes", where a launch-time one is RESOURCE_EXHAUSTED)
// becomes OutOfMemory, so users catch torch.OutOfMemoryError as on CUDA.
[[noreturn]] void throw_execution_error(const PjrtError& error, int device);

// Throws OutOfMemory when `requested` more bytes would pass the limit set for `device` (set_memory_limit).
// Called before an execution or transfer starts, so a refused one leaves nothing half done.
void check_memory_limit(int device, int64_t requested);

// Where a thread other than the exiting one parks for good once prepare_exit() has run: before a call
// that starts device work and after a blocking wait. Never called with a lock held.
void exit_gate();

}  // namespace torchtpu::runtime
