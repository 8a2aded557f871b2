#include "runtime/buffer.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "runtime/error.h"
#include "runtime/pjrt_api.h"
#include "runtime/plugin.h"

namespace torchtpu::runtime {
namespace {

PJRT_Buffer_Type to_pjrt(DType dtype) {
  switch (dtype) {
    case DType::kBool: return PJRT_Buffer_Type_PRED;
    case DType::kI8: return PJRT_Buffer_Type_S8;
    case DType::kI16: return PJRT_Buffer_Type_S16;
    case DType::kI32: return PJRT_Buffer_Type_S32;
    case DType::kI64: return PJRT_Buffer_Type_S64;
    case DType::kU8: return PJRT_Buffer_Type_U8;
    case DType::kU16: return PJRT_Buffer_Type_U16;
    case DType::kU32: return PJRT_Buffer_Type_U32;
    case DType::kU64: return PJRT_Buffer_Type_U64;
    case DType::kF16: return PJRT_Buffer_Type_F16;
    case DType::kBF16: return PJRT_Buffer_Type_BF16;
    case DType::kF32: return PJRT_Buffer_Type_F32;
    case DType::kF64: return PJRT_Buffer_Type_F64;
    case DType::kC64: return PJRT_Buffer_Type_C64;
    case DType::kC128: return PJRT_Buffer_Type_C128;
    case DType::kF8E4M3FN: return PJRT_Buffer_Type_F8E4M3FN;
    case DType::kF8E5M2: return PJRT_Buffer_Type_F8E5M2;
    case DType::kF8E4M3FNUZ: return PJRT_Buffer_Type_F8E4M3FNUZ;
    case DType::kF8E5M2FNUZ: return PJRT_Buffer_Type_F8E5M2FNUZ;
  }
  return PJRT_Buffer_Type_INVALID;
}

struct DeviceState {
  MemoryStats stats;
};

// Never destroyed: buffers may be freed during interpreter shutdown, after static destructors ran.
std::mutex& stats_mutex() {
  static auto* m = new std::mutex;
  return *m;
}
std::unordered_map<int, DeviceState>& device_states() {
  static auto* states = new std::unordered_map<int, DeviceState>;
  return *states;
}

void account(int device, int64_t delta) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  MemoryStats& stats = device_states()[device].stats;
  stats.allocated += delta;
  if (delta >= 0) {
    stats.allocated_total += delta;
    stats.allocations++;
  } else {
    stats.freed_total -= delta;
    stats.frees++;
  }
  if (stats.allocated > stats.peak_allocated) stats.peak_allocated = stats.allocated;
}

std::string format_bytes(int64_t bytes) {
  static const char* const kUnits[] = {"bytes", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024.0 && unit + 1 < sizeof(kUnits) / sizeof(kUnits[0])) {
    value /= 1024.0;
    ++unit;
  }
  char text[64];
  if (unit == 0) std::snprintf(text, sizeof text, "%lld bytes", static_cast<long long>(bytes));
  else std::snprintf(text, sizeof text, "%.2f %s", value, kUnits[unit]);
  return text;
}

// Counts the failure and builds the exception, with the figures read under the same lock.
[[noreturn]] void throw_out_of_memory(int device, int64_t requested, const std::string& cause) {
  MemoryStats stats;
  {
    std::lock_guard<std::mutex> lock(stats_mutex());
    MemoryStats& live = device_states()[device].stats;
    live.ooms++;
    stats = live;
  }
  std::string message = "tpu:" + std::to_string(device) + " out of memory. Tried to allocate " +
                        (requested >= 0 ? format_bytes(requested) : std::string("an unknown amount")) + "; " +
                        format_bytes(stats.allocated) + " live in tensors on the device, peak " +
                        format_bytes(stats.peak_allocated) + " since the last reset";
  if (stats.limit >= 0) message += ", limit " + format_bytes(stats.limit) + " (set_per_process_memory_fraction)";
  message += ". " + cause;
  throw OutOfMemory(device, requested, stats.allocated, stats.peak_allocated, stats.limit, message);
}

struct HostRelease {
  const PJRT_Api* api;
  PJRT_Event* event;
  std::function<void()> release;
};

void on_host_buffer_done(PJRT_Error* error, void* user_arg) {
  auto* pending = static_cast<HostRelease*>(user_arg);
  destroy_error(pending->api, error);  // a failed transfer surfaces when the buffer is next used
  if (pending->release) pending->release();
  destroy_event(pending->api, pending->event);
  delete pending;
}

// Copies the part of tile `tile` of a sharded array that lies inside the array, between the dense array
// (`whole`, of `dims`) and the dense piece of one device (`piece`, of `piece_dims`, padded at the ends).
void copy_tile(char* whole, char* piece, const std::vector<int64_t>& dims, const std::vector<int64_t>& piece_dims,
               const std::vector<int64_t>& tile, size_t element_bytes, bool into_whole) {
  const size_t rank = dims.size();
  std::vector<int64_t> extent(rank), whole_strides(rank, 1), piece_strides(rank, 1);
  for (size_t d = 0; d < rank; ++d) {
    extent[d] = std::min(piece_dims[d], dims[d] - tile[d] * piece_dims[d]);
    if (extent[d] <= 0) return;  // a tile made only of padding
  }
  for (size_t d = rank; d-- > 1;) {
    whole_strides[d - 1] = whole_strides[d] * dims[d];
    piece_strides[d - 1] = piece_strides[d] * piece_dims[d];
  }
  const size_t row_bytes = rank == 0 ? element_bytes : static_cast<size_t>(extent[rank - 1]) * element_bytes;
  std::vector<int64_t> index(rank, 0);  // over all dims but the last
  while (true) {
    int64_t w = 0, p = 0;
    for (size_t d = 0; d < rank; ++d) {
      w += (tile[d] * piece_dims[d] + index[d]) * whole_strides[d];
      p += index[d] * piece_strides[d];
    }
    char* a = whole + static_cast<size_t>(w) * element_bytes;
    char* b = piece + static_cast<size_t>(p) * element_bytes;
    if (into_whole) std::memcpy(a, b, row_bytes);
    else std::memcpy(b, a, row_bytes);
    size_t d = rank > 0 ? rank - 1 : 0;
    while (d-- > 0) {
      if (++index[d] < extent[d]) break;
      index[d] = 0;
    }
    if (d == static_cast<size_t>(-1)) return;
  }
}

}  // namespace

