#include "aten/op_info.h"

#include <algorithm>
#include <memory>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "aten/append.h"

namespace torchtpu::aten {
namespace {

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
    const std::string dunder_in_place = "aten::__i";
    if (base.rfind(dunder_in_place, 0) == 0 && base.size() > dunder_in_place.size() + 2 &&
        base.compare(base.size() - 2, 2, "__") == 0) {
      base = "aten::__" + base.substr(dunder_in_place.size());  // "__ilshift__" -> "__lshift__"
    } else {
      if (base.empty() || base.back() != '_') return nullptr;
      base.pop_back();  // in-place "foo_" -> functional "foo"
    }
  }
  const std::string functional = functional_of(schema, base, is_out);
  return functional.empty() ? nullptr : lowering::find_rule(functional);
}

ArgClass classify(const c10::Argument& argument) {
  c10::TypePtr type = argument.type();
  if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
  switch (type->kind()) {
    case c10::TypeKind::TensorType:
      return ArgClass::kTensor;
    case c10::TypeKind::NumberType:
    case c10::TypeKind::FloatType:
      return ArgClass::kScalarOperand;
    case c10::TypeKind::ListType: {
      const c10::TypePtr element = type->castRaw<c10::ListType>()->getElementType();
      if (element->kind() == c10::TypeKind::NumberType) return ArgClass::kScalarList;
      const bool tensors = element->kind() == c10::TypeKind::TensorType ||
                           (element->kind() == c10::TypeKind::OptionalType &&
                            element->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType);
      return tensors ? ArgClass::kTensorList : ArgClass::kStatic;
    }
    default:
      return ArgClass::kStatic;
  }
}

// The Scalar arguments CPU's kernels convert with `Scalar::to<scalar_t>()`, which checks for overflow; the
// others (an add's `other`, a comparison's) CPU wraps into a tensor and casts without a check. Found by
// asking CPU: `torch.tensor([1], dtype=torch.uint8).clamp(max=300)` raises, `... + 300` wraps.
void find_overflow_checked_scalars(const c10::FunctionSchema& schema, OpInfo& info) {
  static const std::unordered_map<std::string, std::vector<std::string>> checked = {
      {"add", {"alpha"}}, {"sub", {"alpha"}}, {"rsub", {"alpha"}}, {"clamp", {"min", "max"}},
      {"clamp_min", {"min"}}, {"clamp_max", {"max"}}, {"fill", {"value"}}, {"masked_fill", {"value"}},
      {"index_fill", {"value"}}, {"scatter", {"value"}}, {"where", {"self", "other"}}, {"pow", {"exponent"}},
      {"addcmul", {"value"}}, {"addcdiv", {"value"}}, {"constant_pad_nd", {"value"}},
      {"threshold", {"threshold", "value"}}, {"hardtanh", {"min_val", "max_val"}}};
  // masked_fill and index_fill read a 0-dim tensor value as a Scalar first; fill_.Tensor casts it.
  static const std::unordered_set<std::string> tensor_values = {"masked_fill", "index_fill"};
  std::string base = schema.name().substr(schema.name().find("::") + 2);
  if (!base.empty() && base.back() == '_') base.pop_back();
  const auto it = checked.find(base);
  if (it == checked.end()) return;
  for (size_t i = 0; i < schema.arguments().size(); ++i) {
    const c10::Argument& argument = schema.arguments()[i];
    if (std::find(it->second.begin(), it->second.end(), argument.name()) == it->second.end()) continue;
    c10::TypePtr type = argument.type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    const bool scalar = type->kind() == c10::TypeKind::NumberType;
    const bool tensor_value = type->kind() == c10::TypeKind::TensorType && tensor_values.count(base) != 0;
    if (scalar || tensor_value) info.overflow_checked.push_back(i);
  }
  if (base == "addcmul" || base == "addcdiv") info.half_scalars = OpInfo::HalfScalars::kAsFloat;
  if (base == "where") info.half_scalars = OpInfo::HalfScalars::kUnchecked;
  if (base == "fill") info.half_scalars = OpInfo::HalfScalars::kUncheckedForOneElement;
}

std::unique_ptr<OpInfo> make_op_info(const c10::FunctionSchema& schema) {
  auto info = std::make_unique<OpInfo>();
  info->name = full_name(schema);
  const auto& arguments = schema.arguments();
  TORCH_CHECK(arguments.size() <= 64, "torchtpu: ", info->name, " has more than 64 arguments");
  for (size_t i = 0; i < arguments.size(); ++i) {
    info->arg_classes.push_back(classify(arguments[i]));
    if (arguments[i].alias_info() && arguments[i].alias_info()->isWrite()) {
      info->mutated.push_back(i);
      if (arguments[i].kwarg_only()) info->is_out_variant = true;
    }
    const std::optional<c10::IValue>& default_value = arguments[i].default_value();
    if (info->arg_classes[i] == ArgClass::kScalarOperand && default_value && is_one(*default_value)) {
      info->unit_defaults |= uint64_t{1} << i;
    }
    if (arguments[i].name() == "check_errors") {
      info->check_errors_arg = static_cast<int>(i);
      info->linalg_api = linalg_api_name(info->name);
    }
  }
  info->rule = derive_rule(schema, info->is_out_variant);
  TORCH_CHECK(info->rule != nullptr, "torchtpu: no lowering rule for ", info->name,
              " although it is registered for tpu (this is a torchtpu bug)");
  if (info->rule->int_lists_are_operands) {
    for (size_t i = 0; i < arguments.size(); ++i) {
      const c10::TypePtr& type = arguments[i].type();
      if (type->kind() == c10::TypeKind::ListType &&
          type->castRaw<c10::ListType>()->getElementType()->kind() == c10::TypeKind::IntType) {
        info->arg_classes[i] = ArgClass::kIntListOperand;
      }
    }
  }
  if (info->rule->scalars_shape_output) {
    for (size_t i = 0; i < arguments.size(); ++i) {
      if (info->arg_classes[i] == ArgClass::kScalarOperand) info->static_scalars |= uint64_t{1} << i;
    }
  }
  find_overflow_checked_scalars(schema, *info);
  info->row_padding = row_padding_of(info->name);
  info->counters = &op_counters(info->name);
  return info;
}

}  // namespace

OpInfo& op_info(const c10::OperatorHandle& op) {
  const c10::FunctionSchema* schema = &op.schema();
  // Each thread remembers the overloads it has seen; only a thread's first call of an op takes the lock.
  thread_local std::unordered_map<const c10::FunctionSchema*, OpInfo*> seen;
  auto hit = seen.find(schema);
  if (hit != seen.end()) return *hit->second;
  static std::mutex registry_mutex;
  static std::unordered_map<const c10::FunctionSchema*, std::unique_ptr<OpInfo>> infos;
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto& slot = infos[schema];
  if (!slot) slot = make_op_info(*schema);
  seen.emplace(schema, slot.get());
  return *slot;
}

bool is_one(const c10::IValue& v) {
  return (v.isInt() && v.toInt() == 1) || (v.isDouble() && v.toDouble() == 1.0);
}

bool is_mutated(const OpInfo& info, size_t arg) {
  for (size_t m : info.mutated) {
    if (m == arg) return true;
  }
  return false;
}

}  // namespace torchtpu::aten
