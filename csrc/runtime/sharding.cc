#include "runtime/sharding.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <numeric>
#include <stdexcept>

namespace torchtpu::runtime {
namespace {

// Reads protobuf wire format: just enough to walk a message's fields (varints, length-delimited, fixed).
class WireReader {
 public:
  explicit WireReader(std::string_view bytes) : bytes_(bytes) {}
  bool done() const { return pos_ >= bytes_.size(); }
  // The next field's number and wire type.
  std::pair<int, int> key() {
    const uint64_t k = varint();
    return {static_cast<int>(k >> 3), static_cast<int>(k & 7)};
  }
  uint64_t varint() {
    uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= bytes_.size()) throw std::runtime_error("truncated protobuf varint");
      const auto byte = static_cast<uint8_t>(bytes_[pos_++]);
      value |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (byte < 0x80) return value;
    }
    throw std::runtime_error("malformed protobuf varint");
  }
  std::string_view bytes() {
    const uint64_t n = varint();
    if (n > bytes_.size() - pos_) throw std::runtime_error("truncated protobuf field");
    std::string_view field = bytes_.substr(pos_, n);
    pos_ += n;
    return field;
  }
  void skip(int wire_type) {
    switch (wire_type) {
      case 0: varint(); return;
      case 1: pos_ += 8; return;
      case 2: bytes(); return;
      case 5: pos_ += 4; return;
      default: throw std::runtime_error("unsupported protobuf wire type " + std::to_string(wire_type));
    }
  }
  // A repeated integer field, packed (wire type 2) or one element (wire type 0).
  void append_ints(int wire_type, std::vector<int64_t>& out) {
    if (wire_type == 0) {
      out.push_back(static_cast<int64_t>(varint()));
      return;
    }
    WireReader packed(bytes());
    while (!packed.done()) out.push_back(static_cast<int64_t>(packed.varint()));
  }

 private:
  std::string_view bytes_;
  size_t pos_ = 0;
};

// Field numbers of xla.OpSharding (xla/xla_data.proto) and its Type enum.
enum OpShardingField {
  kType = 1,
  kTileAssignmentDimensions = 3,
  kTileAssignmentDevices = 4,
  kTupleShardings = 5,
  kReplicateOnLastTileDim = 6,
  kLastTileDims = 8,
  kIotaReshapeDims = 9,
  kIotaTransposePerm = 10,
};
enum OpShardingType { kReplicated = 0, kMaximal = 1, kTuple = 2, kOther = 3, kManual = 4 };
constexpr int kHloModuleSpmdOutputSharding = 12;  // xla.HloModuleProto

struct OpShardingFields {
  int64_t type = kReplicated;
  std::vector<int64_t> tile_dims, devices, iota_reshape, iota_perm, last_tile_dims;
  bool replicate_last = false;
  std::vector<std::string_view> tuple;
};

OpShardingFields read_op_sharding(std::string_view proto) {
  OpShardingFields f;
  WireReader r(proto);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    switch (field) {
      case kType: f.type = static_cast<int64_t>(r.varint()); break;
      case kTileAssignmentDimensions: r.append_ints(wire, f.tile_dims); break;
      case kTileAssignmentDevices: r.append_ints(wire, f.devices); break;
      case kTupleShardings: f.tuple.push_back(r.bytes()); break;
      case kReplicateOnLastTileDim: f.replicate_last = r.varint() != 0; break;
      case kLastTileDims: r.append_ints(wire, f.last_tile_dims); break;
      case kIotaReshapeDims: r.append_ints(wire, f.iota_reshape); break;
      case kIotaTransposePerm: r.append_ints(wire, f.iota_perm); break;
      default: r.skip(wire);
    }
  }
  return f;
}

