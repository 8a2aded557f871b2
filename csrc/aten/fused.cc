#include "aten/fused.h"

#include <Python.h>

#include <c10/util/Exception.h>
#include <c10/util/ThreadLocalDebugInfo.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/graph_task.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "aot/recorder.h"
#include "aten/device_error.h"
#include "aten/metrics.h"
#include "aten/sharding.h"
#include "aten/value_checks.h"
#include "cache/disk_cache.h"
#include "cache/program_cache.h"
#include "eager/driver.h"
#include "runtime/error.h"
#include "runtime/plugin.h"

namespace torchtpu::aten {
// A recorded op's results are bound to storages; only those still holding the value at flush time are
// program results.
struct Binding {
  int op;
  int output;
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  runtime::ShardingPtr sharding;  // the storage's sharding before the trace (PendingValue::sharding)
};

struct TraceOp {
  std::shared_ptr<OpSignature> signature;
  TraceSources sources;
};

struct Trace {
  uint64_t id = 0;
  int device = -1;
  std::vector<TraceOp> ops;
  std::vector<runtime::BufferPtr> externals;
  // Per external. A storage read several times is one external (StorageHandle::trace_external); every
  // other external is its own, even when a cached scalar buffer makes two of them the same buffer: a trace's
  // wiring, and so its program, must not depend on which values happen to be equal.
  std::vector<ExternalOrigin> origins;
  std::vector<Binding> bindings;
  // The external that was a storage's buffer when the trace first read it: a live result for that storage
  // may take the buffer over (donation), as an in-place update does in strict mode.
  std::unordered_map<const c10::StorageImpl*, int> original_external;
  cache::ProgramKey key;  // op ids and wiring, as recorded
  bool capturing = false;  // begun by begin_capture(): any flush ends the capture, even of no ops
  std::thread::id owner;  // whose trace it is (trace_owner()), and so whose value-check state it updates
};

namespace {

// Names the thread whose trace a backward pass records into: each recording thread puts it in its
// c10::ThreadLocalDebugInfo, which autograd hands to the device thread running the thread's backward pass.
constexpr std::string_view kTraceOwnerName = "torchtpu fused trace owner";
const c10::DebugInfoKind kTraceOwner(&kTraceOwnerName);
struct TraceOwner : c10::DebugInfoBase {
  explicit TraceOwner(std::thread::id thread) : owner(thread) {}
  std::thread::id owner;
};

// Empties a trace; it stays its owner's.
void reset(Trace& t) {
  const std::thread::id owner = t.owner;
  t = Trace{};
  t.owner = owner;
}

// Moves the recorded ops out of `t` to run them, leaving it empty with room for as many: a loop records
// traces of one size, so the next one's vectors do not regrow op by op.
Trace take_recorded(Trace& t) {
  Trace taken = std::move(t);
  reset(t);
  t.ops.reserve(taken.ops.size());
  t.externals.reserve(taken.externals.size());
  t.origins.reserve(taken.origins.size());
  t.bindings.reserve(taken.bindings.size());
  return taken;
}

// TORCHTPU_FUSED_OP_BY_OP=1 runs every trace op by op: tells a fusion problem from a recording one.
bool op_by_op_requested() {
  static const bool requested = [] {
    const char* env = std::getenv("TORCHTPU_FUSED_OP_BY_OP");
    return env != nullptr && std::string(env) == "1";
  }();
  return requested;
}

// A trace shape runs op by op (its ops' programs are compiled already) until it has been seen this many
// times, then as one compiled program: one-off work (a notebook cell, a test, a first step whose optimizer
// state is new) pays no fused compile, and a loop compiles its step once it repeats. A program on disk
// is used at first sight. TORCHTPU_FUSE_AFTER=1 compiles every trace at first sight.
int fuse_after() {
  static const int sightings = [] {
    const char* env = std::getenv("TORCHTPU_FUSE_AFTER");
    return env != nullptr && *env != '\0' ? std::max(1, std::atoi(env)) : 2;
  }();
  return sightings;
}

// More ops than this in one trace flush it: compile time grows with the program.
constexpr size_t kMaxTraceOps = 2000;

std::recursive_mutex& trace_mutex() {
  static std::recursive_mutex m;
  return m;
}

// Every thread's trace, by owner; read and changed under trace_mutex(). Leaked on purpose: buffers and
// programs must not be destroyed after the plugin at exit.
std::unordered_map<std::thread::id, Trace>& traces() {
  static auto* all = new std::unordered_map<std::thread::id, Trace>;
  return *all;
}

// The calling thread's trace (caller holds trace_mutex()). Stays at its address: the map's nodes do, and
// none is erased, so a thread keeps its own at hand and looks the map up only for another owner's (its
// backward pass on a device thread).
Trace& current() {
  thread_local Trace* own = nullptr;
  const std::thread::id owner = trace_owner();
  if (own != nullptr && own->owner == owner) return *own;
  auto [it, added] = traces().try_emplace(owner);
  if (added) it->second.owner = owner;
  if (owner == std::this_thread::get_id()) own = &it->second;
  return it->second;
}

uint64_t next_trace_id() {
  static std::atomic<uint64_t> next{1};
  return next++;
}

cache::ProgramCache<FusedProgram>& fused_programs() { return cache::process_program_cache<FusedProgram>(); }

struct Counters {
  std::atomic<int64_t> ops_recorded{0}, programs_run{0}, compiles{0}, op_by_op_runs{0};
  std::mutex flush_mutex;
  std::map<std::string, int64_t> flushes;
};
Counters& counters() {
  static Counters c;
  return c;
}

// The op program's module split into its helper functions (the module-level functions before @main, e.g.
// a custom kernel's; their names are unique to their origin) and @main as a private function named `name`:
// the module wrapper goes and argument attributes (input/output aliasing, which only @main may carry) are
// dropped.
std::pair<std::string, std::string> as_function(const std::string& module, const std::string& name) {
  const size_t body = module.find("{\n") + 2;
  const size_t begin = module.find("  func.func public @main(");
  const size_t end = module.rfind('}', module.rfind('}') - 1);  // the function's closing brace
  TORCH_INTERNAL_ASSERT(begin != std::string::npos && end != std::string::npos, "unexpected op program text");
  std::string f = module.substr(begin + 2, end - begin - 1);
  f.replace(0, std::string("func.func public @main(").size(), "func.func private @" + name + "(");
  for (size_t at; (at = f.find(" {tf.aliasing_output")) != std::string::npos;) f.erase(at, f.find('}', at) - at + 1);
  return {module.substr(body, begin - body), f};
}

std::string type_list(const std::vector<std::string>& types) {
  std::string s = "(";
  for (size_t i = 0; i < types.size(); ++i) s += (i ? ", " : "") + types[i];
  return s + ")";
}

std::string array_type(const runtime::ArrayType& t) { return ir::to_mlir(ir::Type{t.dtype, t.dims}); }

// The device's value-check state when an op of the trace updates it (its recording marked it unread), else null.
CheckState* updated_check_state(const Trace& trace) {
  const bool checked = std::any_of(trace.ops.begin(), trace.ops.end(),
                                   [](const TraceOp& op) { return op.signature->checks_values; });
  return checked ? &check_state(trace.device, trace.owner) : nullptr;
}

// Which externals a flush passes to its program, and the value of each one it compiles in instead.
struct TraceParameters {
  std::vector<int> externals;         // parameter p is external externals[p]
  std::vector<int> parameter_of;      // per external: its parameter, or -1 when compiled in
  std::vector<std::string> literals;  // per external: its StableHLO literal when compiled in, else empty
};

// Larger fixed arrays stay parameters: a constant's text and compile-time folding grow with it.
constexpr int64_t kMaxCompiledInElements = 16;

// The value of `buffer` as a StableHLO dense literal (floats as hex bit patterns, so exact), or empty when
// its type or size is not one compiled in.
std::string dense_literal(const runtime::Buffer& buffer) {
  const DType dtype = buffer.dtype();
  const bool spelled = dtype == DType::kF64 || dtype == DType::kF32 || dtype == DType::kI64 ||
                       dtype == DType::kI32 || dtype == DType::kBool;
  if (!spelled || buffer.sharding() != nullptr || buffer.dims().size() > 1 ||
      buffer.numel() > kMaxCompiledInElements) {
    return {};
  }
  std::vector<uint8_t> bytes(buffer.nbytes());
  runtime::download(buffer, bytes.data());
  std::ostringstream text;
  if (!buffer.dims().empty()) text << "[";
  for (int64_t i = 0; i < buffer.numel(); ++i) {
    const uint8_t* element = bytes.data() + i * static_cast<int64_t>(element_size(dtype));
    if (i > 0) text << ", ";
    if (dtype == DType::kBool) {
      text << (*element ? "true" : "false");
    } else if (dtype == DType::kF64) {
      double value;
      std::memcpy(&value, element, sizeof value);
      text << ir::float_literal(value, dtype);
    } else if (dtype == DType::kF32) {
      float value;
      std::memcpy(&value, element, sizeof value);
      text << ir::float_literal(value, dtype);
    } else if (dtype == DType::kI64) {
      int64_t value;
      std::memcpy(&value, element, sizeof value);
      text << value;
    } else {
      int32_t value;
      std::memcpy(&value, element, sizeof value);
      text << value;
    }
  }
  if (!buffer.dims().empty()) text << "]";
  return text.str();
}

// A flush's parameters. A captured graph (aten/compiled_graph.h) replays with the same view offsets and the
// same scalars of its own (Python numbers in the graph), so its program takes those as constants: XLA then
// folds them (a dynamic_slice at a constant offset becomes a slice, a multiply by one goes). Their values
// join `key`. Any other flush passes every external: a repeated step must not compile per value.
TraceParameters trace_parameters(const Trace& trace, bool capture, cache::ProgramKey& key) {
  TraceParameters parameters;
  parameters.literals.resize(trace.externals.size());
  for (size_t e = 0; e < trace.externals.size(); ++e) {
    const ExternalOrigin& origin = trace.origins[e];
    const bool fixed = origin.kind == ExternalOrigin::Kind::kConstant ||
                       (origin.kind == ExternalOrigin::Kind::kCpuScalar &&
                        origin.cpu_scalar.unsafeGetTensorImpl()->is_wrapped_number());
    if (capture && fixed) parameters.literals[e] = dense_literal(*trace.externals[e]);
    if (parameters.literals[e].empty()) {
      parameters.parameter_of.push_back(static_cast<int>(parameters.externals.size()));
      parameters.externals.push_back(static_cast<int>(e));
      continue;
    }
    parameters.parameter_of.push_back(-1);
    key.add(static_cast<int64_t>(e));
    key.add_string(parameters.literals[e]);
  }
  return parameters;
}

// SPMD (docs/distributed.md): a trace is partitioned as a strict-mode op program is (aten/sharding.h
// partition_program), its externals as parameters; a result for a storage keeps the sharding the storage had
// before the trace. Returns the annotations, or nullopt when the trace is not partitioned.
std::optional<ProgramShardings> partition_trace(const Trace& trace, const TraceParameters& parameters,
                                                const std::vector<const Binding*>& live,
                                                const std::vector<c10::intrusive_ptr<c10::StorageImpl>>& storages,
                                                std::vector<std::pair<int, int>>& donations) {
  std::vector<const runtime::Sharding*> externals;
  for (int e : parameters.externals) externals.push_back(trace.externals[static_cast<size_t>(e)]->sharding());
  std::vector<const runtime::Sharding*> kept_results;
  std::optional<size_t> check_state_result;
  const CheckState* checks = updated_check_state(trace);
  for (size_t i = 0; i < live.size(); ++i) {
    kept_results.push_back(live[i]->sharding.get());
    if (checks != nullptr && storages[i].get() == checks->tensor.storage().unsafeGetStorageImpl()) {
      check_state_result = i;
    }
  }
  std::optional<ProgramShardings> shardings = partition_program(externals, kept_results, check_state_result);
  if (!shardings) return std::nullopt;
  donations.erase(std::remove_if(donations.begin(), donations.end(),
                                 [&](const std::pair<int, int>& d) {
                                   return !may_donate(externals[static_cast<size_t>(d.first)],
                                                      kept_results[static_cast<size_t>(d.second)]);
                                 }),
                  donations.end());
  return shardings;
}

// One module: every distinct op program as a function, and @main calling them in recorded order.
std::string compose(const Trace& trace, const TraceParameters& parameters, const std::vector<const Binding*>& live,
                    const std::vector<std::pair<int, int>>& donations, std::vector<runtime::ArrayType>& result_types,
                    const std::optional<ProgramShardings>& shardings) {
  const bool partitioned = shardings.has_value();
  std::ostringstream module;
  module << "module @torchtpu_fused {\n";
  std::unordered_map<uint64_t, std::string> function_of;  // op program id -> function name
  std::unordered_set<std::string> helpers;                 // helper functions already in the module
  for (const TraceOp& op : trace.ops) {
    auto [it, added] = function_of.emplace(op.signature->id, "op" + std::to_string(function_of.size()));
    if (!added) continue;
    auto [helper, function] = as_function(op.signature->text, it->second);
    if (!helper.empty() && helpers.insert(helper).second) module << helper;
    module << "  " << function << "\n";
  }
  // External types come from the first parameter each feeds.
  std::vector<std::string> external_types(trace.externals.size());
  for (const TraceOp& op : trace.ops) {
    for (size_t p = 0; p < op.sources.size(); ++p) {
      if (op.sources[p].op < 0) external_types[op.sources[p].index] = ir::to_mlir(op.signature->param_types[p]);
    }
  }
  auto value = [&](const TraceSource& s) {
    if (s.op < 0) return "%e" + std::to_string(s.index);
    return "%r" + std::to_string(s.op) + "#" + std::to_string(s.index);
  };
  for (const Binding* b : live) result_types.push_back(trace.ops[b->op].signature->executable->output_types()[b->output]);
  std::vector<std::string> result_text;
  for (const runtime::ArrayType& t : result_types) result_text.push_back(array_type(t));
  module << "  func.func public @main(";
  for (size_t p = 0; p < parameters.externals.size(); ++p) {
    std::vector<int> aliased_results;
    for (const auto& [parameter, result] : donations) {
      if (parameter == static_cast<int>(p)) aliased_results.push_back(result);
    }
    const int e = parameters.externals[p];
    module << (p ? ", " : "") << "%e" << e << ": " << external_types[static_cast<size_t>(e)]
           << ir::parameter_attributes(partitioned ? shardings->parameters[p] : std::string(), aliased_results);
  }
  std::vector<std::string> result_signature = result_text;
  for (size_t i = 0; partitioned && i < result_signature.size(); ++i) {
    result_signature[i] += ir::result_attributes(shardings->results[i]);
  }
  module << ") -> " << type_list(result_signature) << " {\n";
  for (size_t e = 0; e < parameters.literals.size(); ++e) {
    if (parameters.literals[e].empty()) continue;
    module << "    %e" << e << " = \"stablehlo.constant\"() {value = dense<" << parameters.literals[e] << "> : "
           << external_types[e] << "} : () -> " << external_types[e] << "\n";
  }
  for (size_t k = 0; k < trace.ops.size(); ++k) {
    const TraceOp& op = trace.ops[k];
    std::vector<std::string> in, out;
    for (const ir::Type& t : op.signature->param_types) in.push_back(ir::to_mlir(t));
    for (const runtime::ArrayType& t : op.signature->executable->output_types()) out.push_back(array_type(t));
    // A program with no results (a write of zero elements) computes nothing; a call of it cannot be named.
    if (out.empty()) continue;
    module << "    %r" << k << ":" << out.size() << " = \"func.call\"(";
    for (size_t p = 0; p < op.sources.size(); ++p) module << (p ? ", " : "") << value(op.sources[p]);
    module << ") {callee = @" << function_of[op.signature->id] << "} : " << type_list(in) << " -> " << type_list(out)
           << "\n";
  }
  module << "    \"func.return\"(";
  for (size_t i = 0; i < live.size(); ++i) module << (i ? ", " : "") << value({live[i]->op, live[i]->output});
  module << ") : " << type_list(result_text) << " -> ()\n  }\n}\n";
  return module.str();
}

void count_flush(const char* reason) {
  std::lock_guard<std::mutex> lock(counters().flush_mutex);
  counters().flushes[reason]++;
}

}  // namespace

TraceRecording::TraceRecording(int device) : lock_(lock_trace()), trace_(&current()) {
  Trace& t = *trace_;
  if (!t.ops.empty() && (t.device != device || t.ops.size() >= kMaxTraceOps)) {
    flush_trace(t.device != device ? "device change" : "graph size limit");
  }
  if (t.id == 0) t.id = next_trace_id();
  t.device = device;
}

TraceRecording::~TraceRecording() = default;

TraceSource TraceRecording::storage(const at::Tensor& tensor) {
  StorageHandle& handle = storage_handle(tensor);
  Trace& t = *trace_;
  if (handle.pending && handle.pending->trace == t.id) return {handle.pending->op, handle.pending->output};
  // Read before in this trace, and the storage still holds the buffer it read then.
  const auto still_holds = [&](const PendingValue*, const runtime::Buffer* buffer) {
    return buffer != nullptr && buffer == t.externals[static_cast<size_t>(handle.trace_external)].get();
  };
  if (handle.external_trace == t.id && handle.with_value(still_holds)) {
    return {-1, handle.trace_external};
  }
  ExternalOrigin origin;
  origin.kind = ExternalOrigin::Kind::kStorage;
  origin.storage = tensor.storage().unsafeGetStorageImpl();
  const TraceSource source = external(storage_buffer(tensor), std::move(origin));
  t.original_external.emplace(tensor.storage().unsafeGetStorageImpl(), source.index);
  handle.external_trace = t.id;
  handle.trace_external = source.index;
  return source;
}

TraceSource TraceRecording::external(runtime::BufferPtr buffer, ExternalOrigin origin) {
  Trace& t = *trace_;
  const int index = static_cast<int>(t.externals.size());
  t.externals.push_back(std::move(buffer));
  t.origins.push_back(std::move(origin));
  return {-1, index};
}

int TraceRecording::add_op(const std::shared_ptr<OpSignature>& signature, TraceSources&& sources) {
  Trace& t = *trace_;
  t.key.add(static_cast<int64_t>(signature->id));
  for (const TraceSource& s : sources) {
    t.key.add(s.op);
    t.key.add(s.index);
  }
  TraceOp& op = t.ops.emplace_back();  // filled in place: the sources are copied once, not through a temporary
  op.signature = signature;
  op.sources = std::move(sources);
  counters().ops_recorded++;
  return static_cast<int>(t.ops.size()) - 1;
}

void TraceRecording::bind(int op, int output, const c10::Storage& storage, DType dtype, const std::vector<int64_t>& dims) {
  Trace& t = *trace_;
  StorageHandle& handle = storage_handle(storage);
  // The old buffer is dropped here, after the handle's lock; a trace reading it holds it as an external.
  handle.hold_pending(PendingValue{t.id, op, output, dtype, {dims.begin(), dims.end()}, nullptr});
  // Read without the handle's lock: the pending value changes only under the trace lock, which this holds.
  t.bindings.push_back({op, output, c10::weak_intrusive_ptr<c10::StorageImpl>(storage.getWeakStorageImpl()),
                        handle.pending->sharding});
}

namespace {

std::vector<runtime::BufferPtr> run_fused(const Trace& trace, const TraceParameters& parameters,
                                          const FusedProgram& program) {
  std::vector<const runtime::Buffer*> raw;
  raw.reserve(parameters.externals.size());
  for (int e : parameters.externals) raw.push_back(trace.externals[static_cast<size_t>(e)].get());
  // Donated only where the trace holds the last reference (as in strict mode's in-place updates).
  std::vector<int64_t> kept;
  for (int64_t p : program.aliased_externals) {
    if (trace.externals[static_cast<size_t>(parameters.externals[static_cast<size_t>(p)])].use_count() != 1) {
      kept.push_back(p);
    }
  }
  return eager::execute(*program.executable, trace.device, raw, kept);
}

// Makes a live result of a trace the value of its storage (the device's value-check state is bound as such).
using BindResult = std::function<void(size_t live_index, runtime::BufferPtr buffer)>;

// The trace's ops one program each, in order; binds each live result as soon as its op has run, so that when
// an op fails, the values of the ops before it are kept. Raises the failing op's error as the op itself would
// in strict mode. A buffer goes as soon as no later op reads it, and an op takes over (donates) a buffer it
// reads last that nothing else holds, so memory peaks as in strict mode; `keep_externals` (a compiled graph's
// capture, which replays them) keeps the trace's inputs.
void run_op_by_op(Trace& trace, const std::vector<const Binding*>& live, const BindResult& bind,
                  bool keep_externals) {
  std::vector<std::vector<size_t>> live_of_op(trace.ops.size());
  for (size_t i = 0; i < live.size(); ++i) live_of_op[static_cast<size_t>(live[i]->op)].push_back(i);
  std::vector<std::vector<runtime::BufferPtr>> results(trace.ops.size());
  auto buffer_of = [&](const TraceSource& s) -> runtime::BufferPtr& {
    return s.op < 0 ? trace.externals[static_cast<size_t>(s.index)]
                    : results[static_cast<size_t>(s.op)][static_cast<size_t>(s.index)];
  };
  auto source_id = [](const TraceSource& s) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(s.op)) << 32) | static_cast<uint32_t>(s.index);
  };
  std::unordered_map<uint64_t, size_t> last_reader;
  for (size_t k = 0; k < trace.ops.size(); ++k) {
    for (const TraceSource& s : trace.ops[k].sources) last_reader[source_id(s)] = k;
  }
  // Whether the op at `k` is the last to read `s` and may let its buffer go.
  auto releases = [&](const TraceSource& s, size_t k) {
    return (s.op >= 0 || !keep_externals) && last_reader.at(source_id(s)) == k;
  };
  for (size_t k = 0; k < trace.ops.size(); ++k) {
    const TraceOp& op = trace.ops[k];
    std::vector<const runtime::Buffer*> raw;
    for (const TraceSource& s : op.sources) {
      runtime::BufferPtr& input = buffer_of(s);
      // An op's program was built reading its in-trace inputs whole on one device (a pending value has no
      // sharding yet); a partitioned op's result is gathered for the ops after it.
      if (s.op >= 0 && input->sharding() != nullptr) input = runtime::gather_to_device(*input, trace.device);
      raw.push_back(input.get());
    }
    const runtime::Executable& executable = *op.signature->executable;
    std::vector<int64_t> kept;
    for (int64_t p : executable.aliased_inputs()) {
      const TraceSource& s = op.sources[static_cast<size_t>(p)];
      bool donate = releases(s, k) && buffer_of(s).use_count() == 1;
      for (size_t q = 0; donate && q < raw.size(); ++q) donate = static_cast<int64_t>(q) == p || raw[q] != raw[p];
      if (!donate) kept.push_back(p);
    }
    try {
      results[k] = eager::execute(executable, trace.device, raw, kept);
    } catch (const runtime::PjrtError& e) {
      throw_device_error(executable.name(), e);
    }
    for (size_t i : live_of_op[k]) bind(i, results[k][static_cast<size_t>(live[i]->output)]);
    for (size_t o = 0; o < results[k].size(); ++o) {  // read by no later op: its storage has it, if live
      if (last_reader.count(source_id({static_cast<int>(k), static_cast<int>(o)})) == 0) results[k][o].reset();
    }
    for (const TraceSource& s : op.sources) {
      if (releases(s, k)) buffer_of(s).reset();
    }
  }
}

