#include "aten/op_build.h"

#include <ATen/ops/empty.h>
#include <ATen/ops/empty_strided.h>
#include <c10/util/accumulate.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <optional>
#include <cstdlib>

#include "aten/append.h"
#include "aten/argument_checks.h"
#include "aten/op_key.h"
#include "aten/scalar_operands.h"
#include "aten/sharding.h"
#include "aten/storage.h"
#include "aten/value_checks.h"
#include "aot/recorder.h"
#include "cache/disk_cache.h"
#include "lowering/helpers.h"
#include "lowering/view.h"
#include "runtime/plugin.h"

namespace torchtpu::aten {
namespace {

using lowering::Arg;
using lowering::ViewGeometry;

ViewGeometry geometry(const at::Tensor& t) {
  return ViewGeometry{to_dtype(t.scalar_type()), t.sizes().vec(), t.strides().vec(), t.storage_offset()};
}

ir::Type ir_type(const at::Tensor& t) { return ir::Type{to_dtype(t.scalar_type()), t.sizes().vec()}; }

// The dims of a dense result from outermost to innermost in memory, when the meta kernel lays it out in
// another order than row-major (an elementwise op on a transposed input, attention following its query's
// layout); empty for a row-major one. The result is then made in that layout,
// as CPU makes it: a compiled graph's later views and as_strided calls assume the meta kernel's strides.
std::vector<int64_t> memory_order(const at::Tensor& t) {
  if (!t.defined() || t.is_contiguous()) return {};
  return lowering::dense_order(geometry(t));
}

// Whether the rule reads the argument's current value: out= arguments and the self of ops that overwrite
// it (fill_, copy_, uniform_, ...) are only written.
bool rule_reads(const OpInfo& info, size_t arg) {
  if (!is_mutated(info, arg)) return true;
  if (info.is_out_variant) return false;
  return !(info.rule->overwrites_first_arg && arg == 0);
}

// A write replaces the whole buffer when the view covers its storage; otherwise it scatters into it.
bool replaces_storage(const at::Tensor& t) {
  const auto [dtype, numel] = storage_layout(t);
  return lowering::covers_storage(geometry(t), dtype, numel);
}

at::Tensor to_meta(const at::Tensor& t) {
  // A 0-dim CPU tensor (a scalar operand) becomes meta too: some meta kernels accept a CPU scalar only in
  // certain positions (floor division's dividend) where the device kernels take it anywhere. Promotion is
  // unchanged (a 0-dim tensor counts as one whatever its device). A wrapped Python number stays on the CPU,
  // as PyTorch requires of one.
  const bool cpu_scalar = t.defined() && t.device().is_cpu() && t.dim() == 0 &&
                          !t.unsafeGetTensorImpl()->is_wrapped_number();
  if (!t.defined() || (t.device().is_cpu() && !cpu_scalar)) return t;
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
  // Shapes never depend on the generator, and some meta kernels (exponential_, cauchy_, ...) refuse a tpu one.
  if (v.isGenerator()) return c10::IValue();
  return v;
}

// A grown tensor of a padded call (aten/append.h) as its program reads it: padded to the call's capacity.
c10::IValue to_padded_meta(const c10::IValue& v, const RowCall& rows) {
  auto pad = [&](const at::Tensor& t) {
    if (!t.defined() || t.device().type() != c10::DeviceType::PrivateUse1) return to_meta(t);
    const StorageHandle& storage = storage_handle(t);
    const std::optional<GrownRows> grown = storage.growing ? grown_rows(t, storage) : std::nullopt;
    if (!grown || grown->length != rows.length) return to_meta(t);
    std::vector<int64_t> sizes = t.sizes().vec();
    sizes[static_cast<size_t>(grown->dim)] = rows.padded;
    return at::empty(sizes, t.options().device(at::kMeta));
  };
  if (v.isTensor()) return pad(v.toTensor());
  if (is_tensor_list(v)) {
    std::vector<at::Tensor> elements = list_elements(v);
    for (at::Tensor& t : elements) t = pad(t);
    return make_list(v, elements);
  }
  return to_meta(v);
}

// How a padded call's result, `padded` as its meta kernel gives it for the padded arguments, follows the
// length: the dim where `real` has the length and `padded` the capacity, -1 when the two are alike, -2 when
// they differ otherwise (then the call runs as shaped). A growing result is contiguous, as a grown tensor is.
int length_dim(const at::Tensor& real, const at::Tensor& padded, const RowCall& rows) {
  if (real.defined() != padded.defined()) return -2;
  if (!real.defined() || real.sizes() == padded.sizes()) return -1;
  if (real.dim() != padded.dim() || real.scalar_type() != padded.scalar_type() || !real.is_contiguous()) return -2;
  int dim = -1;
  for (int64_t d = 0; d < real.dim(); ++d) {
    if (real.size(d) == padded.size(d)) continue;
    if (dim >= 0 || real.size(d) != rows.length || padded.size(d) != rows.padded) return -2;
    dim = static_cast<int>(d);
  }
  if (c10::multiply_integers(real.sizes().slice(0, static_cast<size_t>(dim))) > kMaxPaddedBlocks) return -2;
  return dim;
}

// Builds the program's graph and its parameter plan. Every parameter gets one ParamSource, in creation
// order, which is the program's parameter order.
class ProgramBuilder {
 public:
  ProgramBuilder(OpSignature& signature, const RowCall& rows) : signature_(signature), rows_(rows) {}

