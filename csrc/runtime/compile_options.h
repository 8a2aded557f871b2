// Hand-encoded xla.CompileOptionsProto: the plugin aborts on empty options, and pulling in protobuf for
// four fields is not worth a dependency.
#pragma once

#include <string>
#include <vector>

namespace torchtpu::runtime {

// Serialized CompileOptionsProto. `portable` asks for an executable that is not bound to a device, so one
// compile serves every device (the device is chosen at execute time). More than one partition turns on SPMD
// partitioning: the program's sharding annotations then split it across `num_partitions` chips (what a
// multi-chip topology needs); replicas run the same program on `num_replicas` chips.
// `free_result_shardings` (partitioned programs) says per result whether XLA's sharding propagation picks
// its sharding; a result the program annotates keeps the annotation. Empty: every result is free.
std::string compile_options_proto(bool portable, int num_replicas = 1, int num_partitions = 1,
                                  const std::vector<bool>& free_result_shardings = {});

}  // namespace torchtpu::runtime