Buffer::Buffer(std::vector<std::shared_ptr<Buffer>> shards, DType dtype, std::vector<int64_t> dims,
               ShardingPtr sharding)
    : pjrt_buffer_(nullptr),
      dtype_(dtype),
      dims_(std::move(dims)),
      device_(shards.at(0)->device()),
      sharding_(std::move(sharding)),
      shards_(std::move(shards)) {
  for (const BufferPtr& shard : shards_) shard->piece_ = true;
}

Buffer::Buffer(void* pjrt_buffer, DType dtype, std::vector<int64_t> dims, int device,
               std::shared_ptr<const std::string> producer)
    : pjrt_buffer_(pjrt_buffer), dtype_(dtype), dims_(std::move(dims)), device_(device), producer_(std::move(producer)) {
  account(device_, static_cast<int64_t>(nbytes()));
}

void Buffer::mark_donated() const {
  if (sharding_) {
    for (const BufferPtr& shard : shards_) shard->mark_donated();
    return;
  }
  if (donated_) return;
  donated_ = true;
  account(device_, -static_cast<int64_t>(nbytes()));
}

Buffer::~Buffer() {
  // A child forked from a process that used the device inherits its buffers but not its client: leave them.
  if (in_bad_fork() || sharding_) return;  // a sharded buffer's shards free themselves
  // A donated piece of a sharded buffer is destroyed at once, waiting for the partitioned execution that
  // took it: on the CPU plugin the parts of partitioned programs in flight together share one thread pool,
  // and their collectives, each holding a pool thread while it waits for its peers, then starve each other
  // into XLA's rendezvous timeout (docs/distributed.md). Waiting here paces the host so that few are in
  // flight: with the deferral below for pieces too, the 4-chip FSDP training check deadlocked in 2 of 4 runs.
  if (donated_ && !piece_) {
    destroy_after_queued_work(device_, static_cast<PJRT_Buffer*>(pjrt_buffer_));
    return;
  }
  if (!donated_) account(device_, -static_cast<int64_t>(nbytes()));
  const PJRT_Api* api = plugin().api;
  PJRT_Buffer_Destroy_Args args{};
  args.struct_size = PJRT_Buffer_Destroy_Args_STRUCT_SIZE;
  args.buffer = static_cast<PJRT_Buffer*>(pjrt_buffer_);
  // A destructor must not throw; a failed free only leaks.
  destroy_error(api, api->PJRT_Buffer_Destroy(&args));
}