  ir::Graph& graph() { return graph_; }

  ir::Value parameter(const ir::Type& type, ParamSource source) {
    return adopt(graph_.parameter(type), source);
  }
  // Files a parameter the rule created itself (a lazily created scalar operand).
  ir::Value adopt(ir::Value parameter, ParamSource source) {
    signature_.params.push_back(source);
    parameters_.push_back(parameter);
    parameter_shardings_.push_back(nullptr);
    return parameter;
  }
  // The sharding of each parameter's buffer (null: on one device), in parameter order.
  const std::vector<runtime::ShardingPtr>& parameter_shardings() const { return parameter_shardings_; }
  size_t last_parameter() const { return parameters_.size() - 1; }
  std::vector<ir::Type> parameter_types() const {
    std::vector<ir::Type> types;
    for (ir::Value p : parameters_) types.push_back(graph_.type(p));
    return types;
  }

  // A tensor argument (or list element) as a value: a 0-dim CPU tensor is a scalar operand; a device
  // tensor is its whole storage read through its view, with a nonzero storage offset as an operand.
  ir::Value read(const at::Tensor& t, size_t arg, int element) {
    if (is_cpu_scalar(t)) return parameter({to_dtype(t.scalar_type()), {}}, {ParamSource::Kind::kCpuScalar, arg, element});
    const auto [dtype, numel] = storage_layout(t);
    const std::vector<int64_t> dims = storage_dims(t);
    ir::Value whole = parameter({dtype, dims}, {ParamSource::Kind::kStorage, arg, element});
    parameter_shardings_.back() = storage_sharding(t);
    reads_.push_back({arg, element, last_parameter()});
    if (rows_.length != 0) {
      const StorageHandle& storage = storage_handle(t);
      const std::optional<GrownRows> grown = storage.growing ? grown_rows(t, storage) : std::nullopt;
      if (grown && grown->length == rows_.length) {
        if (!row_length_.valid()) {
          row_length_ = parameter({DType::kI64, {}}, {ParamSource::Kind::kRowLength, arg, element, grown->dim});
          signature_.row_length_param = static_cast<int>(last_parameter());
        }
        std::vector<int64_t> sizes = t.sizes().vec();
        sizes[static_cast<size_t>(grown->dim)] = rows_.padded;
        ir::Value padded = lowering::read_padded_rows(graph_, flat(whole), storage.grown_outer, rows_.padded,
                                                      storage.grown_inner, row_length_,
                                                      rows_.padding == RowPadding::kZero);
        return apply_lazy_bits(t, graph_.reshape(padded, sizes));
      }
    }
    // The common case, a tensor that is its whole buffer as shaped, reads the parameter itself.
    const bool whole_buffer =
        replaces_storage(t) && dtype == to_dtype(t.scalar_type()) && t.sizes() == c10::IntArrayRef(dims);
    ir::Value value = whole_buffer ? whole
                                   : lowering::read_view(graph_, flat(whole), geometry(t), offset(t, arg, element),
                                                         strides(t, arg, element));
    return apply_lazy_bits(t, value);
  }

