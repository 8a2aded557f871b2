// The tpu device as PyTorch sees it: device guard, accelerator hooks and the pinned host allocator.
#include <ATen/detail/PrivateUse1HooksInterface.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>

#include <cstdlib>
#include <map>
#include <mutex>

#include "aten/device.h"
#include "aten/device_error.h"
#include "aten/fused.h"
#include "aten/generator.h"
#include "aten/storage.h"
#include "aten/storage_ops.h"
#include "aten/value_checks.h"
#include "runtime/buffer.h"
#include "runtime/plugin.h"

namespace torchtpu::aten {
namespace {

thread_local c10::DeviceIndex t_current_device = 0;

c10::DeviceIndex checked_count() { return static_cast<c10::DeviceIndex>(runtime::device_count()); }

// A stream's device without an index (torch.Stream(device="tpu")) is the current device, as on CUDA.
c10::Device indexed(c10::Device device) {
  return device.has_index() ? device : c10::Device(c10::DeviceType::PrivateUse1, t_current_device);
}

struct TpuGuardImpl final : public c10::impl::DeviceGuardImplInterface {
  c10::DeviceType type() const override { return c10::DeviceType::PrivateUse1; }
  c10::Device exchangeDevice(c10::Device device) const override {
    c10::Device old = getDevice();
    setDevice(device);
    return old;
  }
  c10::Device getDevice() const override { return {c10::DeviceType::PrivateUse1, t_current_device}; }
  void setDevice(c10::Device device) const override {
    if (device.index() == t_current_device) return;
    check_device_index(device.index());
    t_current_device = device.index();
  }
  void uncheckedSetDevice(c10::Device device) const noexcept override { t_current_device = device.index(); }
  c10::Stream getStream(c10::Device device) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, indexed(device));
  }
  c10::Stream getDefaultStream(c10::Device device) const override {
    return c10::Stream(c10::Stream::DEFAULT, indexed(device));
  }
  // Every stream is the device's one in-order queue: a "new" stream (FSDP2 asks for a few) is that queue too,
  // so work on it is ordered after everything enqueued before, which is all a stream promises.
  c10::Stream getStreamFromGlobalPool(c10::Device device, bool /*high_priority*/) const override {
    return c10::Stream(c10::Stream::DEFAULT, indexed(device));
  }
  c10::Stream getNewStream(c10::Device device, int /*priority*/) const override {
    return c10::Stream(c10::Stream::DEFAULT, indexed(device));
  }
  c10::Stream exchangeStream(c10::Stream stream) const noexcept override {
    return c10::Stream(c10::Stream::DEFAULT, indexed(stream.device()));
  }
  c10::DeviceIndex deviceCount() const noexcept override {
    try {
      return checked_count();
    } catch (...) {
      return 0;
    }
  }
  // An event handle is a mark in its device's queue (runtime::QueueMark): recorded on any stream, it covers
  // everything launched on the device before it, fused ops recorded so far included (they run first).
  // Waiting on one from a stream orders nothing more, as every stream is the one queue. c10::Event checks
  // the timing flags and that both were recorded and reached before it calls elapsedTime.
  void record(void** event, const c10::Stream& stream, const c10::DeviceIndex device_index,
              const c10::EventFlag) const override {
    const c10::DeviceIndex stream_device = indexed(stream.device()).index();
    TORCH_CHECK(device_index == -1 || device_index == stream_device, "Event device index ",
                static_cast<int>(device_index), " does not match recording stream's device index ",
                static_cast<int>(stream_device), ".");
    flush_trace("event");
    auto* mark = new runtime::QueueMark(stream_device);
    delete static_cast<runtime::QueueMark*>(*event);  // recording again moves the event to the new point
    *event = mark;
  }
  void block(void*, const c10::Stream&) const override {}
  bool queryEvent(void* event) const override {
    return event == nullptr || static_cast<const runtime::QueueMark*>(event)->reached();
  }
  void synchronizeEvent(void* event) const override {
    if (event != nullptr) static_cast<const runtime::QueueMark*>(event)->wait();
  }
  double elapsedTime(void* start, void* end, const c10::DeviceIndex) const override {
    const auto* first = static_cast<const runtime::QueueMark*>(start);
    const auto* second = static_cast<const runtime::QueueMark*>(end);
    // Each device keeps its own queue and clock of finished work, so marks of two devices have no interval
    // (CUDA refuses the pair too).
    TORCH_CHECK(first->device() == second->device(), "elapsed_time: the events were recorded on different devices, tpu:",
                first->device(), " and tpu:", second->device());
    return std::chrono::duration<double, std::milli>(second->reached_at() - first->reached_at()).count();
  }
  void destroyEvent(void* event, const c10::DeviceIndex) const noexcept override {
    delete static_cast<runtime::QueueMark*>(event);
  }
  bool queryStream(const c10::Stream& stream) const override {
    flush_trace("event");
    return runtime::QueueMark(indexed(stream.device()).index()).reached();
  }
  void synchronizeStream(const c10::Stream& stream) const override {
    synchronize_device(indexed(stream.device()).index());
  }
  void synchronizeDevice(const c10::DeviceIndex index) const override { synchronize_device(index < 0 ? 0 : index); }
  // torch.accelerator.get_device_capability(): the dtypes a tpu tensor can hold.
  c10::DeviceCapability getDeviceCapability(c10::Device /*device*/) const override {
    c10::DeviceCapability capability;
    capability.capability_data.capability_bits = 0;
    auto holds = [](c10::ScalarType type) {
      try {
        to_dtype(type);
        return true;
      } catch (const c10::Error&) {
        return false;
      }
    };
#define TORCHTPU_MARK_SUPPORTED(_, name) \
  capability.capability_data.supported_scalar_types.has_##name = holds(c10::ScalarType::name);
    AT_FORALL_SCALAR_TYPES_WITH_COMPLEX_AND_QINTS(TORCHTPU_MARK_SUPPORTED)
#undef TORCHTPU_MARK_SUPPORTED
    return capability;
  }
};

