// How one logical array is split over the client's devices (single-controller SPMD).
//
// The array is cut into a grid of tiles, `tiles[d]` along dimension d; each tile is held by `replicas`
// devices. `devices` lists the device of every (tile..., replica) position in row-major order, exactly
// XLA's tile assignment, so a Sharding prints as the `mhlo.sharding` a program parameter carries and is read
// back from the `OpSharding` protos XLA's partitioner reports for program results. A tile that does not
// divide its dimension evenly is padded at the end, as XLA pads it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace torchtpu::runtime {

class Sharding {
 public:
  // Throws std::invalid_argument when `devices` is not a permutation of 0..prod(tiles)*replicas-1.
  Sharding(std::vector<int64_t> tiles, int64_t replicas, std::vector<int64_t> devices);
  // Every device holds the whole array.
  static Sharding replicated(int64_t rank, int64_t num_devices);
  // From a serialized xla.OpSharding of an array of `rank` dims. Throws std::runtime_error for the kinds an
  // array result cannot have here (maximal, manual, tuple).
  static Sharding from_op_sharding(std::string_view proto, int64_t rank, int64_t num_devices);

  const std::vector<int64_t>& tiles() const { return tiles_; }
  int64_t replicas() const { return replicas_; }
  const std::vector<int64_t>& devices() const { return devices_; }
  int64_t num_devices() const { return static_cast<int64_t>(devices_.size()); }
  bool is_replicated() const;
  // The dims of each device's piece of an array of `dims` (padded where a tile does not divide).
  std::vector<int64_t> shard_dims(const std::vector<int64_t>& dims) const;
  // The grid coordinates of the tile `device` holds.
  std::vector<int64_t> tile_of(int64_t device) const;
  // The spelling of `mhlo.sharding`: "{replicated}" or "{devices=[2,1,2]0,1,2,3 last_tile_dim_replicate}".
  std::string mhlo() const;
  // A number equal for equal shardings (interned), for program keys.
  int64_t id() const { return id_; }
  bool operator==(const Sharding& other) const {
    return tiles_ == other.tiles_ && replicas_ == other.replicas_ && devices_ == other.devices_;
  }

 private:
  std::vector<int64_t> tiles_;
  int64_t replicas_;
  std::vector<int64_t> devices_;
  int64_t id_ = 0;
};
using ShardingPtr = std::shared_ptr<const Sharding>;

// The program results' shardings from a serialized optimized HloModuleProto (`with_config`: wrapped in an
// HloModuleProtoWithConfig, as the CPU plugin returns it): its spmd_output_sharding, a tuple with one entry
// per result, or one entry when the program has one result. `ranks` are the results'.
std::vector<ShardingPtr> output_shardings_from_hlo_module(std::string_view module_proto, bool with_config,
                                                          const std::vector<int64_t>& ranks, int64_t num_devices);

}  // namespace torchtpu::runtime
