#include "aten/op_kernel.h"

#include <ATen/native/TypeProperties.h>
#include <ATen/ops/_linalg_check_errors.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros_like.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "aten/fallback.h"
#include "aten/generator.h"
#include "aten/metrics.h"
#include "aten/storage.h"
#include "aten/storage_ops.h"
#include "cache/program_key.h"
#include "eager/driver.h"
#include "lowering/rule.h"
#include "lowering/view.h"
#include "runtime/error.h"
#include "runtime/executable.h"

namespace torchtpu::aten {
namespace {

using lowering::Arg;
using lowering::ViewGeometry;

// Where a program parameter comes from: argument `arg`, element `element` of a tensor list (or -1).
struct ParamSource {
  size_t arg;
  int element;
};

// How one program output is bound: a new tensor, or the new storage contents of a mutated argument.
struct OutputBinding {
  std::vector<int64_t> sizes;  // functional output sizes (contiguous), or the mutated arg's sizes
  at::ScalarType dtype;
  DType buffer_dtype;          // the program output's element type
  std::vector<int64_t> buffer_dims;
  size_t arg;                  // for writes: the mutated argument's index
  bool defined = true;         // false: an undefined result (a backward op's output_mask entry was false)
};

struct CompiledOp {
  std::unique_ptr<runtime::Executable> executable;
  std::vector<ParamSource> params;
  std::vector<OutputBinding> functional;  // in return order
  std::vector<OutputBinding> writes;      // one per mutated argument present, in argument order
  bool uses_rng = false;
  int64_t rng_draws = 0;
};

// Everything about one overload that does not depend on its arguments, built on first call.
struct OpState {
  std::string name;  // "aten::add_.Tensor"
  const lowering::Rule* rule = nullptr;
  std::vector<size_t> mutated;  // argument indices written by the op
  bool is_out_variant = false;
  // The `bool check_errors` argument of the linalg *_ex ops, -1 if none: when set, a failed factorization
  // raises like the CPU kernels do, from the op's last result (info), naming the op as `linalg_api`.
  int check_errors_arg = -1;
  std::string linalg_api;
  OpCounters* counters = nullptr;
  std::mutex mutex;
  std::unordered_map<cache::ProgramKey, std::shared_ptr<CompiledOp>, cache::ProgramKeyHash> programs;
};

std::string full_name(const c10::FunctionSchema& schema) {
  return schema.overload_name().empty() ? schema.name() : schema.name() + "." + schema.overload_name();
}

// "name:type" of each argument that is not written (the out= arguments of out overloads are dropped).
std::vector<std::string> input_signature(const c10::FunctionSchema& schema, bool drop_written) {
  std::vector<std::string> signature;
  for (const auto& a : schema.arguments()) {
    if (drop_written && a.alias_info() && a.alias_info()->isWrite()) continue;
    signature.push_back(a.name() + ":" + a.type()->str());
  }
  return signature;
}

// The functional overload of `functional_name` whose arguments match this in-place or out= overload's
// inputs by name and type (an alias annotation is not part of the type): add.out must map to add.Tensor,
// not to add.Scalar with the same argument names, and pow_.Scalar to pow.Tensor_Scalar, not to pow.Scalar.
std::string functional_of(const c10::FunctionSchema& schema, const std::string& functional_name, bool is_out) {
  const std::vector<std::string> wanted = input_signature(schema, is_out);
  for (const c10::OperatorName& name : c10::Dispatcher::singleton().getAllOpNames()) {
    if (name.name != functional_name) continue;
    auto handle = c10::Dispatcher::singleton().findSchema(name);
    if (!handle || !handle->hasSchema() || handle->schema().is_mutable()) continue;
    std::vector<std::string> candidate = input_signature(handle->schema(), false);
    if (candidate == wanted) return full_name(handle->schema());
  }
  return "";
}

// The name PyTorch's linalg errors give an op: "aten::_linalg_solve_ex.result" -> "linalg.solve_ex".
std::string linalg_api_name(const std::string& op_name) {
  std::string api = op_name.substr(op_name.find("::") + 2);
  api = api.substr(0, api.find('.'));
  if (api.rfind('_', 0) == 0) api.erase(0, 1);
  if (api.rfind("linalg_", 0) == 0) api.replace(6, 1, ".");
  return api;
}

const lowering::Rule* derive_rule(const c10::FunctionSchema& schema, bool is_out) {
  if (const lowering::Rule* exact = lowering::find_rule(full_name(schema))) return exact;
  std::string base = schema.name();
  if (!is_out) {
    if (base.empty() || base.back() != '_') return nullptr;
    base.pop_back();  // in-place "foo_" -> functional "foo"
  }
  const std::string functional = functional_of(schema, base, is_out);
  return functional.empty() ? nullptr : lowering::find_rule(functional);
}

OpState& op_state(const c10::OperatorHandle& op) {
  static std::mutex registry_mutex;
  static std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpState>> states;
  const c10::FunctionSchema* schema = &op.schema();
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& slot = states[schema];
  if (!slot) {
    auto state = std::make_unique<OpState>();
    state->name = full_name(*schema);
    const auto& arguments = schema->arguments();
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (arguments[i].alias_info() && arguments[i].alias_info()->isWrite()) {
        state->mutated.push_back(i);
        if (arguments[i].kwarg_only()) state->is_out_variant = true;
      }
      if (arguments[i].name() == "check_errors") {
        state->check_errors_arg = static_cast<int>(i);
        state->linalg_api = linalg_api_name(state->name);
      }
    }
    state->rule = derive_rule(*schema, state->is_out_variant);
    TORCH_CHECK(state->rule != nullptr, "torchtpu: no lowering rule for ", state->name,
                " although it is registered for tpu (this is a torchtpu bug)");
    state->counters = &op_counters(state->name);
    slot = std::move(state);
  }
  return *slot;
}

bool is_mutated(const OpState& state, size_t arg) {
  for (size_t m : state.mutated) {
    if (m == arg) return true;
  }
  return false;
}

bool is_cpu_scalar(const at::Tensor& t) { return t.device().is_cpu() && t.dim() == 0; }

bool is_tensor_list(const c10::IValue& v) { return v.isTensorList() || v.isOptionalTensorList(); }

// Elements of a Tensor[] or Tensor?[] argument; a missing optional element is an undefined tensor.
std::vector<at::Tensor> list_elements(const c10::IValue& v) {
  std::vector<at::Tensor> out;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) out.push_back(t);
  } else {
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) out.push_back(t.value_or(at::Tensor()));
  }
  return out;
}