// Pinned host memory: page-aligned allocations we can recognise (is_pinned) by address range.
class HostAllocator final : public c10::Allocator {
 public:
  c10::DataPtr allocate(size_t nbytes) override {
    void* data = nullptr;
    if (nbytes > 0) {
      TORCH_CHECK(posix_memalign(&data, 4096, nbytes) == 0, "out of host memory allocating ", nbytes, " pinned bytes");
      std::lock_guard<std::mutex> lock(mutex_);
      blocks_[reinterpret_cast<uintptr_t>(data)] = nbytes;
    }
    return {data, data, &HostAllocator::release, c10::Device(c10::DeviceType::CPU)};
  }
  c10::DeleterFnPtr raw_deleter() const override { return &HostAllocator::release; }
  void copy_data(void* dest, const void* src, std::size_t count) const override { default_copy_data(dest, src, count); }
  bool contains(const void* ptr) {
    const uintptr_t address = reinterpret_cast<uintptr_t>(ptr);
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = blocks_.upper_bound(address);
    if (it == blocks_.begin()) return false;
    --it;
    return address < it->first + it->second;
  }

 private:
  static void release(void* data);
  std::mutex mutex_;
  std::map<uintptr_t, size_t> blocks_;
};

HostAllocator& host_allocator() {
  static HostAllocator allocator;
  return allocator;
}

void HostAllocator::release(void* data) {
  if (data == nullptr) return;
  {
    HostAllocator& self = host_allocator();
    std::lock_guard<std::mutex> lock(self.mutex_);
    self.blocks_.erase(reinterpret_cast<uintptr_t>(data));
  }
  std::free(data);
}

struct TpuHooks final : public at::PrivateUse1HooksInterface {
  bool isBuilt() const override { return true; }
  // Does not load the plugin: creating the client here would make a later fork() unsafe (CUDA's answer
  // also comes without initialising the device).
  bool isAvailable() const override { return runtime::plugin_available(); }
  const at::Generator& getDefaultGenerator(c10::DeviceIndex device) const override {
    return default_generator(device < 0 ? t_current_device : device);
  }
  at::Generator getNewGenerator(c10::DeviceIndex device) const override {
    return make_generator(device < 0 ? t_current_device : device);
  }
  at::Device getDeviceFromPtr(void*) const override { return {c10::DeviceType::PrivateUse1, t_current_device}; }
  bool isPinnedPtr(const void* data) const override { return host_allocator().contains(data); }
  at::Allocator* getPinnedMemoryAllocator() const override { return &host_allocator(); }
  bool hasPrimaryContext(c10::DeviceIndex) const override { return true; }
  c10::DeviceIndex deviceCount() const override { return checked_count(); }
  void setCurrentDevice(c10::DeviceIndex device) const override {
    check_device_index(device);
    t_current_device = device;
  }
  c10::DeviceIndex getCurrentDevice() const override { return t_current_device; }
  c10::DeviceIndex exchangeDevice(c10::DeviceIndex device) const override {
    const c10::DeviceIndex old = t_current_device;
    setCurrentDevice(device);
    return old;
  }
  c10::DeviceIndex maybeExchangeDevice(c10::DeviceIndex device) const override { return exchangeDevice(device); }
  void resizePrivateUse1Bytes(const c10::Storage& storage, size_t nbytes) const override {
    resize_storage_bytes(storage, nbytes);
  }
};

C10_REGISTER_GUARD_IMPL(PrivateUse1, TpuGuardImpl);

const bool g_hooks_registered = [] {
  at::RegisterPrivateUse1HooksInterface(new TpuHooks());
  c10::SetAllocator(c10::DeviceType::PrivateUse1, tpu_allocator());
  return true;
}();

}  // namespace

void check_device_index(int index) {
  const c10::DeviceIndex count = checked_count();
  TORCH_CHECK(index >= 0 && index < count, "Invalid device index tpu:", index, ": there ",
              count == 1 ? "is 1 tpu device" : "are " + std::to_string(count) + " tpu devices",
              " (the CPU plugin presents TORCHTPU_NUM_DEVICES virtual devices).");
}

void synchronize_device(int device) {
  check_device_index(device);
  flush_every_trace(device, "synchronize");
  try {
    runtime::synchronize(device);
  } catch (const runtime::PjrtError& e) {
    throw_device_error("synchronize", e);  // torch.OutOfMemoryError for an allocation that failed while running
  }
  raise_value_errors(device);
}

}  // namespace torchtpu::aten
