#include "aten/op_kernel.h"

#include <ATen/Dispatch.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>
#include <c10/util/Exception.h>
#include <c10/util/SmallVector.h>
#include <c10/util/accumulate.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>

#include "aten/append.h"
#include "aten/device_error.h"
#include "aten/generator.h"
#include "aten/op_build.h"
#include "aten/metrics.h"
#include "aten/op_info.h"
#include "aten/op_key.h"
#include "aten/overlapping_writes.h"
#include "aten/fallback.h"
#include "aten/fused.h"
#include "aten/scalar_operands.h"
#include "aten/storage.h"
#include "aten/storage_ops.h"
#include "aten/value_checks.h"
#include "cache/program_cache.h"
#include "eager/driver.h"
#include "runtime/error.h"
#include "runtime/plugin.h"

namespace torchtpu::aten {
namespace {

cache::ProgramCache<OpSignature>& program_cache() { return cache::process_program_cache<OpSignature>(); }

// After this many programs of one op, a single warning lists its latest signatures.
int64_t recompile_warning_threshold() {
  static const int64_t threshold = [] {
    const char* env = std::getenv("TORCHTPU_RECOMPILE_WARNING");
    return env != nullptr && *env != '\0' ? std::atoll(env) : int64_t{64};
  }();
  return threshold;
}

bool log_ops() {
  static const bool enabled = std::getenv("TORCHTPU_LOG_OPS") != nullptr;
  return enabled;
}

// Notes a new program of `info`; warns once when the op keeps compiling.
void watch_recompiles(OpInfo& info, const torch::jit::Stack& stack, size_t first) {
  const int64_t threshold = recompile_warning_threshold();
  if (threshold <= 0 && !log_compiles()) return;
  std::lock_guard<std::mutex> lock(info.recompile_mutex);
  info.recent_signatures.push_back(describe_call(info, stack, first));
  if (log_compiles()) std::fprintf(stderr, "[torchtpu] compile %s(%s)\n", info.name.c_str(), info.recent_signatures.back().c_str());
  if (info.recent_signatures.size() > 4) info.recent_signatures.pop_front();
  if (++info.programs_built < threshold || threshold <= 0 || info.warned) return;
  info.warned = true;
  std::ostringstream seen;
  for (const std::string& s : info.recent_signatures) seen << "\n    (" << s << ")";
  // Evicted programs compile again when their signature comes back: then the repeats are not new shapes.
  std::string evicted;
  if (const int64_t evictions = program_cache().evictions(); evictions > 0) {
    evicted = "\n  The in-memory cache is full (TORCHTPU_CACHE_MAX_PROGRAMS=" + std::to_string(cache::max_programs()) +
              ") and has evicted " + std::to_string(evictions) +
              " programs, so some of these compiles repeat a signature seen before; a larger bound keeps them.";
  }
  TORCH_WARN("torchtpu: ", info.name, " has compiled ", info.programs_built,
             " programs, one per new combination of input shapes, dtypes, view layouts and compile-time "
             "values. The latest calls were:", seen.str(), evicted,
             "\n  Each compile costs milliseconds. Keep shapes fixed across steps (pad batches and sequences to "
             "a few sizes); Python numbers and CPU scalars are operands and never recompile, except where "
             "marked '(compile-time value)'. TORCHTPU_RECOMPILE_WARNING=0 silences this.");
}

// The tensors of one call's arguments; a tensor list is unpacked once, however many parameters it feeds.
class CallTensors {
 public:
  CallTensors(const torch::jit::Stack& stack, size_t first) : stack_(stack), first_(first) {}
  // The argument itself, or (element >= 0) one element of a tensor-list argument.
  const at::Tensor& get(size_t arg, int element) {
    const c10::IValue& v = stack_[first_ + arg];
    if (element < 0) return v.toTensor();
    if (lists_.empty()) lists_.resize(stack_.size() - first_);  // only list ops pay for this
    std::vector<at::Tensor>& list = lists_[arg];
    if (list.empty()) list = list_elements(v);
    return list.at(static_cast<size_t>(element));
  }