// The same kind of list as `like`, holding `elements`.
c10::IValue make_list(const c10::IValue& like, const std::vector<at::Tensor>& elements) {
  if (like.isTensorList()) return c10::List<at::Tensor>(elements);
  c10::List<std::optional<at::Tensor>> list;
  for (const at::Tensor& t : elements) list.push_back(t.defined() ? std::optional<at::Tensor>(t) : std::nullopt);
  return list;
}

ViewGeometry geometry(const at::Tensor& t) {
  return ViewGeometry{to_dtype(t.scalar_type()), t.sizes().vec(), t.strides().vec(), t.storage_offset()};
}

// Whether the rule reads the argument's current value: out= arguments and the self of ops that overwrite
// it (fill_, copy_, uniform_, ...) are only written.
bool rule_reads(const OpState& state, size_t arg) {
  if (!is_mutated(state, arg)) return true;
  if (state.is_out_variant) return false;
  return !(state.rule->overwrites_first_arg && arg == 0);
}

// A write replaces the whole buffer when the view covers its storage; otherwise it scatters into it.
bool replaces_storage(const at::Tensor& t) {
  const auto [dtype, numel] = storage_layout(t);
  return lowering::covers_storage(geometry(t), dtype, numel);
}

void add_tensor_to_key(cache::ProgramKey& key, const at::Tensor& t) {
  if (!t.defined()) {
    key.add(-1);
    return;
  }
  key.add(static_cast<int64_t>(t.scalar_type()));
  if (is_cpu_scalar(t)) {
    // Scalars are baked into the program as constants: their bytes identify them exactly, without a
    // dispatched item() on the hot path.
    int64_t bits = 0;
    std::memcpy(&bits, t.const_data_ptr(), std::min<size_t>(t.element_size(), sizeof bits));
    key.add(1);
    key.add(bits);
    return;
  }
  key.add(0);
  key.add_list(t.sizes().data(), t.sizes().size());
  key.add_list(t.strides().data(), t.strides().size());
  key.add(t.storage_offset());
  const auto [dtype, numel] = storage_layout(t);
  key.add(static_cast<int64_t>(dtype));
  key.add(numel);
}