// The device list of an iota tile assignment: iota(prod(reshape)) reshaped to `reshape`, transposed by
// `perm`, flattened.
std::vector<int64_t> iota_devices(const std::vector<int64_t>& reshape, const std::vector<int64_t>& perm) {
  const size_t rank = reshape.size();
  std::vector<int64_t> strides(rank, 1);
  for (size_t d = rank; d-- > 1;) strides[d - 1] = strides[d] * reshape[d];
  std::vector<int64_t> out_dims(rank);
  for (size_t d = 0; d < rank; ++d) out_dims[d] = reshape[static_cast<size_t>(perm[d])];
  const int64_t total = std::accumulate(reshape.begin(), reshape.end(), int64_t{1}, std::multiplies<>());
  std::vector<int64_t> devices;
  devices.reserve(static_cast<size_t>(total));
  std::vector<int64_t> index(rank, 0);
  for (int64_t n = 0; n < total; ++n) {
    int64_t source = 0;
    for (size_t d = 0; d < rank; ++d) source += index[d] * strides[static_cast<size_t>(perm[d])];
    devices.push_back(source);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < out_dims[d]) break;
      index[d] = 0;
    }
  }
  return devices;
}

int64_t intern(const Sharding& sharding) {
  static std::mutex mutex;
  static std::vector<Sharding>* known = new std::vector<Sharding>;  // never freed: ids outlive statics
  std::lock_guard<std::mutex> lock(mutex);
  for (size_t i = 0; i < known->size(); ++i) {
    if ((*known)[i] == sharding) return static_cast<int64_t>(i) + 1;
  }
  known->push_back(sharding);
  return static_cast<int64_t>(known->size());
}

}  // namespace

Sharding::Sharding(std::vector<int64_t> tiles, int64_t replicas, std::vector<int64_t> devices)
    : tiles_(std::move(tiles)), replicas_(replicas), devices_(std::move(devices)) {
  const int64_t positions =
      std::accumulate(tiles_.begin(), tiles_.end(), replicas_, std::multiplies<>());
  std::vector<int64_t> sorted = devices_;
  std::sort(sorted.begin(), sorted.end());
  bool permutation = replicas_ >= 1 && static_cast<int64_t>(sorted.size()) == positions;
  for (size_t i = 0; permutation && i < sorted.size(); ++i) permutation = sorted[i] == static_cast<int64_t>(i);
  if (!permutation) {
    throw std::invalid_argument("a sharding's devices must list each of its " + std::to_string(positions) +
                                " tile positions' devices once");
  }
  id_ = intern(*this);
}

Sharding Sharding::replicated(int64_t rank, int64_t num_devices) {
  std::vector<int64_t> devices(static_cast<size_t>(num_devices));
  std::iota(devices.begin(), devices.end(), int64_t{0});
  return Sharding(std::vector<int64_t>(static_cast<size_t>(rank), 1), num_devices, std::move(devices));
}

Sharding Sharding::from_op_sharding(std::string_view proto, int64_t rank, int64_t num_devices) {
  const OpShardingFields f = read_op_sharding(proto);
  if (f.type == kReplicated) return replicated(rank, num_devices);
  if (f.type != kOther) {
    throw std::runtime_error("the partitioner gave a program result a sharding of kind " + std::to_string(f.type) +
                             " (maximal, tuple or manual), which tpu tensors cannot hold");
  }
  std::vector<int64_t> tiles = f.tile_dims;
  int64_t replicas = 1;
  // Trailing tile dims beyond the array's rank are subgroups: replication is the only kind an array holds.
  const size_t extra = tiles.size() > static_cast<size_t>(rank) ? tiles.size() - static_cast<size_t>(rank) : 0;
  for (int64_t kind : f.last_tile_dims) {
    if (kind != kReplicated) throw std::runtime_error("the partitioner gave a program result a manual subgroup");
  }
  if (extra != (f.replicate_last ? 1u : 0u) + f.last_tile_dims.size()) {
    throw std::runtime_error("a program result's sharding has " + std::to_string(tiles.size()) +
                             " tile dims for an array of rank " + std::to_string(rank));
  }
  for (size_t i = 0; i < extra; ++i) {
    replicas *= tiles.back();
    tiles.pop_back();
  }
  std::vector<int64_t> devices = f.devices;
  if (devices.empty()) {
    std::vector<int64_t> perm = f.iota_perm;
    if (perm.empty()) {
      perm.resize(f.iota_reshape.size());
      std::iota(perm.begin(), perm.end(), int64_t{0});
    }
    devices = iota_devices(f.iota_reshape, perm);
  }
  return Sharding(std::move(tiles), replicas, std::move(devices));
}