// Runs `trace` as one program (compiled once per key) and binds its live results. `capture`: the trace is a
// compiled graph's (see trace_parameters).
FlushedTrace run_trace(Trace trace, bool capture = false, bool want_text = false) {

  // Results still needed: storages alive and still holding the value this trace gives them.
  std::vector<const Binding*> live;
  std::vector<c10::intrusive_ptr<c10::StorageImpl>> storages;
  cache::ProgramKey key = trace.key;
  key.add(-1);
  for (const Binding& b : trace.bindings) {
    c10::intrusive_ptr<c10::StorageImpl> storage = b.storage.lock();
    if (!storage) continue;
    const StorageHandle& handle = storage_handle(c10::Storage(storage));
    if (!handle.pending || handle.pending->trace != trace.id || handle.pending->op != b.op ||
        handle.pending->output != b.output) {
      continue;
    }
    live.push_back(&b);
    storages.push_back(std::move(storage));
    key.add(b.op);
    key.add(b.output);
    key.add(b.sharding ? b.sharding->id() : 0);
  }
  const TraceParameters parameters = trace_parameters(trace, capture, key);
  std::shared_ptr<FusedProgram> program = fused_programs().find(key);
  const bool new_shape = program == nullptr;
  // A shape seen before, now seen often enough: its program compiles (and replaces the entry) below.
  // A compiled graph's capture compiles at once, whatever an eager flush of the same shape left.
  if (program && program->sightings > 0 && (capture || ++program->sightings >= fuse_after())) program = nullptr;
  std::string text;
  std::vector<std::pair<int, int>> donations;
  std::vector<runtime::ArrayType> result_types;
  runtime::Partitioning partitioning;
  if (!program || want_text) {
    // A live result may take over the buffer its storage had before the trace, when the types agree.
    for (size_t i = 0; i < live.size(); ++i) {
      auto it = trace.original_external.find(storages[i].get());
      if (it == trace.original_external.end()) continue;
      const runtime::ArrayType& result = trace.ops[live[i]->op].signature->executable->output_types()[live[i]->output];
      const runtime::Buffer& original = *trace.externals[it->second];
      const int parameter = parameters.parameter_of[static_cast<size_t>(it->second)];
      if (original.dtype() == result.dtype && original.dims() == result.dims) donations.emplace_back(parameter, i);
    }
    const std::optional<ProgramShardings> shardings = partition_trace(trace, parameters, live, storages, donations);
    if (shardings) partitioning = shardings->partitioning;
    text = compose(trace, parameters, live, donations, result_types, shardings);
  }
  if (!program) {
    program = std::make_shared<FusedProgram>();
    for (const auto& donation : donations) program->aliased_externals.push_back(donation.first);
    // A new shape waits for its next sighting (fuse_after), except a compiled graph's capture, which is there
    // to be compiled, and a partitioned trace, whose sharded results its op programs cannot give.
    const bool wait =
        new_shape && !capture && fuse_after() > 1 && partitioning.num_partitions <= 1 && !op_by_op_requested();
    if (wait) program->executable = cache::load_cached(text, result_types, program->aliased_externals, partitioning);
    const bool run_op_by_op_now = wait && !program->executable;
    if (log_compiles() && !op_by_op_requested()) {
      const char* what = run_op_by_op_now ? "new" : wait ? "load (from disk)" : "compile";
      std::fprintf(stderr, "[torchtpu] %s fused trace of %zu op%s (%s ... %s)%s\n", what, trace.ops.size(),
                   trace.ops.size() == 1 ? "" : "s", trace.ops.front().signature->executable->name().c_str(),
                   trace.ops.back().signature->executable->name().c_str(),
                   run_op_by_op_now ? ": runs op by op until it comes again" : "");
    }
    if (run_op_by_op_now) {
      program->sightings = 1;
    } else {
      aot::record("fused trace of " + std::to_string(trace.ops.size()) + " ops", text, partitioning.num_partitions);
      try {
        if (!program->executable && !op_by_op_requested()) {
          program->executable =
              cache::load_or_compile(text, std::move(result_types), program->aliased_externals, partitioning);
        }
      } catch (const runtime::PjrtError& e) {
        // Every op program compiled on its own, so the trace can still run op by op; remembered per key.
        TORCH_WARN_ONCE("torchtpu: a fused program did not compile (", e.what(),
                        "); such traces run op by op instead");
      }
      counters().compiles++;
    }
    if (program->executable) {
      program->executable->set_name("fused program of " + std::to_string(trace.ops.size()) + " ops");
    } else {
      program->aliased_externals.clear();
    }
    fused_programs().insert(key, program);
  }
  CheckState* checks = updated_check_state(trace);
  const BindResult bind = [&](size_t i, runtime::BufferPtr buffer) {
    if (checks != nullptr && storages[i].get() == checks->tensor.storage().unsafeGetStorageImpl()) {
      bind_check_state(*checks, std::move(buffer));
    } else {
      storage_handle(c10::Storage(storages[i])).set_buffer(std::move(buffer));
    }
  };
  counters().programs_run++;
  if (!program->executable) {
    counters().op_by_op_runs++;
    run_op_by_op(trace, live, bind, capture);
  } else {
    std::vector<runtime::BufferPtr> outputs;
    try {
      outputs = run_fused(trace, parameters, *program);
    } catch (const runtime::PjrtError& e) {
      // The program failed as it was launched (its results did not fit in memory, say). Op by op, the ops
      // before the failing one keep their values and the failing op raises its own error, as in strict mode;
      // if every op runs (one at a time they may fit), the flush has succeeded after all.
      const std::string fused_error = e.what();
      run_op_by_op(trace, live, bind, capture);
      TORCH_WARN("torchtpu: a fused program of ", trace.ops.size(), " ops failed to run (", fused_error,
                 "); its ops ran one by one instead");
    }
    for (size_t i = 0; i < outputs.size(); ++i) bind(i, std::move(outputs[i]));
  }
  FlushedTrace flushed{std::move(program), trace.device, {}, {}, std::move(storages),
                       want_text ? std::move(text) : std::string()};
  for (int e : parameters.externals) {
    flushed.externals.push_back(std::move(trace.externals[static_cast<size_t>(e)]));
    flushed.origins.push_back(std::move(trace.origins[static_cast<size_t>(e)]));
  }
  return flushed;
}

}  // namespace