 private:
  const torch::jit::Stack& stack_;
  size_t first_;
  std::vector<std::vector<at::Tensor>> lists_;
};

runtime::BufferPtr param_buffer(const ParamSource& source, const torch::jit::Stack& stack, size_t first,
                                CallTensors& tensors, c10::DeviceIndex device, int64_t rng_draws) {
  switch (source.kind) {
    case ParamSource::Kind::kStorage:
    case ParamSource::Kind::kWriteBase:
      return storage_buffer(tensors.get(source.arg, source.element));
    case ParamSource::Kind::kCpuScalar:
      return scalar_buffer(tensors.get(source.arg, source.element), device);
    case ParamSource::Kind::kScalar:
      return scalar_buffer(stack[first + source.arg], device);
    case ParamSource::Kind::kScalarList:
      return scalar_list_buffer(stack[first + source.arg], device);
    case ParamSource::Kind::kIntList:
      return int_list_buffer(stack[first + source.arg], device);
    case ParamSource::Kind::kOffset: {
      const int64_t offset = tensors.get(source.arg, source.element).storage_offset();
      return scalar_buffer(DType::kI64, &offset, sizeof offset, device);
    }
    case ParamSource::Kind::kStride: {
      const int64_t stride = tensors.get(source.arg, source.element).stride(source.dim);
      return scalar_buffer(DType::kI64, &stride, sizeof stride, device);
    }
    case ParamSource::Kind::kRowLength: {
      const int64_t length = tensors.get(source.arg, source.element).size(source.dim);
      return scalar_buffer(DType::kI64, &length, sizeof length, device);
    }
    case ParamSource::Kind::kRngState: {
      const c10::IValue* generator = nullptr;
      for (size_t i = first; i < stack.size(); ++i) {
        if (stack[i].isGenerator()) generator = &stack[i];
      }
      return next_rng_state(generator ? std::optional<at::Generator>(generator->toGenerator()) : std::nullopt, device,
                            rng_draws);
    }
    case ParamSource::Kind::kCheckState:
      return storage_buffer(check_state(device).tensor);
  }
  return nullptr;
}

// A padded call's length (aten/append.h), or 0.
int64_t row_length(const OpSignature& signature, CallTensors& tensors) {
  if (signature.row_length_param < 0) return 0;
  const ParamSource& source = signature.params[static_cast<size_t>(signature.row_length_param)];
  return tensors.get(source.arg, source.element).size(source.dim);
}

// A fresh tensor on the current tpu device, without a dispatch; its storage is bound by the caller.
// `row_length`: the length of a padded call's grown results.
at::Tensor new_tensor(const OutputBinding& binding, int64_t row_length) {
  if (binding.length_dim >= 0) {
    // A grown array: a storage of the padded rows, the tensor the call's length of them.
    at::Tensor t = empty_memory_format({c10::multiply_integers(binding.buffer_dims)}, binding.dtype, std::nullopt,
                                       std::nullopt, std::nullopt, std::nullopt);
    c10::SmallVector<int64_t, 6> sizes(binding.sizes.begin(), binding.sizes.end());
    sizes[static_cast<size_t>(binding.length_dim)] = row_length;
    t.unsafeGetTensorImpl()->set_sizes_contiguous(sizes);
    mark_grown(storage_handle(t), binding.grown_outer, binding.grown_inner);
    return t;
  }
  if (!binding.strides.empty()) {
    return empty_strided(binding.sizes, binding.strides, binding.dtype, std::nullopt, std::nullopt, std::nullopt);
  }
  return empty_memory_format(binding.sizes, binding.dtype, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
}

// Pushes the schema's returns after the call's arguments: functional results are new tensors whose storages
// `bind(tensor storage, program output index)` fills; a return that aliases a mutated argument is that
// argument.
template <class Bind>
void push_returns(const OpInfo& info, const OpSignature& signature, torch::jit::Stack& stack, size_t first,
                  CallTensors& tensors, const Bind& bind) {
  c10::SmallVector<c10::IValue, 4> returned;
  size_t next_output = 0;  // program output index; undefined results have none
  const int64_t length = row_length(signature, tensors);
  auto functional_result = [&](size_t binding_index) {
    const OutputBinding& binding = signature.functional.at(binding_index);
    if (!binding.defined) return at::Tensor();
    at::Tensor t = new_tensor(binding, length);
    bind(binding, t.storage(), next_output++);
    return t;
  };
  for (const ReturnPlan& r : signature.returns) {
    switch (r.kind) {
      case ReturnPlan::Kind::kAlias:
        returned.emplace_back(stack[first + info.mutated.at(r.index)]);
        break;
      case ReturnPlan::Kind::kTensor:
        returned.emplace_back(functional_result(r.index));
        break;
      case ReturnPlan::Kind::kInt:
        returned.emplace_back(r.value);
        break;
      case ReturnPlan::Kind::kTensorList: {
        c10::List<at::Tensor> list;
        for (size_t k = 0; k < r.count; ++k) list.push_back(functional_result(r.index + k));
        returned.emplace_back(std::move(list));
        break;
      }
    }
  }
  for (c10::IValue& v : returned) stack.push_back(std::move(v));
}

void run(const OpInfo& info, const OpSignature& signature, torch::jit::Stack& stack, size_t first,
         c10::DeviceIndex device) {
  // A checked program replaces the device's error state: another thread's checked op waits from this read
  // to the new state, so neither loses the other's failure.
  CheckState* checks = signature.checks_values ? &check_state(device) : nullptr;
  TraceLock checks_lock;
  if (checks) checks_lock = lock_trace();
  c10::SmallVector<runtime::BufferPtr, 8> held;  // keeps every input alive through the call
  std::vector<const runtime::Buffer*> raw;
  raw.reserve(signature.params.size());
  CallTensors tensors(stack, first);
  for (const ParamSource& source : signature.params) {
    held.push_back(param_buffer(source, stack, first, tensors, device, signature.rng_draws));
    raw.push_back(held.back().get());
  }
  // A write takes over its input's buffer only when the storage being rewritten is its sole holder and the
  // program reads that buffer through no other parameter. The storages written stay locked from that
  // decision until they hold the results, so no other thread reads a buffer the program took (aten/storage.h).
  std::vector<int64_t> kept;
  c10::SmallVector<StorageHandle*, 4> written;
  for (const OutputBinding& write : signature.writes) written.push_back(&storage_handle(tensors.get(write.arg, write.element)));
  std::vector<runtime::BufferPtr> outputs;
  {
    StorageWriteLock write_lock(written);
    for (const auto& [param, write] : signature.donations) {
      const runtime::BufferPtr& buffer = held[param];
      bool donate = write_lock.sole_holder(*written[write], buffer);
      for (size_t p = 0; donate && p < raw.size(); ++p) donate = p == param || raw[p] != buffer.get();
      if (!donate) kept.push_back(static_cast<int64_t>(param));
    }
    outputs = eager::execute(*signature.executable, device, raw, kept);
    info.counters->executions++;
    for (size_t w = 0; w < written.size(); ++w) write_lock.set_buffer(*written[w], std::move(outputs[signature.first_write + w]));
  }
  push_returns(info, signature, stack, first, tensors, [&](const OutputBinding&, const c10::Storage& storage, size_t output) {
    storage_handle(storage).set_buffer(std::move(outputs[output]));
  });
  if (checks) {
    bind_check_state(*checks, std::move(outputs.back()));
    checks->unread = true;
  }
}

// What a replay of the trace must give a parameter that is not a storage (aten/compiled_graph.h).
ExternalOrigin origin(const ParamSource& source, const torch::jit::Stack& stack, size_t first, CallTensors& tensors,
                      int64_t rng_draws) {
  ExternalOrigin o;
  if (source.kind == ParamSource::Kind::kCpuScalar) {
    o.kind = ExternalOrigin::Kind::kCpuScalar;
    o.cpu_scalar = tensors.get(source.arg, source.element);
  } else if (source.kind == ParamSource::Kind::kRngState) {
    bool explicit_generator = false;
    for (size_t i = first; i < stack.size(); ++i) explicit_generator |= stack[i].isGenerator();
    o.kind = explicit_generator ? ExternalOrigin::Kind::kOpaque : ExternalOrigin::Kind::kRngState;
    o.rng_draws = rng_draws;
  }
  return o;
}

// Fused mode: the call joins the trace instead of running; its results are pending values.
void record(const OpInfo& info, const std::shared_ptr<OpSignature>& signature, torch::jit::Stack& stack,
            size_t first, c10::DeviceIndex device) {
  TraceRecording trace(device);
  CallTensors tensors(stack, first);
  TraceSources sources;
  for (const ParamSource& source : signature->params) {
    if (source.kind == ParamSource::Kind::kStorage || source.kind == ParamSource::Kind::kWriteBase) {
      sources.push_back(trace.storage(tensors.get(source.arg, source.element)));
    } else if (source.kind == ParamSource::Kind::kCheckState) {
      sources.push_back(trace.storage(check_state(device).tensor));  // chained through the trace like any value
    } else {
      sources.push_back(trace.external(param_buffer(source, stack, first, tensors, device, signature->rng_draws),
                                       origin(source, stack, first, tensors, signature->rng_draws)));
    }
  }
  const int op = trace.add_op(signature, std::move(sources));
  info.counters->executions++;
  for (size_t w = 0; w < signature->writes.size(); ++w) {
    const OutputBinding& write = signature->writes[w];
    trace.bind(op, static_cast<int>(signature->first_write + w), tensors.get(write.arg, write.element).storage(),
               write.buffer_dtype, write.buffer_dims);
  }
  push_returns(info, *signature, stack, first, tensors, [&](const OutputBinding& binding, const c10::Storage& storage, size_t output) {
    trace.bind(op, static_cast<int>(output), storage, binding.buffer_dtype, binding.buffer_dims);
  });
  if (signature->checks_values) {
    CheckState& checks = check_state(device);
    const int last = static_cast<int>(signature->executable->output_types().size()) - 1;
    trace.bind(op, last, checks.tensor.storage(), DType::kI64, {3});
    checks.unread = true;
  }
}

// Index tensors in Tensor?[] arguments may live on the CPU, as with CUDA: copy them over. (The CPU elements
// a Tensor[] may have, a foreach op's 0-dim scalars, stay where they are: their values are program operands,
// as a lone 0-dim CPU tensor's is.)
void move_list_tensors(const OpInfo& info, torch::jit::Stack& stack, size_t first, c10::DeviceIndex device) {
  for (size_t i = first; i < stack.size(); ++i) {
    if (info.arg_classes[i - first] != ArgClass::kTensorList || !stack[i].isOptionalTensorList()) continue;
    std::vector<at::Tensor> elements = list_elements(stack[i]);
    bool moved = false;
    for (at::Tensor& t : elements) {
      if (t.defined() && t.device().is_cpu()) {
        t = t.to(c10::Device(c10::DeviceType::PrivateUse1, device));
        moved = true;
      }
    }
    if (!moved) continue;
    stack[i] = make_list(stack[i], elements);
  }
}

// The sizes of the tensors the op writes (list elements in order), to see whether building resized any.
std::vector<std::vector<int64_t>> sizes_of_mutated(const OpInfo& info, const torch::jit::Stack& stack, size_t first) {
  std::vector<std::vector<int64_t>> sizes;
  for (size_t arg : info.mutated) {
    const c10::IValue& v = stack[first + arg];
    if (v.isTensor()) {
      sizes.push_back(v.toTensor().sizes().vec());
    } else if (v.isTensorList()) {
      for (const at::Tensor& t : v.toTensorList().vec()) sizes.push_back(t.sizes().vec());
    }
  }
  return sizes;
}

// CPU's kernels convert some Scalar arguments to the op's dtype with c10's overflow check (OpInfo::
// overflow_checked); the program would wrap them. The same conversion on the host raises CPU's "value cannot
// be converted to type uint8_t without overflow".
void check_scalars_fit(const OpInfo& info, const OpSignature& signature, const torch::jit::Stack& stack,
                       size_t first) {
  for (size_t arg : info.overflow_checked) {
    const c10::IValue& v = stack[first + arg];
    // Every real dtype holds -127..127: the common calls (an alpha of 1, a fill of 0) convert nothing.
    if (v.isInt() ? std::abs(v.toInt()) <= 127 : v.isDouble() && std::abs(v.toDouble()) <= 127) continue;
    c10::Scalar value;
    if (v.isScalar()) {
      value = v.toScalar();
    } else if (v.isTensor() && is_cpu_scalar(v.toTensor())) {
      value = v.toTensor().item();
    } else {
      continue;
    }
    const OutputBinding& result = !signature.functional.empty() ? signature.functional[0] : signature.writes.at(0);
    at::ScalarType type = result.dtype;
    if (type == at::kHalf || type == at::kBFloat16) {
      switch (info.half_scalars) {
        case OpInfo::HalfScalars::kChecked: break;
        case OpInfo::HalfScalars::kAsFloat: type = at::kFloat; break;
        case OpInfo::HalfScalars::kUnchecked: return;
        case OpInfo::HalfScalars::kUncheckedForOneElement:
          if (c10::multiply_integers(result.sizes) == 1) return;
          break;
      }
    }
    const bool real = at::isIntegralType(type, /*includeBool=*/true) || at::isFloatingType(type);
    if (!real || at::isBarebonesUnsignedType(type) || at::isFloat8Type(type)) return;
    AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, type, "check_scalars_fit",
                               [&] { (void)value.to<scalar_t>(); });
  }
}

}  // namespace

c10::DeviceIndex common_device(const OpInfo& info, const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
  const size_t first = stack.size() - schema.arguments().size();
  std::optional<c10::Device> device;
  std::optional<c10::Device> other;
  auto visit = [&](const at::Tensor& t, bool may_be_scalar) {
    if (!t.defined()) return;
    if (t.device().type() == c10::DeviceType::PrivateUse1) {
      if (!device) device = t.device();
      else if (*device != t.device()) other = t.device();
    } else if (!(may_be_scalar && is_cpu_scalar(t))) {
      other = t.device();
    }
  };
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    const ArgClass kind = info.arg_classes[i - first];
    if (kind == ArgClass::kTensor && v.isTensor()) {
      visit(v.toTensor(), !is_mutated(info, i - first));
    } else if (kind == ArgClass::kTensorList && is_tensor_list(v)) {
      // As CUDA: index tensors (Tensor?[]) may be on the CPU and are copied over, and so are a foreach op's
      // 0-dim CPU scalars; any other CPU element of a Tensor[] (torch.cat, torch.stack) is a device mismatch.
      for (const at::Tensor& t : list_elements(v)) {
        if (!t.defined() || !t.device().is_cpu() || (v.isTensorList() && t.dim() > 0)) visit(t, false);
      }
    }
  }
  if (!device) {
    // A factory (no tensor arguments): its device argument names the device, the current one without an index.
    for (size_t i = first; i < stack.size(); ++i) {
      if (stack[i].isDevice() && stack[i].toDevice().type() == c10::DeviceType::PrivateUse1) {
        const c10::Device named = stack[i].toDevice();
        device = named.has_index() ? named : c10::impl::VirtualGuardImpl(c10::DeviceType::PrivateUse1).getDevice();
      }
    }
  }
  if (!device) {
    // A tpu generator given to an op on CPU tensors brings the call here: CPU's (and CUDA's) words for it.
    for (size_t i = first; i < stack.size(); ++i) {
      TORCH_CHECK(!stack[i].isGenerator() || stack[i].toGenerator().device().type() != c10::DeviceType::PrivateUse1,
                  "Expected a 'cpu' device type for generator but found 'tpu'");
    }
  }
  TORCH_CHECK(device.has_value(), schema.name(), ": expected a tpu tensor argument");
  TORCH_CHECK(!other.has_value(), "Expected all tensors to be on the same device, but found at least two devices, ",
              *device, " and ", *other, "!");
  return device->index();
}