void add_scalar_to_key(cache::ProgramKey& key, const c10::Scalar& s) {
  if (s.isFloatingPoint()) {
    key.add(10);
    key.add_double(s.toDouble());
  } else if (s.isBoolean()) {
    key.add(11);
    key.add(s.toBool());
  } else {
    TORCH_CHECK(!s.isComplex(), "tpu does not support complex scalars yet");
    key.add(12);
    key.add(s.toLong());
  }
}

cache::ProgramKey make_key(const OpState& state, const torch::jit::Stack& stack, size_t first) {
  cache::ProgramKey key;
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      add_tensor_to_key(key, v.toTensor());
    } else if (is_tensor_list(v)) {
      const std::vector<at::Tensor> list = list_elements(v);
      key.add(static_cast<int64_t>(list.size()));
      for (const at::Tensor& t : list) add_tensor_to_key(key, t);
    } else if (v.isNone()) {
      key.add(-2);
    } else if (v.isScalar()) {
      add_scalar_to_key(key, v.toScalar());
    } else if (v.isIntList()) {
      const auto ints = v.toIntVector();
      key.add_list(ints.data(), ints.size());
    } else if (v.isDoubleList()) {
      const std::vector<double> reals = v.toDoubleVector();
      key.add(static_cast<int64_t>(reals.size()));
      for (double r : reals) key.add_double(r);
    } else if (v.isString()) {
      key.add_string(v.toStringRef());
    } else if (v.isBoolList()) {
      const c10::List<bool> bools = v.toBoolList();
      key.add(static_cast<int64_t>(bools.size()));
      for (bool b : bools) key.add(b);
    } else if (v.isDevice()) {
      key.add(v.toDevice().index());
    } else if (v.isGenerator()) {
      key.add(-3);  // the generator's state is a runtime input, not part of the program
    } else {
      TORCH_CHECK(false, "torchtpu: ", state.name, " has an argument kind the tpu kernel does not handle: ",
                  v.tagKind());
    }
  }
  return key;
}

// ---- Building a program on a cache miss -------------------------------------------------------------

at::Tensor to_meta(const at::Tensor& t) {
  if (!t.defined() || t.device().is_cpu()) return t;
  return at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kMeta));
}

c10::IValue to_meta(const c10::IValue& v) {
  if (v.isTensor()) return to_meta(v.toTensor());
  if (is_tensor_list(v)) {
    std::vector<at::Tensor> elements = list_elements(v);
    for (at::Tensor& t : elements) t = to_meta(t);
    return make_list(v, elements);
  }
  // A factory's device argument: the meta kernel must build meta tensors, not dispatch back to tpu.
  if (v.isDevice() && v.toDevice().type() == c10::DeviceType::PrivateUse1) return c10::Device(at::kMeta);
  return v;
}

// Thrown when the meta kernel cannot infer this call's output shapes but CPU accepts the arguments: the
// output shape depends on the data (x[bool_mask], ...), so the call runs through the CPU fallback.
struct DataDependentShape {};

// The arguments with every device tensor replaced by a zero-filled CPU tensor of its size, strides and dtype.
std::vector<c10::IValue> cpu_stand_ins(const torch::jit::Stack& stack, size_t first) {
  auto to_cpu = [](const at::Tensor& t) {
    if (!t.defined() || t.device().is_cpu()) return t;
    return at::zeros_like(at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU)));
  };
  std::vector<c10::IValue> args;
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      args.push_back(to_cpu(v.toTensor()));
    } else if (is_tensor_list(v)) {
      std::vector<at::Tensor> elements = list_elements(v);
      for (at::Tensor& t : elements) t = to_cpu(t);
      args.push_back(make_list(v, elements));
    } else if (v.isGenerator()) {
      args.push_back(c10::IValue());  // a tpu generator cannot drive a CPU kernel
    } else {
      args.push_back(v);
    }
  }
  return args;
}

// Reruns a failing op on CPU stand-ins of its arguments and throws CPU's error, if CPU raises one; throws
// DataDependentShape if CPU accepts them. Only reached on the error path.
void check_arguments_on_cpu(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first) {
  std::vector<c10::IValue> args = cpu_stand_ins(stack, first);
  torch::jit::Stack cpu_stack(args.begin(), args.end());
  op.callBoxed(&cpu_stack);  // throws CPU's error, which is what we want the user to see
  throw DataDependentShape{};
}

