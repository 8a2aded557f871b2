#include "aten/argument_checks.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/native/TypeProperties.h>
#include <ATen/ops/empty_strided.h>
#include <ATen/ops/scalar_tensor.h>
#include <ATen/ops/zeros_like.h>

#include <limits>
#include <optional>
#include <unordered_map>
#include <unordered_set>

namespace torchtpu::aten {

std::vector<c10::IValue> cpu_stand_ins(const torch::jit::Stack& stack, size_t first) {
  return host_arguments(stack, first, [](const at::Tensor& t) {
    if (!t.defined() || t.device().is_cpu()) return t;
    return at::zeros_like(at::empty_strided(t.sizes(), t.strides(), t.options().device(at::kCPU)));
  });
}

// Reruns a failing op on CPU stand-ins of its arguments and throws CPU's error, if CPU raises one. Only
// reached on the error path. torchtpu's own ops (custom kernels) have no CPU kernel to ask.
void check_arguments_on_cpu(const c10::OperatorHandle& op, const torch::jit::Stack& stack, size_t first) {
  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) return;
  std::vector<c10::IValue> args = cpu_stand_ins(stack, first);
  torch::jit::Stack cpu_stack(args.begin(), args.end());
  // A random op draws from CPU's default generator: a check must leave the user's CPU stream as it was.
  struct KeepGeneratorState {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    at::Tensor state = generator.get_state();
    ~KeepGeneratorState() { generator.set_state(state); }
  } keep;
  op.callBoxed(&cpu_stack);  // throws CPU's error, which is what we want the user to see
}

// Ops whose meta kernels describe other outputs than CPU's kernels return: in eval mode batch norm saves
// no statistics on CPU (shape [0], the meta kernel says [C]); for 16-bit inputs CPU keeps the saved
// statistics in the input's dtype (the meta kernel says float32); an unbatched multilabel_margin_loss with
// reduction='none' is 0-d on CPU ([1] says the meta kernel); geqrf, histogramdd's ops and lstsq have no
// meta kernel. Their outputs are shaped by running CPU on stand-ins instead, so tpu returns what CPU does.
// So is a bool tensor to a bool power, which stays bool on CPU (the meta kernel says int64), and nansum
// over an empty dim list, which CPU reduces over every dim (the meta kernel over none).
bool shaped_on_cpu(const std::string& name, const torch::jit::Stack& stack, size_t first) {
  if (name == "aten::pow.Tensor_Scalar") {
    return stack[first].toTensor().scalar_type() == at::kBool && stack[first + 1].isBool();
  }
  if (name == "aten::nansum" || name == "aten::nansum.out") {
    return stack[first + 1].isIntList() && stack[first + 1].toDimVector().empty();
  }
  static const std::unordered_set<std::string> ops = {
      "aten::native_layer_norm", "aten::native_batch_norm", "aten::_native_batch_norm_legit",
      "aten::_native_batch_norm_legit.no_stats", "aten::_native_batch_norm_legit_no_training",
      "aten::_batch_norm_with_update", "aten::multilabel_margin_loss_forward", "aten::geqrf",
      "aten::_histogramdd_bin_edges", "aten::_histogramdd_from_bin_cts", "aten::_histogramdd_from_bin_tensors",
      "aten::linalg_lstsq", "aten::linalg_lstsq.out"};
  return ops.count(name) != 0;
}

// The result type of PyTorch's promotion over the tensors and numbers among `count` arguments from `first`
// (all of them by default). torch defines no promotion of float8, uint16, uint32 or uint64 with other types;
// the ops that mix them anyway (copies, _scaled_mm) do not promote: float8 math runs in float32, the others
// keep the first tensor's type.
at::ScalarType common_dtype(const torch::jit::Stack& stack, size_t first, size_t count) {
  at::native::ResultTypeState state;
  std::optional<at::ScalarType> first_type;
  bool float8 = false, unpromotable = false;
  for (size_t i = first; i < stack.size() && i - first < count; ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor() && v.toTensor().defined()) {
      const at::ScalarType type = v.toTensor().scalar_type();
      float8 = float8 || at::isFloat8Type(type);
      unpromotable = unpromotable || (first_type && *first_type != type &&
                                      (at::isFloat8Type(type) || at::isFloat8Type(*first_type) ||
                                       at::isBarebonesUnsignedType(type) || at::isBarebonesUnsignedType(*first_type)));
      if (!first_type) first_type = type;
      if (!unpromotable) state = at::native::update_result_type_state(v.toTensor(), state);
    } else if (v.isScalar() && !v.isBool() && !unpromotable) {
      at::Tensor wrapped = at::scalar_tensor(v.toScalar(), at::TensorOptions().dtype(
          v.isDouble() ? at::kDouble : v.isComplexDouble() ? at::kComplexDouble : at::kLong));
      wrapped.unsafeGetTensorImpl()->set_wrapped_number(true);
      state = at::native::update_result_type_state(wrapped, state);
    }
  }
  if (unpromotable) return float8 ? at::kFloat : *first_type;
  return first_type ? at::native::result_type(state) : at::kFloat;
}