TraceLock TraceLock::acquire() {
  TraceLock held;
  // Checked first: a thread torch started without a Python thread state has no GIL to give.
  if (Py_IsInitialized() && PyGILState_Check()) held.released_gil_ = PyEval_SaveThread();
  held.lock_ = std::unique_lock<std::recursive_mutex>(trace_mutex());
  return held;
}

TraceLock::TraceLock(TraceLock&& other) noexcept
    : lock_(std::move(other.lock_)), released_gil_(std::exchange(other.released_gil_, nullptr)) {}

TraceLock& TraceLock::operator=(TraceLock&& other) noexcept {
  if (this != &other) {
    unlock();
    lock_ = std::move(other.lock_);
    released_gil_ = std::exchange(other.released_gil_, nullptr);
  }
  return *this;
}

void TraceLock::unlock() {
  if (lock_.owns_lock()) lock_.unlock();
  if (released_gil_ != nullptr) PyEval_RestoreThread(static_cast<PyThreadState*>(std::exchange(released_gil_, nullptr)));
}

TraceLock lock_trace() { return TraceLock::acquire(); }

namespace {

// Runs `t`, one of traces(), and leaves it empty (caller holds trace_mutex()).
void run_and_clear(Trace& t, const char* reason) {
  if (t.ops.empty()) {
    // A compiled graph's capture that something flushed (a host read, a data-dependent shape) no longer
    // describes the graph, even when no op had been recorded yet: end_capture finds another trace.
    if (t.capturing) reset(t);
    return;
  }
  Trace trace = take_recorded(t);
  count_flush(reason);
  run_trace(std::move(trace));
}

}  // namespace