// Ops whose meta kernels describe other outputs than CPU's kernels return: in eval mode batch norm saves
// no statistics on CPU (shape [0], the meta kernel says [C]); for 16-bit inputs CPU keeps the saved
// statistics in the input's dtype (the meta kernel says float32); an unbatched multilabel_margin_loss with
// reduction='none' is 0-d on CPU ([1] says the meta kernel). Their outputs are shaped by running CPU on
// stand-ins instead, so tpu returns what CPU does.
bool shaped_on_cpu(const std::string& name) {
  static const std::unordered_set<std::string> ops = {
      "aten::native_layer_norm", "aten::native_batch_norm", "aten::_native_batch_norm_legit",
      "aten::_native_batch_norm_legit.no_stats", "aten::_native_batch_norm_legit_no_training",
      "aten::_batch_norm_with_update", "aten::multilabel_margin_loss_forward"};
  return ops.count(name) != 0;
}

lowering::Arg scalar_arg(const c10::Scalar& s) {
  Arg a;
  if (s.isFloatingPoint()) {
    a.kind = Arg::Kind::kDouble;
    a.real = s.toDouble();
  } else {
    a.kind = s.isBoolean() ? Arg::Kind::kBool : Arg::Kind::kInt;
    a.integer = s.toLong();
  }
  return a;
}

ir::Type ir_type(const at::Tensor& t) { return ir::Type{to_dtype(t.scalar_type()), t.sizes().vec()}; }

// Reads one tensor argument into the graph: a constant for a CPU scalar, else a storage parameter and
// a view read.
ir::Value read_tensor(ir::Graph& g, const at::Tensor& t, CompiledOp& compiled, ParamSource source) {
  if (is_cpu_scalar(t)) {
    const DType dtype = to_dtype(t.scalar_type());
    return is_floating(dtype) ? g.constant(t.item<double>(), dtype) : g.constant_int(t.item<int64_t>(), dtype);
  }
  const auto [dtype, numel] = storage_layout(t);
  ir::Value flat = g.parameter(ir::Type{dtype, {numel}});
  compiled.params.push_back(source);
  return lowering::read_view(g, flat, geometry(t));
}

at::ScalarType common_dtype(const torch::jit::Stack& args) {
  at::native::ResultTypeState state;
  bool any = false;
  for (const c10::IValue& v : args) {
    if (v.isTensor() && v.toTensor().defined()) {
      state = at::native::update_result_type_state(v.toTensor(), state);
      any = true;
    } else if (v.isScalar() && !v.isBool()) {
      at::Tensor wrapped = at::scalar_tensor(v.toScalar(), at::TensorOptions().dtype(
          v.isDouble() ? at::kDouble : at::kLong));
      wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
      state = at::native::update_result_type_state(wrapped, state);
    }
  }
  return any ? at::native::result_type(state) : at::kFloat;
}

