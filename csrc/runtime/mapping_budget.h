// Room in the process's memory map for the next compiled program.
//
// Each program the plugin compiles keeps a few memory mappings of JIT code (about five on XLA:CPU), and the
// kernel caps a process at vm.max_map_count mappings (65530 by default). When the plugin's JIT cannot map
// more, LLVM fails midway ("Cannot allocate memory") and leaves state that crashes the next C++ exception
// of the process. So every compile and load first makes room: when the count nears the cap, the program
// caches give back their least recently used programs.
#pragma once

#include <functional>
#include <stdexcept>

namespace torchtpu::runtime {

// Drops part of a cache's programs (their mappings go with the last holder).
void add_mapping_shrinker(std::function<void()> shrink);

// Called before a program is compiled or loaded. Throws TooManyMappings when even after shrinking the
// caches the process is at the cap (programs held elsewhere, or other code's mappings).
void make_room_for_a_program();

// Not a PjrtError on purpose: the disk cache treats a PjrtError while loading as a bad entry.
class TooManyMappings : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace torchtpu::runtime
