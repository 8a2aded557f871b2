#include "aten/sharding.h"

#include <c10/util/Exception.h>

#include <algorithm>

#include "aten/device_error.h"
#include "aten/storage.h"
#include "runtime/buffer.h"
#include "runtime/error.h"
#include "runtime/plugin.h"

namespace torchtpu::aten {

void shard_storage(const at::Tensor& tensor, runtime::ShardingPtr sharding) {
  TORCH_CHECK(tensor.device().type() == c10::DeviceType::PrivateUse1, "shard: expected a tpu tensor, got one on ",
              tensor.device());
  TORCH_CHECK(tensor.is_contiguous() && tensor.storage_offset() == 0 &&
                  static_cast<size_t>(tensor.numel()) * tensor.element_size() == tensor.storage().nbytes(),
              "shard: the tensor must cover its whole storage in row-major order (a view cannot be sharded "
              "apart from its base); shard its base or a .contiguous() copy");
  TORCH_CHECK(static_cast<int64_t>(sharding->tiles().size()) == tensor.dim(), "shard: a sharding of ",
              sharding->tiles().size(), " dims for a tensor of ", tensor.dim());
  TORCH_CHECK(sharding->num_devices() == runtime::device_count(), "shard: the mesh has ", sharding->num_devices(),
              " devices but the process has ", runtime::device_count(),
              "; a mesh spans every tpu device (TORCHTPU_NUM_DEVICES sets how many the CPU plugin presents)");
  if (sharding->num_devices() == 1) return;  // one device holds the whole tensor already
  const at::Tensor host = download(tensor).contiguous();
  try {
    storage_handle(tensor).set_buffer(runtime::upload_sharded(host.const_data_ptr(), to_dtype(tensor.scalar_type()),
                                                              tensor.sizes().vec(), std::move(sharding)));
  } catch (const runtime::PjrtError& e) {
    throw_device_error("shard", e);
  }
}

std::optional<ProgramShardings> partition_program(const std::vector<const runtime::Sharding*>& parameters,
                                                  const std::vector<const runtime::Sharding*>& kept_results,
                                                  std::optional<size_t> check_state_result) {
  const auto sharded = [](const runtime::Sharding* s) { return s != nullptr; };
  if (std::none_of(parameters.begin(), parameters.end(), sharded) &&
      std::none_of(kept_results.begin(), kept_results.end(), sharded)) {
    return std::nullopt;
  }
  ProgramShardings s;
  s.partitioning.num_partitions = runtime::device_count();
  for (const runtime::Sharding* p : parameters) s.parameters.push_back(p ? p->mhlo() : "{replicated}");
  for (size_t r = 0; r < kept_results.size(); ++r) {
    s.results.push_back(kept_results[r] ? kept_results[r]->mhlo() : r == check_state_result ? "{replicated}" : "");
    s.partitioning.free_result_shardings.push_back(s.results.back().empty());
  }
  return s;
}

bool may_donate(const runtime::Sharding* parameter, const runtime::Sharding* kept_result) {
  return parameter != nullptr && kept_result != nullptr && *parameter == *kept_result;
}

}  // namespace torchtpu::aten