  // A tensor's value from its storage's: a conj() or neg view (conjugate / negative bit, set by torch
  // without touching the data; matrix products and copy_ receive them unresolved) applies its operation.
  ir::Value apply_lazy_bits(const at::Tensor& t, ir::Value value) {
    if (t.is_conj()) value = lowering::conjugate(graph_, value);
    if (t.is_neg()) value = graph_.unary("negate", value);
    return value;
  }

  // The new storage contents of a mutated argument with `value` written through its view. Records the
  // parameter whose buffer the result may take over (the storage read or the write base), if any.
  ir::Value write(const at::Tensor& target, size_t arg, int element, ir::Value value, size_t write_index) {
    const auto [storage_dtype, storage_numel] = storage_layout(target);
    ir::Value result;
    std::optional<size_t> donor;  // parameter index
    if (replaces_storage(target)) {
      result = value;  // the new buffer takes the tensor's shape
      for (const Read& r : reads_) {
        if (r.arg == arg && r.element == element && graph_.type(parameters_[r.parameter]) == graph_.type(result)) {
          donor = r.parameter;
        }
      }
    } else {
      // Two writes into one storage (foreach over views of one tensor) chain: the later one writes into
      // the earlier one's result, and binding the results in order leaves the storage with both.
      const c10::StorageImpl* storage = target.storage().unsafeGetStorageImpl();
      ir::Value base;
      for (const auto& [written, latest] : written_storages_) {
        if (written == storage) base = latest;
      }
      if (!base.valid()) {
        base = parameter({storage_dtype, storage_dims(target)}, {ParamSource::Kind::kWriteBase, arg, element});
        parameter_shardings_.back() = storage_sharding(target);
        if (graph_.type(base).dtype == to_dtype(target.scalar_type())) donor = last_parameter();
      }
      result = lowering::write_view(graph_, flat(base), geometry(target), value, offset(target, arg, element),
                                    strides(target, arg, element));
      // Keep the buffer's shape where the dtype allows, so the result can take over the base's buffer.
      if (graph_.type(result).dtype == graph_.type(base).dtype) result = graph_.reshape(result, graph_.type(base).dims);
      written_storages_.emplace_back(storage, result);
    }
    if (donor) signature_.donations.emplace_back(*donor, write_index);
    return result;
  }

  // A padded call's length (the parameter made at the first grown tensor read).
  ir::Value row_length() const { return row_length_; }

  // Marks each donation in the program, once the results are known: write w is result `first_write + w`.
  void alias_donations(size_t first_write) {
    for (const auto& [parameter, write] : signature_.donations) {
      graph_.alias_result(parameters_[parameter], static_cast<int>(first_write + write));
    }
  }

 private:
  // A buffer's value as the 1-D storage the view code works on.
  ir::Value flat(ir::Value whole) {
    const ir::Type& t = graph_.type(whole);
    return t.rank() == 1 ? whole : graph_.reshape(whole, {t.numel()});
  }

  ir::Value offset(const at::Tensor& t, size_t arg, int element) {
    // A view over part of its storage reads and writes at a runtime offset, so x[0] and x[i] share a program.
    if (replaces_storage(t)) return ir::Value{};
    return parameter({DType::kI64, {}}, {ParamSource::Kind::kOffset, arg, element});
  }

  // Per dim, the stride as an operand where the program takes it so (a view into a growing storage,
  // aten/append.h), else an invalid value; empty when every stride is compiled in.
  std::vector<ir::Value> strides(const at::Tensor& t, size_t arg, int element) {
    const uint64_t runtime = runtime_stride_dims(t, storage_handle(t));
    if (runtime == 0) return {};
    std::vector<ir::Value> operands(static_cast<size_t>(t.dim()));
    for (int d = 0; d < static_cast<int>(t.dim()); ++d) {
      if (runtime >> d & 1) operands[d] = parameter({DType::kI64, {}}, {ParamSource::Kind::kStride, arg, element, d});
    }
    return operands;
  }

