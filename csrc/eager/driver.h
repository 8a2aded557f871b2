// Drivers decide when a program runs and whether the caller waits; nothing else.
//
// strict (default): each op's program is enqueued at once and runs asynchronously.
// debug: each op waits for its results, so an error points at the op that caused it.
// fused: ops are recorded and run as one program at the next sync point (aten/fused.h).
// TORCHTPU_EAGER_MODE=debug|strict|fused picks the mode at start (TORCHTPU_SYNC=1 or
// TORCHTPU_LAUNCH_BLOCKING=1 means debug);
// torchtpu.eager_mode() changes it at run time.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "runtime/buffer.h"
#include "runtime/executable.h"

namespace torchtpu::eager {

enum class Mode { kStrict, kDebug, kFused };
// The calling thread's mode: its own if set, else the process's.
Mode mode();
void set_mode(Mode mode);
// A mode for the calling thread alone, or none (the process's again). Compiled graphs record in fused mode
// this way: switching the process's mode would switch it under other threads, which may be switching too.
void set_thread_mode(std::optional<Mode> mode);
std::optional<Mode> thread_mode_set();
// "debug", "strict" or "fused"; throws std::invalid_argument for anything else.
Mode parse_mode(const std::string& name);
const char* mode_name(Mode mode);
// Runs one op program now (see runtime::Executable::execute for `kept`); in debug mode waits for it, so an
// execution error surfaces at the op that caused it.
std::vector<runtime::BufferPtr> execute(const runtime::Executable& executable, int device,
                                        const std::vector<const runtime::Buffer*>& arguments,
                                        const std::vector<int64_t>& kept);

}  // namespace torchtpu::eager
