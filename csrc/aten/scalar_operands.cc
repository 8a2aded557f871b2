#include "aten/scalar_operands.h"

#include <array>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "aten/metrics.h"
#include "aten/storage.h"

namespace torchtpu::aten {
namespace {

// Values worth remembering per thread; past this the cache starts over (a changing value, such as Adam's
// bias correction, must not grow it without bound).
constexpr size_t kMaxCachedScalars = 1024;

// The value's bytes, up to 16 (a complex128 has two words), zero-padded.
struct ScalarKey {
  int device;
  DType dtype;
  std::array<uint64_t, 2> bits;
  bool operator==(const ScalarKey& o) const { return device == o.device && dtype == o.dtype && bits == o.bits; }
};
struct ScalarKeyHash {
  size_t operator()(const ScalarKey& k) const {
    return std::hash<uint64_t>()(k.bits[0] ^ (k.bits[1] * 0x9e3779b97f4a7c15ULL)) ^ (static_cast<size_t>(k.dtype) << 8) ^
           static_cast<size_t>(k.device);
  }
};

// Set when the process starts to exit. A thread that ends after that (torch joins its autograd threads
// during shutdown) must not free device buffers: the runtime may already be gone.
std::atomic<bool> exiting{false};

using ScalarCache = std::unordered_map<ScalarKey, runtime::BufferPtr, ScalarKeyHash>;

struct ThreadScalarCache {
  ScalarCache values;
  ~ThreadScalarCache() {
    if (!exiting.load()) return;
    for (auto& entry : values) new runtime::BufferPtr(std::move(entry.second));  // left for the OS to reclaim
  }
};

ScalarCache& thread_cache() {
  static const bool registered = [] { return std::atexit([] { exiting.store(true); }) == 0; }();
  (void)registered;
  thread_local ThreadScalarCache cache;
  return cache.values;
}

runtime::BufferPtr upload_bytes(DType dtype, const void* bytes, size_t size, std::vector<int64_t> dims, int device) {
  // The plugin reads the host bytes asynchronously; the copy lives until it says it is done.
  auto host = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(bytes),
                                                     static_cast<const uint8_t*>(bytes) + size);
  record_transfer(/*to_device=*/true, size);
  return runtime::upload(host->data(), dtype, dims, device, [host]() mutable { host.reset(); });
}

}  // namespace

runtime::BufferPtr scalar_buffer(DType dtype, const void* bytes, size_t size, int device) {
  ScalarCache& cache = thread_cache();
  ScalarKey key{device, dtype, {0, 0}};
  TORCH_INTERNAL_ASSERT(size <= sizeof key.bits, "a scalar operand of ", size, " bytes");
  std::memcpy(key.bits.data(), bytes, size);
  auto it = cache.find(key);
  if (it != cache.end()) return it->second;
  if (cache.size() >= kMaxCachedScalars) cache.clear();
  runtime::BufferPtr buffer = upload_bytes(dtype, bytes, size, {}, device);
  cache.emplace(key, buffer);
  return buffer;
}

runtime::BufferPtr scalar_buffer(const c10::IValue& value, int device) {
  if (value.isDouble()) {
    const double v = value.toDouble();
    return scalar_buffer(DType::kF64, &v, sizeof v, device);
  }
  if (value.isBool()) {
    const bool v = value.toBool();
    return scalar_buffer(DType::kBool, &v, sizeof v, device);
  }
  if (value.isComplexDouble()) {
    const c10::complex<double> v = value.toComplexDouble();
    return scalar_buffer(DType::kC128, &v, sizeof v, device);
  }
  const int64_t v = value.toInt();
  return scalar_buffer(DType::kI64, &v, sizeof v, device);
}

runtime::BufferPtr scalar_buffer(const at::Tensor& cpu_scalar, int device) {
  return scalar_buffer(to_dtype(cpu_scalar.scalar_type()), cpu_scalar.const_data_ptr(), cpu_scalar.element_size(),
                       device);
}

std::vector<double> scalar_list_values(const c10::IValue& list) {
  std::vector<double> values;
  for (const c10::IValue& v : list.toList()) {
    values.push_back(v.isDouble() ? v.toDouble() : static_cast<double>(v.isBool() ? v.toBool() : v.toInt()));
  }
  return values;
}

runtime::BufferPtr scalar_list_buffer(const c10::IValue& list, int device) {
  const std::vector<double> values = scalar_list_values(list);
  return upload_bytes(DType::kF64, values.data(), values.size() * sizeof(double), {static_cast<int64_t>(values.size())},
                      device);
}

runtime::BufferPtr int_list_buffer(const c10::IValue& list, int device) {
  const std::vector<int64_t> values = list.toIntVector();
  const int64_t count = static_cast<int64_t>(values.size());
  return upload_bytes(DType::kI64, values.data(), values.size() * sizeof(int64_t), {count}, device);
}

}  // namespace torchtpu::aten