  struct Read {
    size_t arg;
    int element;
    size_t parameter;  // the whole storage's parameter
  };
  OpSignature& signature_;
  RowCall rows_;
  ir::Value row_length_;
  ir::Graph graph_;
  std::vector<ir::Value> parameters_;
  std::vector<runtime::ShardingPtr> parameter_shardings_;
  std::vector<Read> reads_;
  std::vector<std::pair<const c10::StorageImpl*, ir::Value>> written_storages_;  // latest value per storage
};

// SPMD (docs/distributed.md): shardings as aten/sharding.h partition_program decides them. A write into a
// storage keeps that storage's sharding; one that may come back sharded otherwise does not take its input's
// buffer.
runtime::Partitioning annotate_shardings(OpSignature& signature, ProgramBuilder& builder, const torch::jit::Stack& stack,
                                         size_t first) {
  ir::Graph& g = builder.graph();
  // A write keeps its storage's sharding where the new buffer has the old one's rank (a buffer reshaped by the
  // write, such as a [1, n] gradient rewritten as [n], gets the partitioner's choice).
  std::vector<runtime::ShardingPtr> write_shardings;
  std::vector<const runtime::Sharding*> kept_results(g.results().size(), nullptr);
  for (size_t w = 0; w < signature.writes.size(); ++w) {
    const OutputBinding& write = signature.writes[w];
    const c10::IValue& v = stack[first + write.arg];
    runtime::ShardingPtr sharding =
        storage_sharding(write.element < 0 ? v.toTensor() : list_elements(v).at(static_cast<size_t>(write.element)));
    if (sharding && sharding->tiles().size() != write.buffer_dims.size()) sharding = nullptr;
    kept_results[signature.first_write + w] = sharding.get();
    write_shardings.push_back(std::move(sharding));
  }
  std::vector<const runtime::Sharding*> params;
  for (const runtime::ShardingPtr& s : builder.parameter_shardings()) params.push_back(s.get());
  const std::optional<size_t> check_state_result =
      signature.checks_values ? std::optional<size_t>(g.results().size() - 1) : std::nullopt;
  const std::optional<ProgramShardings> shardings = partition_program(params, kept_results, check_state_result);
  if (!shardings) return {};
  for (size_t p = 0; p < params.size(); ++p) g.set_parameter_sharding(p, shardings->parameters[p]);
  for (size_t r = 0; r < shardings->results.size(); ++r) {
    if (!shardings->results[r].empty()) g.set_result_sharding(r, shardings->results[r]);
  }
  auto& donations = signature.donations;
  donations.erase(std::remove_if(donations.begin(), donations.end(),
                                 [&](const std::pair<size_t, size_t>& d) {
                                   return !may_donate(params[d.first], write_shardings[d.second].get());
                                 }),
                  donations.end());
  return shardings->partitioning;
}

// Whether complex values reach the rule: a tensor argument (list elements too) or a result. Complex numbers
// (Scalar arguments) are checked apart: has_complex_scalar.
bool has_complex(const torch::jit::Stack& stack, size_t first, const std::vector<ir::Type>& outputs) {
  for (const ir::Type& t : outputs) {
    if (is_complex(t.dtype)) return true;
  }
  return any_tensor_argument(stack, first, [](const at::Tensor& t) { return t.is_complex(); });
}

bool has_complex_scalar(const torch::jit::Stack& stack, size_t first) {
  return std::any_of(stack.begin() + static_cast<std::ptrdiff_t>(first), stack.end(),
                     [](const c10::IValue& v) { return v.isComplexDouble(); });
}

Arg scalar_arg(const c10::IValue& v, bool dynamic) {
  Arg a;
  if (v.isDouble()) {
    a.kind = Arg::Kind::kDouble;
    a.real = v.toDouble();
  } else if (v.isComplexDouble()) {
    const c10::complex<double> z = v.toComplexDouble();
    a.kind = Arg::Kind::kComplex;
    a.real = z.real();
    a.imag = z.imag();
  } else {
    a.kind = v.isBool() ? Arg::Kind::kBool : Arg::Kind::kInt;
    a.integer = v.isBool() ? v.toBool() : v.toInt();
  }
  a.dynamic = dynamic;
  return a;
}

// The mutated tensors present in this call, in argument order: (argument, element or -1, tensor).
struct WriteTarget {
  size_t arg;
  int element;
  at::Tensor tensor;
};
std::vector<WriteTarget> write_targets(const OpInfo& info, torch::jit::Stack& stack, size_t first) {
  std::vector<WriteTarget> targets;
  for (size_t arg : info.mutated) {
    const c10::IValue& v = stack[first + arg];
    if (is_tensor_list(v)) {
      const std::vector<at::Tensor> elements = list_elements(v);
      for (size_t k = 0; k < elements.size(); ++k) {
        if (elements[k].defined()) targets.push_back({arg, static_cast<int>(k), elements[k]});
      }
    } else if (v.isTensor() && v.toTensor().defined()) {
      targets.push_back({arg, -1, v.toTensor()});
    }
  }
  return targets;
}

}  // namespace

std::shared_ptr<OpSignature> build_op(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack& stack,
                                      size_t first, bool pad_rows) {
  const size_t num_args = stack.size() - first;
  // Shape and dtype inference (and argument checking) by PyTorch's own meta kernels.
  // meta_args keeps the meta arguments alive: out= and other mutated ones are resized by the meta kernel.
  auto shape_args = [&] {
    if (shaped_on_cpu(info.name, stack, first)) return cpu_stand_ins(stack, first);
    std::vector<c10::IValue> args;
    for (size_t i = first; i < stack.size(); ++i) args.push_back(to_meta(stack[i]));
    return args;
  };
  std::vector<c10::IValue> meta_args = shape_args();
  torch::jit::Stack meta_stack(meta_args.begin(), meta_args.end());
  try {
    op.callBoxed(&meta_stack);
  } catch (...) {
    const std::exception_ptr meta_error = std::current_exception();
    // Some meta kernels (several are Python) word their errors differently from CPU's; the user should
    // read CPU's message.
    check_arguments_on_cpu(op, stack, first);
    if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) std::rethrow_exception(meta_error);
    // CPU accepts the arguments. A meta kernel that cannot know this call's output shapes fails again; one
    // that now succeeds failed for a reason of its own, such as a Ctrl-C raised as KeyboardInterrupt inside
    // a Python meta kernel, which must reach the caller instead of sending the op to the CPU fallback.
    std::vector<c10::IValue> retry_args = shape_args();
    torch::jit::Stack retry(retry_args.begin(), retry_args.end());
    try {
      op.callBoxed(&retry);
    } catch (...) {
      throw RunsOnCpu{};
    }
    std::rethrow_exception(meta_error);
  }
  auto signature = std::make_shared<OpSignature>();
  signature->uses_rng = info.rule->uses_rng;
  // A padded call: the meta kernel again, on the padded shapes the program computes with.
  const RowCall rows = pad_rows ? row_call(info, stack, first) : RowCall{};
  torch::jit::Stack padded_stack;
  auto run_as_shaped = [] {
    auto refused = std::make_shared<OpSignature>();
    refused->runs_as_shaped = true;
    return refused;
  };
  if (rows.length != 0) {
    for (size_t i = first; i < stack.size(); ++i) padded_stack.push_back(to_padded_meta(stack[i], rows));
    try {
      op.callBoxed(&padded_stack);
    } catch (const c10::Error&) {
      return run_as_shaped();
    }
  }
  const torch::jit::Stack& result_shapes = rows.length != 0 ? padded_stack : meta_stack;

