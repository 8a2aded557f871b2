// Drivers decide when a program runs and whether the caller waits; nothing else.
//
// strict (default): each op's program is enqueued at once and runs asynchronously.
// debug (TORCHTPU_SYNC=1): each op waits for its results, so an error points at the op that caused it.
#pragma once

#include <vector>

#include "runtime/buffer.h"
#include "runtime/executable.h"

namespace torchtpu::eager {

enum class Mode { kStrict, kDebug };
Mode mode();
// Runs one op program now (see runtime::Executable::execute for `kept`); in debug mode waits for it, so an
// execution error surfaces at the op that caused it.
std::vector<runtime::BufferPtr> execute(const runtime::Executable& executable, int device,
                                        const std::vector<const runtime::Buffer*>& arguments,
                                        const std::vector<int64_t>& kept);

}  // namespace torchtpu::eager
