#include "aten/op_key.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "aten/append.h"
#include "aten/storage.h"
#include "aten/value_checks.h"

namespace torchtpu::aten {
namespace {

// Tags that keep words of different argument kinds apart.
enum Tag : int64_t {
  kUndefined = -1,
  kNone = -2,
  kGenerator = -3,
  kDeviceTensor = 1,
  kCpuScalarTensor = 2,
  kFloat = 10,
  kBool = 11,
  kInt = 12,
  kComplex = 13,
  kRuntimeStride = -4,  // in a tensor's strides: one its program takes as an operand (strides are >= 0)
  kGrownRows = -5,      // a grown tensor read padded to capacity: its length is an operand (aten/append.h)
};

int64_t scalar_tag(const c10::IValue& v) {
  if (v.isDouble()) return kFloat;
  if (v.isBool()) return kBool;
  if (v.isComplexDouble()) return kComplex;
  return kInt;
}

void add_value(cache::ProgramKey& key, const c10::IValue& v) {
  if (v.isDouble()) {
    key.add_double(v.toDouble());
  } else if (v.isComplexDouble()) {
    key.add_double(v.toComplexDouble().real());
    key.add_double(v.toComplexDouble().imag());
  } else if (v.isBool()) {
    key.add(v.toBool());
  } else {
    key.add(v.toInt());
  }
}

// The sizes and strides of a tensor's view.
void add_view(cache::ProgramKey& key, const at::Tensor& t, const StorageHandle& storage) {
  key.add_list(t.sizes().data(), t.sizes().size());
  // A dim of size 1 never moves the address: its stride (which PyTorch leaves at whatever the view
  // arithmetic gave, e.g. a growing row length in x[:, -1:]) is not part of the program. Nor is a stride
  // the program takes as an operand (a view into a growing storage).
  const c10::IntArrayRef sizes = t.sizes(), strides = t.strides();
  const uint64_t runtime_strides = runtime_stride_dims(t, storage);
  for (size_t d = 0; d < strides.size(); ++d) {
    key.add(sizes[d] == 1 ? int64_t{0} : (runtime_strides >> d & 1) ? kRuntimeStride : strides[d]);
  }
  if (runtime_strides != 0) {
    // The order of the strides still shapes the program's results: the meta kernel lays an output out as its
    // input (empty_like), so each dim's rank among the strides, ties counted, joins the key.
    for (size_t d = 0; d < strides.size(); ++d) {
      int64_t larger = 0, equal = 0;
      for (size_t e = 0; e < strides.size() && sizes[d] != 1; ++e) {
        if (e == d || sizes[e] == 1) continue;
        larger += strides[e] > strides[d];
        equal += strides[e] == strides[d];
      }
      key.add(larger * 64 + equal);
    }
  }
}

// The dtype and dims of the buffer (or pending value) a tensor's storage holds.
void add_storage(cache::ProgramKey& key, const at::Tensor& t, const StorageHandle& storage) {
  const bool has_value = storage.with_value([&](const PendingValue* pending, const runtime::Buffer* buffer) {
    if (pending) {  // fused mode: the dims its buffer will have, so one program serves both
      key.add(static_cast<int64_t>(pending->dtype));
      key.add_list(pending->dims.data(), pending->dims.size());
      return true;
    }
    if (buffer == nullptr) return false;
    key.add(static_cast<int64_t>(buffer->dtype()));
    key.add_list(buffer->dims().data(), buffer->dims().size());
    if (const runtime::Sharding* sharding = buffer->sharding()) key.add(sharding->id());  // an SPMD program
    return true;
  });
  if (!has_value) {
    const auto [dtype, numel] = storage_layout(t);
    key.add(static_cast<int64_t>(dtype));
    key.add_list(&numel, 1);
  }
}

// `row_length`: the length of the grown tensors a padded call reads (aten/append.h), else 0.
void add_tensor(cache::ProgramKey& key, const at::Tensor& t, int64_t row_length) {
  if (!t.defined()) {
    key.add(kUndefined);
    return;
  }
  // The conjugate and negative bits of a lazy conj() / neg view change what a read of it computes.
  key.add(static_cast<int64_t>(t.scalar_type()) | (t.is_conj() ? 0x100 : 0) | (t.is_neg() ? 0x200 : 0));
  if (is_cpu_scalar(t)) {
    // The value is a runtime operand. Wrapped numbers (from Python scalars) promote differently from
    // other 0-dim tensors, so the flag is part of the program.
    key.add(kCpuScalarTensor);
    key.add(t.unsafeGetTensorImpl()->is_wrapped_number());
    return;
  }
  key.add(kDeviceTensor);
  const StorageHandle& storage = storage_handle(t);
  const std::optional<GrownRows> rows = row_length != 0 && storage.growing ? grown_rows(t, storage) : std::nullopt;
  if (rows && rows->length == row_length) {
    // Contiguous: the sizes but the length say it all; the capacity is in the buffer's dims below.
    key.add(kGrownRows);
    key.add(rows->dim);
    key.add(t.dim());
    for (int64_t d = 0; d < t.dim(); ++d) key.add(d == rows->dim ? int64_t{0} : t.size(d));
  } else {
    add_view(key, t, storage);
  }
  // The storage offset is a runtime operand: a view that covers its storage has offset 0, and whether it
  // covers it follows from the words above and below. The buffer's dims are the program parameter's.
  add_storage(key, t, storage);
}

void add_static(const OpInfo& info, cache::ProgramKey& key, const c10::IValue& v) {
  if (v.isNone()) {
    key.add(kNone);
  } else if (v.isInt() || v.isDouble() || v.isBool() || v.isComplexDouble()) {
    key.add(scalar_tag(v));
    add_value(key, v);
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
    key.add(kGenerator);  // the generator's state is a runtime input, not part of the program
  } else {
    TORCH_CHECK(false, "torchtpu: ", info.name, " has an argument kind the tpu kernel does not handle: ", v.tagKind());
  }
}

}  // namespace

bool passes_unit_default(const OpInfo& info, size_t arg, const c10::IValue& v) {
  return ((info.unit_defaults >> arg) & 1) != 0 && is_one(v);
}

bool is_cpu_scalar(const at::Tensor& t) { return t.device().is_cpu() && t.dim() == 0; }

bool is_tensor_list(const c10::IValue& v) { return v.isTensorList() || v.isOptionalTensorList(); }

std::vector<at::Tensor> list_elements(const c10::IValue& v) {
  std::vector<at::Tensor> out;
  if (v.isTensorList()) {
    for (const at::Tensor& t : v.toTensorList()) out.push_back(t);
  } else {
    for (const std::optional<at::Tensor>& t : v.toOptionalTensorList()) out.push_back(t.value_or(at::Tensor()));
  }
  return out;
}

c10::IValue make_list(const c10::IValue& like, const std::vector<at::Tensor>& elements) {
  if (like.isTensorList()) return c10::List<at::Tensor>(elements);
  c10::List<std::optional<at::Tensor>> list;
  for (const at::Tensor& t : elements) list.push_back(t.defined() ? std::optional<at::Tensor>(t) : std::nullopt);
  return list;
}

std::vector<c10::IValue> host_arguments(const torch::jit::Stack& stack, size_t first,
                                        const std::function<at::Tensor(const at::Tensor&)>& to_host) {
  std::vector<c10::IValue> args;
  for (size_t i = first; i < stack.size(); ++i) {
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      args.push_back(to_host(v.toTensor()));
    } else if (is_tensor_list(v)) {
      std::vector<at::Tensor> elements = list_elements(v);
      for (at::Tensor& t : elements) t = to_host(t);
      args.push_back(make_list(v, elements));
    } else if (v.isGenerator()) {
      args.push_back(c10::IValue());
    } else {
      args.push_back(v);
    }
  }
  return args;
}