  // The rule's outputs: functional results first (returns that alias no argument, in return order, lists
  // flattened), then the new values of the mutated tensors that are present, in argument order.
  std::vector<ir::Type> outputs;
  std::vector<bool> undefined_outputs;
  std::vector<at::Tensor> functional_meta;  // each functional output as the meta kernel made it
  std::vector<int> length_dims;             // each functional output's dim that follows a padded call's length
  // The program computes `padded` (the same as `real` unless the call is padded).
  auto add_functional = [&](const at::Tensor& real, const at::Tensor& padded) {
    const int dim = length_dim(real, padded, rows);
    if (dim == -2) return false;
    // An undefined result (output_mask false) gets a placeholder type; its rule returns an invalid Value.
    outputs.push_back(padded.defined() ? ir_type(padded) : ir::Type{DType::kF32, {0}});
    undefined_outputs.push_back(!real.defined());
    functional_meta.push_back(real);
    length_dims.push_back(dim);
    return true;
  };
  const auto& returns = op.schema().returns();
  size_t alias_index = 0;
  for (size_t j = 0; j < returns.size(); ++j) {
    if (returns[j].alias_info()) {
      signature->returns.push_back({ReturnPlan::Kind::kAlias, alias_index++, 1});
      continue;
    }
    const c10::IValue& r = meta_stack.at(j);
    const c10::IValue& shaped = result_shapes.at(j);
    if (r.isInt()) {
      if (shaped.toInt() != r.toInt()) return run_as_shaped();
      signature->returns.push_back({ReturnPlan::Kind::kInt, 0, 0, r.toInt()});
      continue;
    }
    if (r.isTensorList()) {
      const c10::List<at::Tensor> list = r.toTensorList(), shaped_list = shaped.toTensorList();
      signature->returns.push_back({ReturnPlan::Kind::kTensorList, outputs.size(), list.size()});
      for (size_t k = 0; k < list.size(); ++k) {
        if (!add_functional(list[k], shaped_list[k])) return run_as_shaped();
      }
    } else {
      signature->returns.push_back({ReturnPlan::Kind::kTensor, outputs.size(), 1});
      if (!add_functional(r.isNone() ? at::Tensor() : r.toTensor(), shaped.isNone() ? at::Tensor() : shaped.toTensor())) {
        return run_as_shaped();
      }
    }
  }
  const size_t num_functional = outputs.size();
  // out= tensors take the shapes the meta kernel gave their stand-ins.
  for (size_t arg : info.mutated) {
    c10::IValue& real = stack[first + arg];
    if (!real.isTensor() || !real.toTensor().defined()) continue;
    const at::Tensor& meta = meta_args[arg].toTensor();
    if (real.toTensor().sizes() != meta.sizes()) real.toTensor().resize_(meta.sizes());
  }
  check_dtypes_as_cpu(op, info, stack, first);
  check_arguments_as_cpu(op, info, stack, first);
  const std::vector<WriteTarget> targets = write_targets(info, stack, first);
  for (const WriteTarget& target : targets) outputs.push_back(ir_type(target.tensor));
  if (!lowering::handles_complex(info.rule->op) && has_complex(stack, first, outputs)) throw RunsOnCpu{};
  // A complex number for a real result: CPU raises unless its imaginary part is 0, in its own words.
  if (has_complex_scalar(stack, first) && std::none_of(outputs.begin(), outputs.end(), [](const ir::Type& t) {
        return is_complex(t.dtype);
      })) {
    throw RunsOnCpu{};
  }