int64_t Buffer::numel() const {
  int64_t n = 1;
  for (int64_t d : dims_) n *= d;
  return n;
}

BufferPtr upload(const void* data, DType dtype, const std::vector<int64_t>& dims, int device,
                 std::function<void()> release_host) {
  exit_gate();
  const Plugin& p = plugin();
  int64_t bytes = static_cast<int64_t>(element_size(dtype));
  for (int64_t d : dims) bytes *= d;
  check_memory_limit(device, bytes);
  PJRT_Client_BufferFromHostBuffer_Args args{};
  args.struct_size = PJRT_Client_BufferFromHostBuffer_Args_STRUCT_SIZE;
  args.client = p.client;
  args.data = data;
  args.type = to_pjrt(dtype);
  args.dims = dims.data();
  args.num_dims = dims.size();
  args.host_buffer_semantics = PJRT_HostBufferSemantics_kImmutableUntilTransferCompletes;
  args.device = p.devices.at(static_cast<size_t>(device));
  check_allocation(p.api, p.api->PJRT_Client_BufferFromHostBuffer(&args), "PJRT_Client_BufferFromHostBuffer",
                   device, bytes);
  auto buffer = std::make_shared<Buffer>(args.buffer, dtype, dims, device);
  auto* pending = new HostRelease{p.api, args.done_with_host_buffer, std::move(release_host)};
  PJRT_Event_OnReady_Args on_ready{};
  on_ready.struct_size = PJRT_Event_OnReady_Args_STRUCT_SIZE;
  on_ready.event = args.done_with_host_buffer;
  on_ready.callback = &on_host_buffer_done;
  on_ready.user_arg = pending;
  PJRT_Error* error = p.api->PJRT_Event_OnReady(&on_ready);
  if (error != nullptr) {
    // Could not register the callback: wait here instead so the host memory is released safely.
    await_event(p.api, pending->event, "host transfer");
    if (pending->release) pending->release();
    delete pending;
    check(p.api, error, "PJRT_Event_OnReady");
  }
  return buffer;
}

BufferPtr upload_sharded(const void* data, DType dtype, const std::vector<int64_t>& dims, ShardingPtr sharding) {
  const std::vector<int64_t> piece_dims = sharding->shard_dims(dims);
  int64_t piece_numel = 1;
  for (int64_t d : piece_dims) piece_numel *= d;
  const size_t element_bytes = element_size(dtype);
  std::vector<BufferPtr> shards;
  for (int64_t device = 0; device < sharding->num_devices(); ++device) {
    auto piece = std::make_shared<std::vector<char>>(static_cast<size_t>(piece_numel) * element_bytes, 0);
    copy_tile(static_cast<char*>(const_cast<void*>(data)), piece->data(), dims, piece_dims, sharding->tile_of(device),
              element_bytes, /*into_whole=*/false);
    shards.push_back(upload(piece->data(), dtype, piece_dims, static_cast<int>(device), [piece]() mutable { piece.reset(); }));
  }
  return std::make_shared<Buffer>(std::move(shards), dtype, dims, std::move(sharding));
}

BufferPtr copy_to_device(const Buffer& buffer, int device) {
  exit_gate();
  const Plugin& p = plugin();
  check_memory_limit(device, static_cast<int64_t>(buffer.nbytes()));
  PJRT_Buffer_CopyToDevice_Args args{};
  args.struct_size = PJRT_Buffer_CopyToDevice_Args_STRUCT_SIZE;
  args.buffer = static_cast<PJRT_Buffer*>(buffer.pjrt());
  args.dst_device = p.devices.at(static_cast<size_t>(device));
  check_allocation(p.api, p.api->PJRT_Buffer_CopyToDevice(&args), "PJRT_Buffer_CopyToDevice", device,
                   static_cast<int64_t>(buffer.nbytes()));
  return std::make_shared<Buffer>(args.dst_buffer, buffer.dtype(), buffer.dims(), device, nullptr);
}