std::thread::id trace_owner() {
  const std::thread::id self = std::this_thread::get_id();
  const auto* info = static_cast<const TraceOwner*>(c10::ThreadLocalDebugInfo::get(kTraceOwner));
  if (torch::autograd::get_current_graph_task_id() != -1) return info != nullptr ? info->owner : self;
  // A thread's debug info goes with every backward pass it starts (autograd's ThreadLocalState).
  if (info == nullptr || info->owner != self) {
    c10::ThreadLocalDebugInfo::_push(kTraceOwner, std::make_shared<TraceOwner>(self));
    watch_owner_exit();
  }
  return self;
}

void flush_trace(const char* reason) {
  const TraceLock lock = lock_trace();
  run_and_clear(current(), reason);
}

void flush_trace_computing(const StorageHandle& handle, const char* reason) {
  if (!handle.is_pending()) return;  // a buffer: no trace lock to take
  const TraceLock lock = lock_trace();
  if (!handle.pending) return;  // computed meanwhile by another thread's flush
  const uint64_t trace_id = handle.pending->trace;
  Trace& own = current();
  if (own.id == trace_id) {
    run_and_clear(own, reason);
    return;
  }
  for (auto& [owner, t] : traces()) {
    if (t.id == trace_id) {
      run_and_clear(t, "value of another thread's trace");
      return;
    }
  }
}

