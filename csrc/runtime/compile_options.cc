#include "runtime/compile_options.h"

#include <cstdint>

namespace torchtpu::runtime {
namespace {

// Protobuf wire format: a key is (field_number << 3) | wire_type; wire type 0 is varint, 2 is
// length-delimited. Negative int64 values are encoded as their 64-bit two's complement.
void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_varint_field(std::string& out, int field, int64_t value) {
  put_varint(out, static_cast<uint64_t>(field) << 3);
  put_varint(out, static_cast<uint64_t>(value));
}

void put_bytes_field(std::string& out, int field, const std::string& bytes) {
  put_varint(out, (static_cast<uint64_t>(field) << 3) | 2);
  put_varint(out, bytes.size());
  out += bytes;
}

// Field numbers from xla/pjrt/proto/compile_options.proto.
constexpr int kBuildDeviceOrdinal = 1;
constexpr int kBuildNumReplicas = 4;
constexpr int kBuildNumPartitions = 5;
constexpr int kBuildUseSpmdPartitioning = 6;
constexpr int kBuildAllowShardingPropagationToOutput = 12;
constexpr int kOptionsExecutableBuildOptions = 3;
constexpr int kOptionsCompilePortableExecutable = 4;

}  // namespace

std::string compile_options_proto(bool portable, int num_replicas, int num_partitions,
                                  const std::vector<bool>& free_result_shardings) {
  std::string build;
  put_varint_field(build, kBuildDeviceOrdinal, -1);  // -1: not bound to a device ordinal
  put_varint_field(build, kBuildNumReplicas, num_replicas);
  put_varint_field(build, kBuildNumPartitions, num_partitions);
  if (num_partitions > 1) {
    put_varint_field(build, kBuildUseSpmdPartitioning, 1);
    std::string packed;  // one bool per result; a single entry applies to all of them
    if (free_result_shardings.empty()) packed.push_back(1);
    for (bool free : free_result_shardings) packed.push_back(free ? 1 : 0);
    put_bytes_field(build, kBuildAllowShardingPropagationToOutput, packed);
  }
  std::string options;
  put_bytes_field(options, kOptionsExecutableBuildOptions, build);
  if (portable) put_varint_field(options, kOptionsCompilePortableExecutable, 1);
  return options;
}

}  // namespace torchtpu::runtime