std::shared_ptr<CompiledOp> build(const c10::OperatorHandle& op, OpState& state, torch::jit::Stack& stack,
                                  size_t first) {
  const size_t num_args = stack.size() - first;
  // Shape and dtype inference (and argument checking) by PyTorch's own meta kernels.
  // meta_args keeps the meta arguments alive: out= and other mutated ones are resized by the meta kernel.
  std::vector<c10::IValue> meta_args;
  if (shaped_on_cpu(state.name)) {
    meta_args = cpu_stand_ins(stack, first);
  } else {
    for (size_t i = first; i < stack.size(); ++i) meta_args.push_back(to_meta(stack[i]));
  }
  torch::jit::Stack meta_stack(meta_args.begin(), meta_args.end());
  try {
    op.callBoxed(&meta_stack);
  } catch (...) {
    // Some meta kernels (several are Python) word their errors differently from CPU's; the user should
    // read CPU's message.
    check_arguments_on_cpu(op, stack, first);
  }
  auto compiled = std::make_shared<CompiledOp>();
  compiled->uses_rng = state.rule->uses_rng;

  // The rule's outputs: functional results first (returns that alias no argument, in return order), then
  // the new values of the mutated arguments that are present, in argument order.
  std::vector<ir::Type> outputs;
  std::vector<bool> undefined_outputs;
  const auto& returns = op.schema().returns();
  for (size_t j = 0; j < returns.size() && j < meta_stack.size(); ++j) {
    if (returns[j].alias_info()) continue;
    const c10::IValue& r = meta_stack[j];
    if (r.isTensor()) {
      // An undefined result (output_mask false) gets a placeholder type; its rule returns an invalid Value.
      const at::Tensor& t = r.toTensor();
      outputs.push_back(t.defined() ? ir_type(t) : ir::Type{DType::kF32, {0}});
      undefined_outputs.push_back(!t.defined());
    }
    else if (r.isTensorList()) for (const at::Tensor& t : r.toTensorList()) outputs.push_back(ir_type(t));
  }
  const size_t num_functional = outputs.size();
  std::vector<size_t> written_args;  // mutated arguments present in this call
  for (size_t arg : state.mutated) {
    at::Tensor& real = stack[first + arg].toTensor();
    if (!real.defined()) continue;
    const at::Tensor& meta = meta_args[arg].toTensor();
    if (real.sizes() != meta.sizes()) real.resize_(meta.sizes());
    outputs.push_back(ir_type(real));
    written_args.push_back(arg);
  }

  ir::Graph g;
  lowering::LoweringContext ctx{g, {}, outputs, to_dtype(common_dtype(torch::jit::Stack(stack.begin() + first, stack.end()))), {}};
  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = stack[first + i];
    Arg a;
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && rule_reads(state, i)) {
        a.kind = Arg::Kind::kTensor;
        a.tensor = read_tensor(g, t, *compiled, {i, -1});
        a.contiguous = t.is_contiguous();
      }
    } else if (is_tensor_list(v)) {
      a.kind = Arg::Kind::kTensorList;
      int element = 0;
      for (const at::Tensor& t : list_elements(v)) {
        // A missing optional element (e.g. an index slot in Tensor?[]) is an invalid Value.
        a.tensors.push_back(t.defined() ? read_tensor(g, t, *compiled, {i, element}) : ir::Value{});
        ++element;
      }
    } else if (v.isScalar()) {
      a = scalar_arg(v.toScalar());
    } else if (v.isIntList()) {
      a.kind = Arg::Kind::kIntList;
      a.ints = v.toIntVector();
    } else if (v.isDoubleList()) {
      a.kind = Arg::Kind::kDoubleList;
      a.reals = v.toDoubleVector();
    } else if (v.isString()) {
      a.kind = Arg::Kind::kString;
      a.text = v.toStringRef();
    } else if (v.isBoolList()) {
      // bool[] (output_mask) reaches rules as 0/1 ints.
      a.kind = Arg::Kind::kIntList;
      for (bool b : v.toBoolList()) a.ints.push_back(b);
    }
    ctx.args.push_back(a);
  }
  if (compiled->uses_rng) {
    ctx.rng_state = g.parameter(ir::Type{DType::kU64, {2}});
    for (const ir::Type& t : outputs) compiled->rng_draws += 2 * t.numel();  // normal_ draws two per sample
  }

  std::vector<ir::Value> results;
  try {
    results = state.rule->lower(ctx);
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    TORCH_CHECK(false, "torchtpu: lowering ", state.name, " failed: ", e.what());
  }
  TORCH_INTERNAL_ASSERT(results.size() == outputs.size(), "rule for ", state.name, " returned ", results.size(),
                        " values for ", outputs.size(), " outputs");

  std::vector<ir::Value> program_results;
  std::vector<runtime::ArrayType> result_types;
  for (size_t r = 0; r < results.size(); ++r) {
    if (r < undefined_outputs.size() && undefined_outputs[r]) {
      OutputBinding binding{{}, at::kFloat, DType::kF32, {}, 0};
      binding.defined = false;
      compiled->functional.push_back(binding);
      continue;
    }
    ir::Value value = g.convert(results[r], outputs[r].dtype);
    OutputBinding binding{outputs[r].dims, to_scalar_type(outputs[r].dtype), outputs[r].dtype, {}, 0};
    if (r < num_functional) {
      binding.buffer_dims = {outputs[r].numel()};
      value = g.reshape(value, binding.buffer_dims);
      compiled->functional.push_back(binding);
    } else {
      // Write through the mutated argument's view into its whole storage.
      const size_t arg = written_args[r - num_functional];
      binding.arg = arg;
      const at::Tensor& target = stack[first + arg].toTensor();
      const auto [storage_dtype, storage_numel] = storage_layout(target);
      if (replaces_storage(target)) {
        value = g.reshape(value, {outputs[r].numel()});
      } else {
        ir::Value base = g.parameter(ir::Type{storage_dtype, {storage_numel}});
        compiled->params.push_back({arg, -2});  // -2: the whole storage, as the write base
        value = lowering::write_view(g, base, geometry(target), value);
      }
      binding.buffer_dims = g.type(value).dims;
      compiled->writes.push_back(binding);
    }
    program_results.push_back(value);
    result_types.push_back({binding.buffer_dtype, binding.buffer_dims});
  }
  g.set_results(program_results);
  // Parameter order is creation order: tensor reads, the RNG state, then write bases; run() follows it.
  const std::string text = g.emit();
  if (std::getenv("TORCHTPU_DUMP_HLO") != nullptr) std::fprintf(stderr, "// %s\n%s", state.name.c_str(), text.c_str());
  compiled->executable = runtime::compile(text, std::move(result_types));
  return compiled;
}

