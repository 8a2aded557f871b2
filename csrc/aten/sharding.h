// Sharded tensors (single-controller SPMD, docs/distributed.md): a storage whose buffer is split over all
// devices. Programs that read or write one are partitioned over all devices as partition_program says.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>
#include <string>
#include <vector>

#include "runtime/executable.h"
#include "runtime/sharding.h"

namespace torchtpu::aten {

// Moves the values of `tensor` (a tpu tensor covering its whole storage, row-major) into a new buffer split as
// `sharding` says over the tensor's dims; the tensor keeps its identity, shape and values.
void shard_storage(const at::Tensor& tensor, runtime::ShardingPtr sharding);

// How a partitioned program's signature is annotated: mhlo.sharding text (runtime/sharding.h).
struct ProgramShardings {
  runtime::Partitioning partitioning;
  std::vector<std::string> parameters;  // how each parameter arrives
  std::vector<std::string> results;     // how each result leaves; empty: the partitioner's choice
};

// The SPMD policy of every driver (strict op programs and fused traces): a program that reads or writes a
// sharded storage is partitioned over all devices, otherwise (nullopt) not. Its sharded parameters arrive as
// they are (`parameters`, null: on one device), every other parameter replicated; a result for a storage that
// was sharded keeps that sharding (`kept_results`, null: none), the value-check state (`check_state_result`)
// stays whole on every device, and the partitioner picks the other results' shardings.
std::optional<ProgramShardings> partition_program(const std::vector<const runtime::Sharding*>& parameters,
                                                  const std::vector<const runtime::Sharding*>& kept_results,
                                                  std::optional<size_t> check_state_result);

// Whether a result of a partitioned program may take over its parameter's buffer: only where it keeps the
// sharding that buffer has (any other result may come back split another way).
bool may_donate(const runtime::Sharding* parameter, const runtime::Sharding* kept_result);

}  // namespace torchtpu::aten