cache::ProgramKey op_key(const OpInfo& info, const torch::jit::Stack& stack, size_t first, bool pad_rows) {
  cache::ProgramKey key;
  key.add(static_cast<int64_t>(reinterpret_cast<uintptr_t>(&info)));
  key.add(value_checks_enabled());  // whether the program makes its rule's value checks
  const int64_t row_length = pad_rows ? row_call(info, stack, first).length : 0;
  key.add(row_length != 0);
  const uint64_t static_scalars = info.static_scalars.load(std::memory_order_relaxed);
  for (size_t i = first; i < stack.size(); ++i) {
    const size_t arg = i - first;
    const c10::IValue& v = stack[i];
    const bool read_statically = (static_scalars >> arg) & 1;
    switch (info.arg_classes[arg]) {
      case ArgClass::kTensor:
        if (v.isNone()) key.add(kNone);
        else add_tensor(key, v.toTensor(), row_length);
        break;
      case ArgClass::kTensorList: {
        if (!is_tensor_list(v)) {
          add_static(info, key, v);
          break;
        }
        if (v.isTensorList()) {
          const c10::List<at::Tensor> list = v.toTensorList();
          key.add(static_cast<int64_t>(list.size()));
          for (const at::Tensor& t : list) add_tensor(key, t, row_length);
        } else {
          const auto list = v.toOptionalTensorList();
          key.add(static_cast<int64_t>(list.size()));
          for (const std::optional<at::Tensor>& t : list) add_tensor(key, t.value_or(at::Tensor()), row_length);
        }
        break;
      }
      case ArgClass::kScalarOperand:
        if (v.isNone()) {
          key.add(kNone);
          break;
        }
        key.add(scalar_tag(v));
        if (read_statically) add_value(key, v);
        else key.add(passes_unit_default(info, arg, v));
        break;
      case ArgClass::kScalarList: {
        const c10::List<c10::IValue> list = v.toList();
        key.add(static_cast<int64_t>(list.size()));
        for (const c10::IValue& element : list) {
          key.add(scalar_tag(element));
          if (read_statically) add_value(key, element);
        }
        break;
      }
      case ArgClass::kIntListOperand: {
        const c10::List<int64_t> list = v.toIntList();
        key.add(static_cast<int64_t>(list.size()));
        if ((info.rule->int_list_maxima_shape_output >> arg) & 1) {
          int64_t largest = std::numeric_limits<int64_t>::min();
          for (int64_t element : list) largest = std::max(largest, element);
          key.add(largest);
        }
        break;
      }
      case ArgClass::kStatic:
        add_static(info, key, v);
        break;
    }
  }
  return key;
}

