// Sharded tensors (single-controller SPMD, docs/distributed.md): a storage whose buffer is split over all
// devices. Ops that read or write one run as partitioned programs (aten/op_build.cc annotate_shardings).
#pragma once

#include <ATen/core/Tensor.h>

#include "runtime/sharding.h"

namespace torchtpu::aten {

// Moves the values of `tensor` (a tpu tensor covering its whole storage, row-major) into a new buffer split as
// `sharding` says over the tensor's dims; the tensor keeps its identity, shape and values.
void shard_storage(const at::Tensor& tensor, runtime::ShardingPtr sharding);

}  // namespace torchtpu::aten