  ProgramBuilder builder(*signature, rows);
  ir::Graph& g = builder.graph();
  // The promotion runs over the inputs: an out= tensor (the last arguments) only receives the result.
  const size_t inputs = info.is_out_variant && !info.mutated.empty()
                            ? *std::min_element(info.mutated.begin(), info.mutated.end())
                            : SIZE_MAX;
  lowering::LoweringContext ctx{g, {}, outputs, to_dtype(common_dtype(stack, first, inputs)), {}, info.rule->op};
  ctx.value_checks = value_checks_enabled();
  for (size_t i = 0; i < num_args; ++i) {
    const c10::IValue& v = stack[first + i];
    Arg a;
    if (v.isTensor()) {
      const at::Tensor& t = v.toTensor();
      if (t.defined() && rule_reads(info, i)) {
        a.kind = Arg::Kind::kTensor;
        a.tensor = builder.read(t, i, -1);
        a.contiguous = t.is_contiguous();
      }
    } else if (is_tensor_list(v)) {
      a.kind = Arg::Kind::kTensorList;
      const std::vector<at::Tensor> elements = list_elements(v);
      for (size_t k = 0; k < elements.size(); ++k) {
        // A missing optional element (e.g. an index slot in Tensor?[]) is an invalid Value; a list that
        // is only written (a foreach out list) is not read.
        const bool read = elements[k].defined() && rule_reads(info, i);
        a.tensors.push_back(read ? builder.read(elements[k], i, static_cast<int>(k)) : ir::Value{});
      }
    } else if (info.arg_classes[i] == ArgClass::kScalarList) {
      a.kind = Arg::Kind::kDoubleList;
      a.reals = scalar_list_values(v);
      a.dynamic = true;
    } else if (v.isScalar()) {
      a = scalar_arg(v, info.arg_classes[i] == ArgClass::kScalarOperand && !passes_unit_default(info, i, v));
    } else if (v.isIntList()) {
      a.kind = Arg::Kind::kIntList;
      a.ints = v.toIntVector();
      a.dynamic = info.arg_classes[i] == ArgClass::kIntListOperand;
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
  if (signature->uses_rng) {
    ctx.rng_state = builder.parameter(ir::Type{DType::kU64, {2}}, {ParamSource::Kind::kRngState});
    // normal_ draws two per sample, and a complex sample is two samples.
    for (const ir::Type& t : outputs) signature->rng_draws += (is_complex(t.dtype) ? 4 : 2) * t.numel();
  }

  std::vector<ir::Value> results;
  // With several devices any op may run split over them: in fused mode and compiled graphs its inputs are
  // pending values whose shardings the partitioner decides later, so the whole process lowers for it.
  g.set_partitioned(runtime::device_count() > 1);
  try {
    results = info.rule->lower(ctx);
  } catch (const lowering::NotLowered&) {
    throw RunsOnCpu{};
  } catch (const c10::Error&) {
    throw;
  } catch (const std::exception& e) {
    // A rule that refuses its arguments: when CPU refuses them too, the user reads CPU's words.
    check_arguments_on_cpu(op, stack, first);
    TORCH_CHECK(false, "torchtpu: lowering ", info.name, " failed: ", e.what());
  }
  TORCH_INTERNAL_ASSERT(results.size() == outputs.size(), "rule for ", info.name, " returned ", results.size(),
                        " values for ", outputs.size(), " outputs");
  // Scalar operands the rule created become parameters after the tensor reads and the RNG state; scalars
  // it read at compile time key every later program of this op by value.
  for (size_t i : ctx.created_operands) {
    const Arg::Kind kind = ctx.args[i].kind;
    builder.adopt(ctx.args[i].operand, {kind == Arg::Kind::kDoubleList ? ParamSource::Kind::kScalarList
                                        : kind == Arg::Kind::kIntList  ? ParamSource::Kind::kIntList
                                                                       : ParamSource::Kind::kScalar,
                                        i});
  }
  // A program that checks values reads the device's error state as its last parameter.
  ir::Value check_state;
  if (!ctx.checks.empty()) check_state = builder.parameter(ir::Type{DType::kI64, {3}}, {ParamSource::Kind::kCheckState});
  TORCH_INTERNAL_ASSERT(g.num_parameters() == signature->params.size(), "rule for ", info.name,
                        " created a program parameter outside its context");
  uint64_t read_statically = 0;
  for (size_t i = 0; i < ctx.args.size(); ++i) {
    if (ctx.args[i].dynamic && ctx.args[i].read_statically) read_statically |= uint64_t{1} << i;
  }
  if (read_statically != 0) info.static_scalars.fetch_or(read_statically);

  std::vector<ir::Value> program_results;
  std::vector<runtime::ArrayType> result_types;
  for (size_t r = 0; r < results.size(); ++r) {
    if (r < num_functional && undefined_outputs[r]) {
      OutputBinding binding;
      binding.dtype = at::kFloat;
      binding.buffer_dtype = DType::kF32;
      binding.defined = false;
      signature->functional.push_back(binding);
      continue;
    }
    ir::Value value = g.convert(results[r], outputs[r].dtype);
    OutputBinding binding;
    binding.sizes = outputs[r].dims;
    binding.dtype = to_scalar_type(outputs[r].dtype);
    binding.buffer_dtype = outputs[r].dtype;
    if (r < num_functional && length_dims[r] >= 0) {
      // A grown result: the padded rows packed as a grown array of its own, sized per call.
      const int dim = length_dims[r];
      const c10::IntArrayRef real = functional_meta[r].sizes();
      binding.sizes = real.vec();
      binding.length_dim = dim;
      binding.grown_outer = c10::multiply_integers(real.slice(0, static_cast<size_t>(dim)));
      binding.grown_inner = c10::multiply_integers(real.slice(static_cast<size_t>(dim) + 1));
      value = lowering::pack_rows(g, g.reshape(value, {binding.grown_outer, rows.padded, binding.grown_inner}),
                                  builder.row_length());
      binding.buffer_dims = g.type(value).dims;
      signature->functional.push_back(binding);
    } else if (r < num_functional) {
      // The buffer keeps the result's shape, its dims in memory order for a result that is not row-major.
      binding.buffer_dims = outputs[r].dims;
      const std::vector<int64_t> order = memory_order(functional_meta[r]);
      if (!order.empty()) {
        binding.strides = functional_meta[r].strides().vec();
        for (size_t d = 0; d < order.size(); ++d) binding.buffer_dims[d] = outputs[r].dims[order[d]];
        value = g.transpose(value, order);
      } else if (functional_meta[r].defined() && functional_meta[r].numel() == 0) {
        // An empty tensor counts as contiguous whatever its strides; it keeps the meta kernel's (a
        // channels-last clone of an empty batch is channels-last on CPU too).
        binding.strides = functional_meta[r].strides().vec();
      }
      signature->functional.push_back(binding);
    } else {
      // Write through the mutated tensor's view into its whole storage, unless the rule left it as read.
      const WriteTarget& target = targets[r - num_functional];
      const Arg& read = ctx.args[target.arg];
      const ir::Value as_read = target.element < 0 ? read.tensor
                                : read.tensors.empty() ? ir::Value{} : read.tensors[static_cast<size_t>(target.element)];
      if (as_read.valid() && as_read.id == results[r].id) continue;
      binding.arg = target.arg;
      binding.element = target.element;
      value = builder.write(target.tensor, target.arg, target.element, value, signature->writes.size());
      binding.buffer_dims = g.type(value).dims;
      signature->writes.push_back(binding);
    }
    program_results.push_back(value);
    result_types.push_back({binding.buffer_dtype, binding.buffer_dims});
  }
  signature->first_write = program_results.size() - signature->writes.size();
  // ... and returns it, updated by its checks, as its last result.
  if (check_state.valid()) {
    std::vector<int64_t> ids;
    for (const lowering::ValueCheck& check : ctx.checks) ids.push_back(register_check(info.name, check));
    program_results.push_back(lowering::fold_checks(g, check_state, ctx.checks, ids));
    result_types.push_back({DType::kI64, {3}});
    signature->checks_values = true;
  }
  g.set_results(program_results);
  // A fused trace calls the op's program without its shardings (the trace's @main carries its own).
  std::string unannotated;
  const runtime::Partitioning partitioning = annotate_shardings(*signature, builder, stack, first);
  if (partitioning.num_partitions > 1) {
    ir::Graph plain = g;
    plain.clear_shardings();
    unannotated = plain.emit();
  }
  builder.alias_donations(signature->first_write);
  const std::string text = g.emit();
  if (std::getenv("TORCHTPU_DUMP_HLO") != nullptr) std::fprintf(stderr, "// %s\n%s", info.name.c_str(), text.c_str());
  aot::record(info.name, text, partitioning.num_partitions);
  std::vector<int64_t> aliased;
  for (const auto& donation : signature->donations) aliased.push_back(static_cast<int64_t>(donation.first));
  signature->executable = cache::load_or_compile(text, std::move(result_types), std::move(aliased), partitioning);
  signature->executable->set_name(info.name);
  static std::atomic<uint64_t> next_id{1};
  signature->id = next_id++;
  signature->text = unannotated.empty() ? text : unannotated;
  signature->param_types = builder.parameter_types();
  return signature;
}

}  // namespace torchtpu::aten