ProgramCacheStats program_cache_stats() {
  return {static_cast<int64_t>(program_cache().size()), program_cache().evictions(),
          static_cast<int64_t>(cache::max_programs())};
}

void run_lowered_op(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack) {
  const runtime::OpScope exit_scope;  // lets interpreter exit wait for this op (docs/reliability.md)
  if (log_ops()) std::fprintf(stderr, "[torchtpu] %s\n", info.name.c_str());
  const size_t first = stack->size() - op.schema().arguments().size();
  const c10::DeviceIndex device = common_device(info, op.schema(), *stack);
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
  move_list_tensors(info, *stack, first, device);
  try {
    if (!info.mutated.empty() && has_overlapping_write(info, *stack, first) &&
        run_on_host_storages(op, info, stack, first)) {
      return;
    }
    const uint64_t static_scalars = info.static_scalars.load();
    // A call over grown tensors first tries its padded program (aten/append.h); one whose results do not
    // follow the length finds a signature saying so and runs as shaped.
    bool pad_rows = true;
    // Threads racing for one new program compile it once; the others wait and take it as a hit.
    auto build = [&] {
      const std::vector<std::vector<int64_t>> mutated_sizes = sizes_of_mutated(info, *stack, first);
      std::shared_ptr<OpSignature> built = build_op(op, info, *stack, first, pad_rows);
      if (built->runs_as_shaped) return std::make_pair(built, true);
      info.counters->compiles++;
      watch_recompiles(info, *stack, first);
      // A program is filed under the key of the arguments as they came (building resizes out= tensors). If
      // the rule has just made a scalar a compile-time value, that key lacks the value and no later call
      // makes it: the program goes under the key later calls make instead, which is this call's key now
      // when building resized nothing (else the program runs once unfiled).
      if (info.static_scalars.load() == static_scalars) return std::make_pair(built, true);
      if (sizes_of_mutated(info, *stack, first) == mutated_sizes) {
        program_cache().insert(op_key(info, *stack, first, pad_rows), built);
      }
      return std::make_pair(built, false);
    };
    bool built = false;
    std::shared_ptr<OpSignature> signature;
    try {
      signature = program_cache().find_or_build(op_key(info, *stack, first), build, built);
      if (signature->runs_as_shaped) {
        pad_rows = false;
        signature = program_cache().find_or_build(op_key(info, *stack, first, false), build, built);
      }
    } catch (const RunsOnCpu&) {
      // The fallback consumes its stack: it gets its own references to the arguments.
      torch::jit::Stack arguments(stack->begin() + static_cast<std::ptrdiff_t>(first), stack->end());
      cpu_fallback(op, &arguments);
      for (c10::IValue& v : arguments) stack->push_back(std::move(v));
      return;
    }
    if (!built) {
      info.counters->cache_hits++;
      // out= arguments take the shapes recorded when the program was built.
      for (const OutputBinding& write : signature->writes) {
        if (write.element >= 0) continue;
        at::Tensor& out = (*stack)[first + write.arg].toTensor();
        if (out.sizes() != c10::IntArrayRef(write.sizes)) out.resize_(write.sizes);
      }
    }
    if (!info.overflow_checked.empty()) check_scalars_fit(info, *signature, *stack, first);
    const bool check_errors = info.check_errors_arg >= 0 && (*stack)[first + info.check_errors_arg].toBool();
    const eager::Mode mode = eager::mode();
    if (mode == eager::Mode::kFused && !check_errors) {
      record(info, signature, *stack, first, device);
    } else {
      run(info, *signature, *stack, first, device);
    }
    // Debug mode: a failed value check raises at the op that made it.
    if (signature->checks_values && mode == eager::Mode::kDebug) raise_value_errors(device);
    // What the CPU kernels do with check_errors=True: raise PyTorch's error for the first failed matrix.
    if (check_errors) {
      const at::Tensor& info_tensor = stack->back().toTensor();
      at::_linalg_check_errors(info_tensor, info.linalg_api, info_tensor.dim() == 0);
    }
  } catch (const runtime::PjrtError& e) {
    throw_device_error(info.name, e);
  }
}

void op_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  const auto first = static_cast<std::ptrdiff_t>(stack->size() - op.schema().arguments().size());
  const auto arguments = static_cast<std::ptrdiff_t>(op.schema().arguments().size());
  run_lowered_op(op, op_info(op), stack);
  stack->erase(stack->begin() + first, stack->begin() + first + arguments);
}

}  // namespace torchtpu::aten