// ---- Running ----------------------------------------------------------------------------------------

// The tensor behind a parameter: the argument itself, or (element >= 0) one element of a tensor list.
at::Tensor param_tensor(const torch::jit::Stack& stack, size_t first, const ParamSource& source) {
  const c10::IValue& v = stack[first + source.arg];
  if (source.element < 0) return v.toTensor();
  return list_elements(v).at(static_cast<size_t>(source.element));
}

// A fresh tensor on the current tpu device owning `buffer`; allocated directly, without a dispatch.
at::Tensor new_tensor(const OutputBinding& binding, runtime::BufferPtr buffer) {
  at::Tensor t = empty_memory_format(binding.sizes, binding.dtype, std::nullopt, std::nullopt, std::nullopt, std::nullopt);
  storage_handle(t).buffer = std::move(buffer);
  return t;
}

void run(const OpState& state, const c10::FunctionSchema& schema, const CompiledOp& compiled,
         torch::jit::Stack& stack, size_t first, c10::DeviceIndex device) {
  std::vector<runtime::BufferPtr> inputs;  // keeps every input alive through the call
  inputs.reserve(compiled.params.size() + 1);
  std::vector<const runtime::Buffer*> raw;
  // Parameters were created in order: tensor reads (element >= -1), the RNG state, then write bases
  // (element == -2). Emit them in that order.
  auto push = [&](const ParamSource& source) {
    inputs.push_back(storage_buffer(param_tensor(stack, first, source)));
    raw.push_back(inputs.back().get());
  };
  for (const ParamSource& source : compiled.params) {
    if (source.element != -2) push(source);
  }
  if (compiled.uses_rng) {
    const c10::IValue* generator = nullptr;
    for (size_t i = first; i < stack.size(); ++i) {
      if (stack[i].isGenerator()) generator = &stack[i];
    }
    const std::array<uint64_t, 2> seed_offset = next_rng_state(
        generator ? std::optional<at::Generator>(generator->toGenerator()) : std::nullopt, device, compiled.rng_draws);
    at::Tensor host = at::empty({2}, at::TensorOptions().dtype(at::kUInt64));
    std::memcpy(host.mutable_data_ptr(), seed_offset.data(), sizeof(seed_offset));
    inputs.push_back(upload_contiguous(host, device));
    raw.push_back(inputs.back().get());
  }
  for (const ParamSource& source : compiled.params) {
    if (source.element == -2) push(source);
  }

  std::vector<runtime::BufferPtr> outputs = compiled.executable->execute(device, raw);
  state.counters->executions++;
  eager::after_execute(outputs);

  const size_t num_args = stack.size() - first;
  size_t num_functional = 0;  // program outputs that are functional results
  for (const OutputBinding& b : compiled.functional) num_functional += b.defined;
  for (size_t w = 0; w < compiled.writes.size(); ++w) {
    storage_handle(stack[first + compiled.writes[w].arg].toTensor()).buffer = std::move(outputs[num_functional + w]);
  }
  // Returns: a functional result, or (for a return that aliases an argument) the k-th mutated argument.
  std::vector<c10::IValue> returned;
  size_t next_functional = 0;
  size_t next_output = 0;  // program output index; undefined results have none
  size_t next_alias = 0;
  for (const c10::Argument& r : schema.returns()) {
    if (r.alias_info()) {
      returned.emplace_back(stack[first + state.mutated.at(next_alias++)]);
    } else {
      const OutputBinding& binding = compiled.functional.at(next_functional++);
      if (!binding.defined) {
        returned.emplace_back(at::Tensor());
        continue;
      }
      returned.emplace_back(new_tensor(binding, std::move(outputs[next_output++])));
    }
  }
  torch::jit::drop(stack, num_args);
  for (c10::IValue& v : returned) stack.push_back(std::move(v));
}

