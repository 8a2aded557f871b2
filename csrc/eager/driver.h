// Drivers decide when a program runs and whether the caller waits; nothing else.
//
// strict (default): each op's program is enqueued at once and runs asynchronously.
// debug (TORCHTPU_SYNC=1): each op waits for its results, so an error points at the op that caused it.
#pragma once

#include <vector>

#include "runtime/buffer.h"

namespace torchtpu::eager {

enum class Mode { kStrict, kDebug };
Mode mode();
// Called with the outputs of every op execution.
void after_execute(const std::vector<runtime::BufferPtr>& outputs);

}  // namespace torchtpu::eager