bool pending_in_another_thread(const StorageHandle& handle) {
  const TraceLock lock = lock_trace();
  return handle.pending && handle.pending->trace != current().id;
}

void flush_traces_of(const std::set<std::thread::id>& owners, const char* reason) {
  const TraceLock lock = lock_trace();
  std::vector<Trace*> recorded;  // collected first, as in flush_every_trace
  for (auto& [owner, t] : traces()) {
    if (owners.count(owner) > 0 && !t.ops.empty()) recorded.push_back(&t);
  }
  for (Trace* t : recorded) run_and_clear(*t, reason);
}

void flush_every_trace(int device, const char* reason) {
  const TraceLock lock = lock_trace();
  // Collected first: running a trace must not meet the map changing under it.
  std::vector<Trace*> recorded;
  for (auto& [owner, t] : traces()) {
    if (!t.ops.empty() && (device < 0 || t.device == device)) recorded.push_back(&t);
  }
  for (Trace* t : recorded) run_and_clear(*t, reason);
}

uint64_t begin_capture() {
  const TraceLock lock = lock_trace();
  flush_trace("compiled graph");
  Trace& t = current();
  t.id = next_trace_id();
  t.capturing = true;
  return t.id;
}

void end_capture_at_host_read() {
  const TraceLock lock = lock_trace();
  if (current().capturing) flush_trace("host read");
}

std::optional<FlushedTrace> end_capture(uint64_t id, bool want_text) {
  const TraceLock lock = lock_trace();
  Trace& t = current();
  if (t.id != id || t.ops.empty()) {
    flush_trace("compiled graph");
    return std::nullopt;
  }
  Trace trace = take_recorded(t);
  count_flush("compiled graph");
  return run_trace(std::move(trace), /*capture=*/true, want_text);
}

FusedStats fused_stats() {
  FusedStats s;
  s.ops_recorded = counters().ops_recorded;
  s.programs_run = counters().programs_run;
  s.compiles = counters().compiles;
  s.op_by_op_runs = counters().op_by_op_runs;
  std::lock_guard<std::mutex> lock(counters().flush_mutex);
  for (const auto& [reason, n] : counters().flushes) s.flushes.emplace_back(reason, n);
  return s;
}

void reset_fused_stats() {
  counters().ops_recorded = 0;
  counters().programs_run = 0;
  counters().compiles = 0;
  counters().op_by_op_runs = 0;
  std::lock_guard<std::mutex> lock(counters().flush_mutex);
  counters().flushes.clear();
}

}  // namespace torchtpu::aten
