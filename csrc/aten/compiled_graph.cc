#include "aten/compiled_graph.h"

#include <c10/core/DeviceGuard.h>
#include <c10/core/StorageImpl.h>
#include <c10/core/TensorImpl.h>

#include <atomic>
#include <unordered_map>
#include <unordered_set>

#include "aten/generator.h"
#include "aten/scalar_operands.h"
#include "aten/storage.h"
#include "aten/value_checks.h"
#include "eager/driver.h"

namespace torchtpu::aten {
namespace {

struct Counters {
  std::atomic<int64_t> captures{0}, replays{0};
};
Counters& counters() {
  static Counters c;
  return c;
}

const c10::StorageImpl* storage_of(const at::Tensor& t) { return t.storage().unsafeGetStorageImpl(); }

// Per input: the index of the first input with the same storage (itself when it shares none).
std::vector<int> storage_groups(const std::vector<at::Tensor>& inputs) {
  std::unordered_map<const c10::StorageImpl*, int> first;
  std::vector<int> groups;
  groups.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    groups.push_back(first.emplace(storage_of(inputs[i]), static_cast<int>(i)).first->second);
  }
  return groups;
}

}  // namespace

std::shared_ptr<CompiledGraph> CompiledGraph::capture(uint64_t trace, const std::vector<at::Tensor>& inputs,
                                                      const std::vector<at::Tensor>& outputs, std::string& why_not) {
  // How each input was sharded before the trace ran: the program was partitioned for that.
  std::vector<runtime::ShardingPtr> input_shardings;
  for (const at::Tensor& input : inputs) input_shardings.push_back(sharding_before_trace(input));
  std::optional<FlushedTrace> flushed = end_capture(trace);
  if (!flushed) {
    why_not = "it did not run as one trace (a host read or an op on the CPU fallback in the middle, or no tpu op)";
    return nullptr;
  }
  if (!flushed->program->executable) {
    why_not = "its program did not compile as one";
    return nullptr;
  }
  auto graph = std::make_shared<CompiledGraph>();
  graph->program_ = flushed->program;
  graph->device_ = flushed->device;
  graph->input_group_ = storage_groups(inputs);
  graph->input_shardings_ = std::move(input_shardings);
  graph->value_checks_ = value_checks_enabled();
  std::unordered_map<const c10::StorageImpl*, int> input_of;  // storage -> first input holding it
  for (size_t i = 0; i < inputs.size(); ++i) {
    input_of.emplace(storage_of(inputs[i]), static_cast<int>(i));
    graph->input_offsets_.push_back(inputs[i].storage_offset());
  }
  const c10::StorageImpl* check_storage = storage_of(check_state(flushed->device).tensor);

  for (size_t e = 0; e < flushed->externals.size(); ++e) {
    const ExternalOrigin& origin = flushed->origins[e];
    const runtime::Buffer& buffer = *flushed->externals[e];
    Parameter p;
    switch (origin.kind) {
      case ExternalOrigin::Kind::kConstant:
        p.constant = flushed->externals[e];
        break;
      case ExternalOrigin::Kind::kStorage: {
        auto it = input_of.find(origin.storage);
        if (it != input_of.end()) {
          p.kind = Parameter::Kind::kInput;
          p.index = it->second;
          p.dtype = buffer.dtype();
          p.dims = buffer.dims();
        } else if (origin.storage == check_storage) {
          p.kind = Parameter::Kind::kCheckState;
        } else {
          why_not = "it reads a tpu tensor that is not one of its inputs";
          return nullptr;
        }
        break;
      }
      case ExternalOrigin::Kind::kRngState:
        p.kind = Parameter::Kind::kRngState;
        p.rng_draws = origin.rng_draws;
        break;
      case ExternalOrigin::Kind::kCpuScalar:
        if (origin.cpu_scalar.unsafeGetTensorImpl()->is_wrapped_number()) {
          // A Python number of the graph (static shapes: a literal) that the argument parser wrapped.
          p.constant = flushed->externals[e];
          break;
        }
        p.kind = Parameter::Kind::kCpuScalar;
        p.index = static_cast<int>(graph->cpu_scalars_.size());
        p.dtype = buffer.dtype();
        graph->cpu_scalars_.push_back(origin.cpu_scalar);
        break;
      case ExternalOrigin::Kind::kOpaque:
        why_not = "it samples from an explicitly given generator";
        return nullptr;
    }
    graph->parameters_.push_back(std::move(p));
  }

  std::unordered_map<const c10::StorageImpl*, int> new_storage_of;
  for (const at::Tensor& out : outputs) {
    const c10::StorageImpl* storage = storage_of(out);
    if (input_of.count(storage) || new_storage_of.count(storage)) continue;
    new_storage_of.emplace(storage, static_cast<int>(graph->new_storage_bytes_.size()));
    graph->new_storage_bytes_.push_back(out.storage().nbytes());
  }
  std::unordered_set<const c10::StorageImpl*> computed;
  for (const c10::intrusive_ptr<c10::StorageImpl>& storage : flushed->results) {
    Result r;
    if (auto it = input_of.find(storage.get()); it != input_of.end()) {
      r.kind = Result::Kind::kInput;
      r.index = it->second;
    } else if (storage.get() == check_storage) {
      r.kind = Result::Kind::kCheckState;
    } else if (auto it = new_storage_of.find(storage.get()); it != new_storage_of.end()) {
      r.kind = Result::Kind::kNewStorage;
      r.index = it->second;
    }
    computed.insert(storage.get());
    graph->results_.push_back(r);
  }
  for (const at::Tensor& out : outputs) {
    const c10::StorageImpl* storage = storage_of(out);
    Output o;
    o.of_input = input_of.count(storage) != 0;
    if (!o.of_input && !computed.count(storage)) {
      why_not = "an output is neither computed by the graph nor a view of an input";
      return nullptr;
    }
    o.storage = o.of_input ? input_of.at(storage) : new_storage_of.at(storage);
    o.dtype = out.scalar_type();
    o.sizes = out.sizes().vec();
    o.strides = out.strides().vec();
    o.offset = out.storage_offset();
    graph->outputs_.push_back(std::move(o));
  }
  counters().captures++;
  return graph;
}