// The dtype checks of CPU's kernels that these ops' meta kernels leave out, so tpu would compute what CPU
// refuses: add_/sub_/mul_/addcmul_/addcdiv_ writing a promoted result into a narrower tensor (an int tensor
// times a float, a float tensor plus a complex one), and the index ops whose source must have self's dtype.
// Runs when a program is built; the key holds every dtype, so a cached program never needs it. A failing
// check reruns CPU for its exact words.
// (index_put checks in its kernel, which sees the mask indices this function would not.)
void check_dtypes_as_cpu(const c10::OperatorHandle& op, const OpInfo& info, const torch::jit::Stack& stack,
                         size_t first) {
  const std::string& qualified = op.schema().name();  // "aten::mul_": no overload name
  std::string base = qualified.substr(qualified.find("::") + 2);
  if (!base.empty() && base.back() == '_') base.pop_back();
  static const std::unordered_map<std::string, size_t> promoted_inputs = {
      {"add", 2}, {"sub", 2}, {"mul", 2}, {"addcmul", 3}, {"addcdiv", 3}};
  static const std::unordered_map<std::string, size_t> source_arg = {
      {"index_add", 3}, {"index_copy", 3}, {"index_reduce", 3}, {"put", 2}};
  auto dtype_of = [&](size_t arg) {
    const c10::IValue& v = stack[first + arg];
    return v.isTensor() && v.toTensor().defined() ? std::optional<at::ScalarType>(v.toTensor().scalar_type())
                                                  : std::nullopt;
  };
  bool refused = false;
  if (auto it = promoted_inputs.find(base); it != promoted_inputs.end() && !info.mutated.empty()) {
    const std::optional<at::ScalarType> written = dtype_of(info.mutated[0]);
    refused = written && !c10::canCast(common_dtype(stack, first, it->second), *written);
  } else if (auto src = source_arg.find(base); src != source_arg.end()) {
    const std::optional<at::ScalarType> self = dtype_of(0), source = dtype_of(src->second);
    refused = self && source && *self != *source;
  }
  // CPU's kernels take float8 tensors in a few ops only (copies, cat, comparisons, indexing, mm,
  // _scaled_mm), and bool tensors in fewer ops than the meta kernels do (not fmod, remainder, clamp, a
  // number to a bool power); tpu takes the same ones and refuses the rest with CPU's own error.
  // (uint16/32/64 are not asked: tpu computes with them where CUDA does, tests/test_ops.py.)
  const bool narrow_dtype = any_tensor_argument(stack, first, [](const at::Tensor& t) {
    return t.defined() && (at::isFloat8Type(t.scalar_type()) || t.scalar_type() == at::kBool);
  });
  // Floating tensors of two dtypes: many CPU kernels require one (convolution's input and weight, a loss's
  // weight, grid_sample's grid), which the meta kernels leave to the device kernels.
  std::optional<at::ScalarType> floating;
  const bool mixed_floating = any_tensor_argument(stack, first, [&](const at::Tensor& t) {
    if (!t.defined() || !at::isFloatingType(t.scalar_type()) || is_cpu_scalar(t)) return false;
    if (!floating) floating = t.scalar_type();
    return *floating != t.scalar_type();
  });
  if (!refused && !narrow_dtype && !mixed_floating) return;
  try {
    check_arguments_on_cpu(op, stack, first);
  } catch (const c10::NotImplementedError&) {
    // Asked only for mixed floating dtypes, a stub CPU kernel (the fused SDPA backward of the
    // "overrideable" backend) has no verdict; float8, bool and unsigned refusals are CPU's answer.
    if (refused || narrow_dtype) throw;
    return;
  }
  if (!refused) return;
  TORCH_CHECK(false, info.name, ": the dtypes of its arguments do not match as CPU's kernel requires");
}

// CPU's and CUDA's kernels check arguments that the meta kernels do not: a loss's target dtype, smooth_l1's
// beta, a transposed convolution's output_padding, multinomial's input dtype, the n randperm can count to in
// its dtype. Asked when a program is built (the key holds every dtype, shape and compile-time value they
// look at), mostly by running CPU on stand-ins. (histc takes integers, as on CUDA, where CPU refuses them:
// Hugging Face's MoE layers pass them on accelerators.)
void check_arguments_as_cpu(const c10::OperatorHandle& op, const OpInfo& info, const torch::jit::Stack& stack,
                            size_t first) {
  static const std::unordered_set<std::string> stand_in_checked = {
      "aten::nll_loss_forward", "aten::nll_loss_forward.output",
      "aten::nll_loss2d_forward", "aten::nll_loss2d_forward.output", "aten::binary_cross_entropy",
      "aten::binary_cross_entropy.out", "aten::smooth_l1_loss", "aten::smooth_l1_loss.out"};
  const bool transposed_convolution = info.name == "aten::convolution" && stack[first + 6].toBool();
  if (stand_in_checked.count(info.name) != 0 || transposed_convolution) check_arguments_on_cpu(op, stack, first);
  if (info.name == "aten::multinomial") {  // zeros would fail its checks of the values
    const at::ScalarType type = stack[first].toTensor().scalar_type();
    TORCH_CHECK(at::isFloatingType(type), "multinomial only supports floating-point dtypes for input, got: ", type);
  }
  if (info.name == "aten::randperm.generator_out") {
    const int64_t n = stack[first].toInt();
    const at::ScalarType type = stack[first + 2].toTensor().scalar_type();
    (void)at::scalar_tensor(n > 0 ? n - 1 : n, at::TensorOptions().dtype(type));  // CPU's overflow error
    int64_t limit = std::numeric_limits<int64_t>::max();  // floating types count exactly up to 2^digits + 1
    if (type == at::kHalf) limit = (int64_t{1} << 11) + 1;
    if (type == at::kBFloat16) limit = (int64_t{1} << 8) + 1;
    if (type == at::kFloat) limit = (int64_t{1} << 24) + 1;
    if (type == at::kDouble) limit = (int64_t{1} << 53) + 1;
    TORCH_CHECK(n <= limit, "n cannot be greater than ", limit, " for ", type, " type.");
  }
}
}  // namespace torchtpu::aten
