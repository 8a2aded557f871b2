#include "aten/generator.h"

#include <ATen/core/GeneratorForPrivateuseone.h>
#include <ATen/EmptyTensor.h>
#include <c10/core/GeneratorImpl.h>
#include <c10/core/TensorImpl.h>

#include <cstring>
#include <deque>
#include <mutex>

#include "aten/storage.h"
#include "runtime/plugin.h"

namespace torchtpu::aten {
namespace {

constexpr uint64_t kDefaultSeed = 67280421310721ULL;  // torch's default_rng_seed_val

class TpuGeneratorImpl final : public c10::GeneratorImpl {
 public:
  explicit TpuGeneratorImpl(c10::DeviceIndex device)
      : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                           c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)) {}

  void set_current_seed(uint64_t seed) override {
    seed_ = seed;
    offset_ = 0;
  }
  void set_offset(uint64_t offset) override { offset_ = offset; }
  uint64_t get_offset() const override { return offset_; }
  uint64_t current_seed() const override { return seed_; }
  uint64_t seed() override {
    const uint64_t fresh = c10::detail::getNonDeterministicRandom();
    set_current_seed(fresh);
    return fresh;
  }
  // State: 16 bytes, seed then offset (little endian), as a CPU uint8 tensor.
  void set_state(const c10::TensorImpl& state) override {
    // CPU's words for a state of another type or device (a checkpoint loaded with map_location="tpu").
    TORCH_CHECK_TYPE(state.layout() == c10::kStrided && state.device().is_cpu() &&
                         state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                     "RNG state must be a torch.ByteTensor");
    TORCH_CHECK(state.numel() == 16 && state.is_contiguous(),
                "a tpu RNG state is 16 contiguous bytes (seed and offset), got ", state.numel(), " bytes",
                state.is_contiguous() ? "" : " (not contiguous)");
    const auto* bytes = static_cast<const uint8_t*>(state.data());
    std::memcpy(&seed_, bytes, 8);
    std::memcpy(&offset_, bytes + 8, 8);
  }
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override {
    // Made without the dispatcher, as CPU's generator makes its state: under a torch.func transform a
    // dispatched factory returns a wrapper without storage (checkpoint saves the state inside grad()).
    at::Tensor state = at::detail::empty_cpu({16}, at::kByte, /*pin_memory=*/false, std::nullopt);
    std::memcpy(state.mutable_data_ptr(), &seed_, 8);
    std::memcpy(static_cast<uint8_t*>(state.mutable_data_ptr()) + 8, &offset_, 8);
    return state.getIntrusivePtr();
  }
  std::array<uint64_t, 2> advance(uint64_t draws) {
    std::array<uint64_t, 2> state{seed_, offset_};
    offset_ += draws;
    return state;
  }

 private:
  TpuGeneratorImpl* clone_impl() const override {
    auto* copy = new TpuGeneratorImpl(device().index());
    copy->seed_ = seed_;
    copy->offset_ = offset_;
    return copy;
  }
  uint64_t seed_ = kDefaultSeed;
  uint64_t offset_ = 0;
};

}  // namespace

at::Generator make_generator(c10::DeviceIndex device) {
  return at::make_generator<TpuGeneratorImpl>(device < 0 ? 0 : device);
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::mutex mutex;
  static std::deque<at::Generator> generators;  // deque: references stay valid as it grows
  std::lock_guard<std::mutex> lock(mutex);
  if (generators.empty()) {
    for (int i = 0; i < runtime::device_count(); ++i) generators.push_back(make_generator(static_cast<c10::DeviceIndex>(i)));
  }
  const int index = device < 0 ? 0 : device;
  TORCH_CHECK(index < static_cast<int>(generators.size()), "tpu device index ", index, " is out of range (",
              generators.size(), " devices)");
  return generators[static_cast<size_t>(index)];
}

runtime::BufferPtr next_rng_state(const std::optional<at::Generator>& generator, c10::DeviceIndex device,
                                  int64_t draws) {
  at::Generator gen = generator.has_value() && generator->defined() ? *generator : default_generator(device);
  std::array<uint64_t, 2> seed_offset;
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    auto* impl = dynamic_cast<TpuGeneratorImpl*>(gen.unsafeGetGeneratorImpl());
    TORCH_CHECK(impl != nullptr, "expected a tpu generator, got one for ", gen.device());
    seed_offset = impl->advance(static_cast<uint64_t>(draws));
  }
  at::Tensor host = at::detail::empty_cpu({2}, at::kUInt64, /*pin_memory=*/false, std::nullopt);
  std::memcpy(host.mutable_data_ptr(), seed_offset.data(), sizeof(seed_offset));
  return upload_contiguous(host, device);
}

}  // namespace torchtpu::aten