BufferPtr gather_to_device(const Buffer& buffer, int device) {
  auto host = std::make_shared<std::vector<char>>(buffer.nbytes());
  download(buffer, host->data());
  return upload(host->data(), buffer.dtype(), buffer.dims(), device, [host] {});
}

void download(const Buffer& buffer, void* dst) {
  if (const Sharding* sharding = buffer.sharding()) {
    // Each tile once, from the first device that holds it.
    const std::vector<int64_t> piece_dims = sharding->shard_dims(buffer.dims());
    for (int64_t position = 0; position < sharding->num_devices(); position += sharding->replicas()) {
      const int64_t device = sharding->devices()[static_cast<size_t>(position)];
      const Buffer& shard = *buffer.shards().at(static_cast<size_t>(device));
      std::vector<char> piece(shard.nbytes());
      download(shard, piece.data());
      copy_tile(static_cast<char*>(dst), piece.data(), buffer.dims(), piece_dims, sharding->tile_of(device),
                element_size(buffer.dtype()), /*into_whole=*/true);
    }
    return;
  }
  const OpScope scope;  // a thread returning from a wait must not meet an exiting interpreter
  exit_gate();
  const Plugin& p = plugin();
  PJRT_Buffer_ToHostBuffer_Args args{};
  args.struct_size = PJRT_Buffer_ToHostBuffer_Args_STRUCT_SIZE;
  args.src = static_cast<PJRT_Buffer*>(buffer.pjrt());
  args.dst = dst;
  args.dst_size = buffer.nbytes();
  check(p.api, p.api->PJRT_Buffer_ToHostBuffer(&args), "PJRT_Buffer_ToHostBuffer");
  // An error here comes from the producer (or from an op whose result it read), which ran asynchronously.
  const std::string what = buffer.producer() == nullptr ? std::string("device-to-host transfer")
                                                        : "device-to-host transfer of a result of " + *buffer.producer();
  try {
    await_event(p.api, args.event, what.c_str());
  } catch (const OutOfMemory&) {
    throw;
  } catch (const PjrtError& e) {
    throw_execution_error(e, buffer.device());
  }
  exit_gate();
}

void throw_execution_error(const PjrtError& error, int device) {
  const std::string text = error.what();
  static constexpr std::string_view kAllocationFailed = "Out of memory allocating ";
  const size_t at = text.find(kAllocationFailed);
  if (error.code() != kResourceExhausted && at == std::string::npos) throw error;
  int64_t requested = -1;
  if (at != std::string::npos) {
    const char* digits = text.c_str() + at + kAllocationFailed.size();
    char* end = nullptr;
    const long long parsed = std::strtoll(digits, &end, 10);
    if (end != digits) requested = parsed;
  }
  throw_out_of_memory(device, requested, text);
}

void check_allocation(const PJRT_Api* api, PJRT_Error* error, const char* what, int device, int64_t requested) {
  try {
    check(api, error, what);
  } catch (const PjrtError& e) {
    if (e.code() != kResourceExhausted) throw;
    throw_out_of_memory(device, requested, e.what());
  }
}

// Whether any device has a limit, so the common case skips the lock.
std::atomic<bool> g_any_limit{false};

void check_memory_limit(int device, int64_t requested) {
  if (!g_any_limit.load(std::memory_order_relaxed)) return;
  int64_t limit = -1;
  int64_t allocated = 0;
  {
    std::lock_guard<std::mutex> lock(stats_mutex());
    const MemoryStats& stats = device_states()[device].stats;
    limit = stats.limit;
    allocated = stats.allocated;
  }
  if (limit < 0 || allocated + requested <= limit) return;
  throw_out_of_memory(device, requested, "The request passes the per-process memory limit.");
}

MemoryStats memory_stats(int device) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  return device_states()[device].stats;
}

void reset_peak_memory(int device) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  MemoryStats& stats = device_states()[device].stats;
  stats.peak_allocated = stats.allocated;
}

void reset_accumulated_memory(int device) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  MemoryStats& stats = device_states()[device].stats;
  stats.allocated_total = stats.freed_total = stats.allocations = stats.frees = stats.ooms = 0;
}

void set_memory_limit(int device, int64_t bytes) {
  std::lock_guard<std::mutex> lock(stats_mutex());
  device_states()[device].stats.limit = bytes < 0 ? -1 : bytes;
  if (bytes >= 0) g_any_limit.store(true);
}

}  // namespace torchtpu::runtime