std::string describe_call(const OpInfo& info, const torch::jit::Stack& stack, size_t first) {
  std::ostringstream out;
  const uint64_t static_scalars = info.static_scalars.load(std::memory_order_relaxed);
  auto tensor = [&](const at::Tensor& t) {
    if (!t.defined()) {
      out << "None";
      return;
    }
    out << c10::toString(t.scalar_type()) << t.sizes();
    if (is_cpu_scalar(t)) out << "(cpu)";
    else if (t.storage_offset() != 0) out << "@offset";
  };
  for (size_t i = first; i < stack.size(); ++i) {
    const size_t arg = i - first;
    if (arg) out << ", ";
    const c10::IValue& v = stack[i];
    if (v.isTensor()) {
      tensor(v.toTensor());
    } else if (is_tensor_list(v)) {
      out << "[";
      const std::vector<at::Tensor> elements = list_elements(v);
      for (size_t k = 0; k < elements.size(); ++k) {
        if (k) out << ", ";
        tensor(elements[k]);
      }
      out << "]";
    } else if (info.arg_classes[arg] == ArgClass::kScalarOperand && !v.isNone()) {
      out << (v.isDouble() ? "float" : v.isComplexDouble() ? "complex" : v.isBool() ? "bool" : "int");
      if ((static_scalars >> arg) & 1) out << "=" << v << " (compile-time value)";
    } else if (info.arg_classes[arg] == ArgClass::kIntListOperand) {
      const std::vector<int64_t> ints = v.toIntVector();
      out << "int[" << ints.size() << "]";
      if (!ints.empty() && ((info.rule->int_list_maxima_shape_output >> arg) & 1)) {
        out << " max=" << *std::max_element(ints.begin(), ints.end());
      }
    } else {
      out << v;
    }
  }
  return out.str();
}

}  // namespace torchtpu::aten