bool log_ops() {
  static const bool enabled = std::getenv("TORCHTPU_LOG_OPS") != nullptr;
  return enabled;
}

}  // namespace

c10::DeviceIndex common_device(const c10::FunctionSchema& schema, const torch::jit::Stack& stack) {
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
    const auto& argument = schema.arguments()[i - first];
    const bool written = argument.alias_info() && argument.alias_info()->isWrite();
    if (v.isTensor()) visit(v.toTensor(), !written);
    else if (is_tensor_list(v)) {
      for (const at::Tensor& t : list_elements(v)) {
        if (!t.defined() || !t.device().is_cpu()) visit(t, false);  // CPU list elements are copied over
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
  TORCH_CHECK(device.has_value(), schema.name(), ": expected a tpu tensor argument");
  TORCH_CHECK(!other.has_value(), "Expected all tensors to be on the same device, but found at least two devices, ",
              *device, " and ", *other, "!");
  return device->index();
}

// Index tensors in Tensor?[] / Tensor[] arguments may live on the CPU, as with CUDA: copy them over.
void move_list_tensors(torch::jit::Stack& stack, size_t first, c10::DeviceIndex device) {
  for (size_t i = first; i < stack.size(); ++i) {
    if (!is_tensor_list(stack[i])) continue;
    std::vector<at::Tensor> elements = list_elements(stack[i]);
    bool moved = false;
    for (at::Tensor& t : elements) {
      if (t.defined() && t.device().is_cpu()) {
        t = t.to(c10::Device(c10::DeviceType::PrivateUse1, device));
        moved = true;
      }
    }
    if (moved) stack[i] = make_list(stack[i], elements);
  }
}

void op_kernel(const c10::OperatorHandle& op, torch::jit::Stack* stack) {
  OpState& state = op_state(op);
  if (log_ops()) std::fprintf(stderr, "[torchtpu] %s\n", state.name.c_str());
  const size_t first = stack->size() - op.schema().arguments().size();
  const c10::DeviceIndex device = common_device(op.schema(), *stack);
  c10::DeviceGuard guard(c10::Device(c10::DeviceType::PrivateUse1, device));
  move_list_tensors(*stack, first, device);
  try {
    const cache::ProgramKey key = make_key(state, *stack, first);
    std::shared_ptr<CompiledOp> compiled;
    {
      std::lock_guard<std::mutex> lock(state.mutex);
      auto it = state.programs.find(key);
      if (it != state.programs.end()) compiled = it->second;
    }
    if (compiled) {
      state.counters->cache_hits++;
      // out= arguments take the shapes recorded when the program was built.
      for (const OutputBinding& write : compiled->writes) {
        at::Tensor& out = (*stack)[first + write.arg].toTensor();
        if (out.sizes() != c10::IntArrayRef(write.sizes)) out.resize_(write.sizes);
      }
    } else {
      try {
        compiled = build(op, state, *stack, first);
      } catch (const DataDependentShape&) {
        cpu_fallback(op, stack);
        return;
      }
      state.counters->compiles++;
      std::lock_guard<std::mutex> lock(state.mutex);
      state.programs.emplace(key, compiled);
    }
    const bool check_errors = state.check_errors_arg >= 0 && (*stack)[first + state.check_errors_arg].toBool();
    run(state, op.schema(), *compiled, *stack, first, device);
    // What the CPU kernels do with check_errors=True: raise PyTorch's error for the first failed matrix.
    if (check_errors) {
      const at::Tensor& info = stack->back().toTensor();
      at::_linalg_check_errors(info, state.linalg_api, info.dim() == 0);
    }
  } catch (const runtime::PjrtError& e) {
    TORCH_CHECK(false, state.name, " on tpu failed: ", e.what());
  }
}

}  // namespace torchtpu::aten