std::vector<at::Tensor> CompiledGraph::take_cpu_scalars() { return std::move(cpu_scalars_); }

bool CompiledGraph::fits(const std::vector<at::Tensor>& inputs) const {
  TraceLock lock = lock_trace();
  // The program makes the value checks that were on at capture, and no others.
  if (inputs.size() != input_group_.size() || value_checks_enabled() != value_checks_) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& t = inputs[i];
    if (!t.defined() || !t.is_privateuseone() || t.device().index() != device_ ||
        t.storage_offset() != input_offsets_[i]) {
      return false;
    }
  }
  if (storage_groups(inputs) != input_group_) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const runtime::ShardingPtr now = sharding_before_trace(inputs[i]);
    if ((now == nullptr) != (input_shardings_[i] == nullptr) || (now && !(*now == *input_shardings_[i]))) return false;
  }
  for (const Parameter& param : parameters_) {
    if (param.kind != Parameter::Kind::kInput) continue;
    const runtime::BufferPtr& buffer = storage_buffer(inputs[param.index]);
    if (buffer->dtype() != param.dtype || buffer->dims() != param.dims) return false;
  }
  return true;
}

std::vector<at::Tensor> CompiledGraph::run(const std::vector<at::Tensor>& inputs,
                                           const std::vector<at::Tensor>& cpu_scalars) const {
  // Held throughout, as a recording is: the device's value-check state is read and replaced here.
  TraceLock lock = lock_trace();
  std::vector<runtime::BufferPtr> held(parameters_.size());
  for (size_t p = 0; p < parameters_.size(); ++p) {
    const Parameter& param = parameters_[p];
    switch (param.kind) {
      case Parameter::Kind::kInput:
        held[p] = storage_buffer(inputs[param.index]);
        break;
      case Parameter::Kind::kConstant:
        held[p] = param.constant;
        break;
      case Parameter::Kind::kRngState:
        held[p] = next_rng_state(std::nullopt, static_cast<c10::DeviceIndex>(device_), param.rng_draws);
        break;
      case Parameter::Kind::kCpuScalar: {
        const at::Tensor& value = cpu_scalars.at(param.index);
        TORCH_CHECK(value.device().is_cpu() && value.dim() == 0 && to_dtype(value.scalar_type()) == param.dtype,
                    "torchtpu: a compiled graph's CPU part gave a value unlike the one it captured");
        held[p] = scalar_buffer(value, device_);
        break;
      }
      case Parameter::Kind::kCheckState:
        held[p] = storage_buffer(check_state(device_).tensor);
        break;
    }
  }
  std::vector<const runtime::Buffer*> raw;
  raw.reserve(held.size());
  for (const runtime::BufferPtr& b : held) raw.push_back(b.get());
  // A result takes over its storage's old buffer only when that storage is its sole holder; the inputs
  // written stay locked from that decision until they hold the results (aten/storage.h).
  c10::SmallVector<StorageHandle*, 4> written;
  for (const Result& result : results_) {
    if (result.kind == Result::Kind::kInput) written.push_back(&storage_handle(inputs[result.index]));
  }
  StorageWriteLock write_lock(written);
  std::vector<int64_t> kept;
  for (int64_t e : program_->aliased_externals) {
    const Parameter& param = parameters_[static_cast<size_t>(e)];
    const runtime::BufferPtr& buffer = held[static_cast<size_t>(e)];
    // The value-check state is only touched under the trace lock, held here.
    const bool sole = param.kind == Parameter::Kind::kInput
                          ? write_lock.sole_holder(storage_handle(inputs[param.index]), buffer)
                          : buffer.use_count() == 2;  // its handle and `held`
    if (!sole) kept.push_back(e);
  }
  std::vector<runtime::BufferPtr> results = eager::execute(*program_->executable, device_, raw, kept);
  held.clear();

  std::vector<c10::Storage> new_storages;
  {
    c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, static_cast<c10::DeviceIndex>(device_)));
    for (size_t nbytes : new_storage_bytes_) {
      new_storages.emplace_back(c10::Storage::use_byte_size_t(), nbytes, tpu_allocator(), /*resizable=*/true);
    }
  }
  for (size_t r = 0; r < results_.size(); ++r) {
    const Result& result = results_[r];
    switch (result.kind) {
      case Result::Kind::kInput:
        write_lock.set_buffer(storage_handle(inputs[result.index]), std::move(results[r]));
        break;
      case Result::Kind::kNewStorage:
        storage_handle(new_storages[result.index]).set_buffer(std::move(results[r]));
        break;
      case Result::Kind::kCheckState: {
        CheckState& checks = check_state(device_);
        bind_check_state(checks, std::move(results[r]));
        checks.unread = true;
        break;
      }
      case Result::Kind::kDropped:
        break;
    }
  }
  std::vector<at::Tensor> outputs;
  outputs.reserve(outputs_.size());
  for (const Output& o : outputs_) {
    c10::Storage storage = o.of_input ? inputs[o.storage].storage() : new_storages[o.storage];
    at::Tensor t = at::detail::make_tensor<c10::TensorImpl>(std::move(storage),
                                                            c10::DispatchKeySet(c10::DispatchKey::PrivateUse1),
                                                            caffe2::TypeMeta::fromScalarType(o.dtype));
    t.unsafeGetTensorImpl()->set_sizes_and_strides(o.sizes, o.strides, o.offset);
    outputs.push_back(std::move(t));
  }
  counters().replays++;
  return outputs;
}

CompiledGraphStats compiled_graph_stats() { return {counters().captures, counters().replays}; }

void reset_compiled_graph_stats() {
  counters().captures = 0;
  counters().replays = 0;
}

}  // namespace torchtpu::aten