bool Sharding::is_replicated() const {
  return std::all_of(tiles_.begin(), tiles_.end(), [](int64_t t) { return t == 1; });
}

std::vector<int64_t> Sharding::shard_dims(const std::vector<int64_t>& dims) const {
  std::vector<int64_t> out(dims.size());
  for (size_t d = 0; d < dims.size(); ++d) out[d] = (dims[d] + tiles_[d] - 1) / tiles_[d];
  return out;
}

std::vector<int64_t> Sharding::tile_of(int64_t device) const {
  const auto it = std::find(devices_.begin(), devices_.end(), device);
  if (it == devices_.end()) throw std::out_of_range("device " + std::to_string(device) + " holds no tile");
  int64_t linear = (it - devices_.begin()) / replicas_;
  std::vector<int64_t> coords(tiles_.size());
  for (size_t d = tiles_.size(); d-- > 0;) {
    coords[d] = linear % tiles_[d];
    linear /= tiles_[d];
  }
  return coords;
}

std::string Sharding::mhlo() const {
  if (is_replicated()) return "{replicated}";
  std::string text = "{devices=[";
  for (size_t d = 0; d < tiles_.size(); ++d) text += (d ? "," : "") + std::to_string(tiles_[d]);
  if (replicas_ > 1) text += "," + std::to_string(replicas_);
  text += "]";
  for (size_t i = 0; i < devices_.size(); ++i) text += (i ? "," : "") + std::to_string(devices_[i]);
  if (replicas_ > 1) text += " last_tile_dim_replicate";
  return text + "}";
}

std::vector<ShardingPtr> output_shardings_from_hlo_module(std::string_view module_proto, bool with_config,
                                                          const std::vector<int64_t>& ranks, int64_t num_devices) {
  if (with_config) {  // xla.HloModuleProtoWithConfig: the module is field 1
    WireReader wrapper(module_proto);
    std::string_view module;
    while (!wrapper.done()) {
      const auto [field, wire] = wrapper.key();
      if (field == 1 && wire == 2) module = wrapper.bytes();
      else wrapper.skip(wire);
    }
    module_proto = module;
  }
  std::string_view output;
  WireReader r(module_proto);
  while (!r.done()) {
    const auto [field, wire] = r.key();
    if (field == kHloModuleSpmdOutputSharding && wire == 2) output = r.bytes();
    else r.skip(wire);
  }
  std::vector<ShardingPtr> shardings;
  // A program without results (a fused trace whose results were all freed) still reports one sharding.
  if (ranks.empty()) return shardings;
  const OpShardingFields top = read_op_sharding(output);
  std::vector<std::string_view> entries = top.type == kTuple ? top.tuple : std::vector<std::string_view>{output};
  if (top.type == kTuple && entries.empty()) entries.assign(ranks.size(), std::string_view());  // all replicated
  if (entries.size() != ranks.size()) {
    throw std::runtime_error("the partitioned program reports " + std::to_string(entries.size()) +
                             " output shardings for " + std::to_string(ranks.size()) + " results");
  }
  for (size_t i = 0; i < ranks.size(); ++i) {
    shardings.push_back(std::make_shared<const Sharding>(Sharding::from_op_sharding(entries[i], ranks[i], num_devices)));
  }
  return shardings;
}

}  // namespace torchtpu::runtime
