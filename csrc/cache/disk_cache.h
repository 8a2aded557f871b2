// Tier 2 of the program cache: compiled executables on disk, shared by every process of this user.
//
// A program's entry is named by a 128-bit hash of its StableHLO text and of everything else that shapes
// the compiled code: the plugin (its file's content hash, platform and PJRT API version), the compile
// options, the device count and XLA_FLAGS. The entry repeats that identity and checksums its payload, so a
// truncated, garbled or foreign file is a miss (with a warning), never a crash. Writes go to a temporary
// file renamed into place, so concurrent processes only ever see whole entries. Reads refresh an entry's
// modification time; when the directory grows past its bound, the least recently used entries go.
//
// Environment: TORCHTPU_CACHE_DIR (default $XDG_CACHE_HOME/torchtpu or ~/.cache/torchtpu),
// TORCHTPU_CACHE_MAX_BYTES (default 1 GiB), TORCHTPU_DISK_CACHE=0 to turn the disk cache off.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/executable.h"

namespace torchtpu::cache {

// The executable of `stablehlo`: loaded from disk when an entry exists, else compiled by the plugin and
// written to disk for the next process.
// A partitioned program's compile options are part of its entry's name.
std::unique_ptr<runtime::Executable> load_or_compile(const std::string& stablehlo,
                                                     std::vector<runtime::ArrayType> output_types,
                                                     std::vector<int64_t> aliased_inputs,
                                                     const runtime::Partitioning& partitioning = {});

// The executable of `stablehlo` when the disk holds a usable entry for it; null otherwise (or when the disk
// cache is off). Compiles nothing.
std::unique_ptr<runtime::Executable> load_cached(const std::string& stablehlo,
                                                 std::vector<runtime::ArrayType> output_types,
                                                 std::vector<int64_t> aliased_inputs,
                                                 const runtime::Partitioning& partitioning = {});

struct DiskCacheStats {
  bool enabled = false;
  std::string directory;
  int64_t hits = 0;       // programs loaded from disk by this process
  int64_t misses = 0;     // programs this process compiled (no usable entry)
  int64_t writes = 0;     // entries this process wrote
  int64_t rejected = 0;   // entries found but unusable (truncated, corrupt, another plugin build)
  int64_t evictions = 0;  // entries this process removed to respect the bound
  int64_t entries = 0;    // entries in the directory now
  int64_t bytes = 0;      // their total size
  int64_t max_bytes = 0;
};
DiskCacheStats disk_cache_stats();
// Removes every entry of the directory (all processes' entries).
void clear_disk_cache();

// Where warnings about unusable entries go (stderr until the extension routes them to Python warnings).
using WarningSink = void (*)(const std::string& message);
void set_warning_sink(WarningSink sink);

}  // namespace torchtpu::cache
