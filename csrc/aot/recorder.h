// Captures every distinct program the process builds, with the op that built it, so that torchtpu.aot can
// compile exactly what a workload emits for a TPU topology. Off by default; while off, record() is one
// relaxed atomic load, and it is only reached when a program is built (a cache miss), never on the hot path.
#pragma once

#include <string>
#include <vector>

namespace torchtpu::aot {

struct RecordedProgram {
  std::string text;              // the StableHLO module as compiled
  std::vector<std::string> ops;  // every op that built this exact text, in order of first build
  int builds = 0;                // how many times it was built while recording (after cache evictions > 1)
  int partitions = 1;            // an SPMD program's partition count (the devices it spans)
};

void set_recording(bool on);
bool recording();
// Called by every driver right after it emits a program (aten/op_build.cc for strict ops, aten/fused.cc for
// fused and compiled graphs), and by torchtpu.kernels for a kernel's TPU build. `op` names what produced
// the program; `partitions` its partition count (SPMD, docs/distributed.md).
void record(const std::string& op, const std::string& text, int partitions = 1);
// The distinct programs recorded so far, in order of first build.
std::vector<RecordedProgram> recorded_programs();
// How many distinct programs are recorded (cheap: no copies; torchtpu.aot.report counts per op call with it).
size_t recorded_count();
void clear_recorded();

}  // namespace torchtpu::aot
