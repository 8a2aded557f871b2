#include "aten/overlapping_writes.h"

#include <algorithm>
#include <unordered_map>

#include <c10/util/SmallVector.h>

#include "aten/metrics.h"
#include "aten/op_key.h"
#include "aten/storage.h"

namespace torchtpu::aten {
namespace {

bool is_tpu(const at::Tensor& t) { return t.defined() && t.device().type() == c10::DeviceType::PrivateUse1; }

// Whether two elements of `t` may sit at one address. Its dims of size > 1, taken by increasing stride,
// must each step past everything the smaller ones reach; a stride of 0 (an expand) never does. A layout
// this test cannot tell apart from an overlapping one goes to the host path, which is exact, only slower.
bool may_self_overlap(const at::TensorImpl& t) {
  if (t.numel() <= 1 || t.is_non_overlapping_and_dense()) return false;
  c10::SmallVector<std::pair<int64_t, int64_t>, 6> dims;  // (stride, size)
  for (int64_t d = 0; d < t.dim(); ++d) {
    if (t.size(d) > 1) dims.emplace_back(t.stride(d), t.size(d));
  }
  std::sort(dims.begin(), dims.end());
  int64_t reach = 0;  // the largest element offset the dims so far reach
  for (const auto& [stride, size] : dims) {
    if (stride <= reach) return true;
    reach += (size - 1) * stride;
  }
  return false;
}

// CPU's rule (at::get_overlap_status): two dense tensors of one storage whose byte ranges intersect, unless
// they are the same view.
bool partly_overlap(const at::TensorImpl& a, const at::TensorImpl& b) {
  if (&a == &b || a.numel() == 0 || b.numel() == 0) return false;
  if (!a.is_non_overlapping_and_dense() || !b.is_non_overlapping_and_dense()) return false;
  const int64_t a_begin = a.storage_offset() * static_cast<int64_t>(a.itemsize());
  const int64_t a_end = a_begin + a.numel() * static_cast<int64_t>(a.itemsize());
  const int64_t b_begin = b.storage_offset() * static_cast<int64_t>(b.itemsize());
  const int64_t b_end = b_begin + b.numel() * static_cast<int64_t>(b.itemsize());
  if (a_begin == b_begin && a_end == b_end) return a.strides() != b.strides();
  return a_begin < b_end && b_begin < a_end;
}

// Calls `visit(tensor, argument index)` for each defined tpu tensor argument, list elements included.
template <typename Visit>
void for_each_tpu_tensor(const torch::jit::Stack& stack, size_t first, Visit visit) {
  for (size_t i = first; i < stack.size(); ++i) {
    if (stack[i].isTensor()) {
      if (is_tpu(stack[i].toTensor())) visit(stack[i].toTensor(), i - first);
    } else if (is_tensor_list(stack[i])) {
      for (const at::Tensor& t : list_elements(stack[i])) {
        if (is_tpu(t)) visit(t, i - first);
      }
    }
  }
}

// A whole storage on the host, in the dtype its tensors view it with.
struct HostStorage {
  at::Tensor tpu_view;  // one tpu tensor of the storage, to reach its handle, dims and device
  at::Tensor flat;      // the storage's elements, contiguous, on the host
  bool written = false;
};

}  // namespace

bool has_overlapping_write(const OpInfo& info, const torch::jit::Stack& stack, size_t first) {
  struct Arg {
    const c10::StorageImpl* storage;
    const at::TensorImpl* tensor;
    bool written;
  };
  c10::SmallVector<Arg, 8> args;
  bool any_self_overlap = false;
  for_each_tpu_tensor(stack, first, [&](const at::Tensor& t, size_t arg) {
    const bool written = is_mutated(info, arg);
    any_self_overlap = any_self_overlap || (written && may_self_overlap(*t.unsafeGetTensorImpl()));
    args.push_back({t.storage().unsafeGetStorageImpl(), t.unsafeGetTensorImpl(), written});
  });
  if (any_self_overlap) return true;
  // Only tensors of one storage can overlap: sort by storage and compare within each run.
  std::sort(args.begin(), args.end(), [](const Arg& a, const Arg& b) { return a.storage < b.storage; });
  for (size_t i = 0; i < args.size(); ++i) {
    for (size_t j = i + 1; j < args.size() && args[j].storage == args[i].storage; ++j) {
      if ((args[i].written || args[j].written) && partly_overlap(*args[i].tensor, *args[j].tensor)) return true;
    }
  }
  return false;
}

bool run_on_host_storages(const c10::OperatorHandle& op, OpInfo& info, torch::jit::Stack* stack, size_t first) {
  if (!op.hasComputedKernelForDispatchKey(c10::DispatchKey::CPU)) return false;
  std::unordered_map<const c10::StorageImpl*, HostStorage> storages;
  bool faithful = true;
  for_each_tpu_tensor(*stack, first, [&](const at::Tensor& t, size_t arg) {
    faithful = faithful && !t.is_conj() && !t.is_neg() && !storage_sharding(t) &&
               storage_layout(t).first == to_dtype(t.scalar_type());
    auto [it, added] = storages.try_emplace(t.storage().unsafeGetStorageImpl());
    if (added) it->second.tpu_view = t;
    faithful = faithful && it->second.tpu_view.scalar_type() == t.scalar_type();
    it->second.written = it->second.written || is_mutated(info, arg);
  });
  if (!faithful) return false;
  for (auto& [storage, host] : storages) {
    // download() reads the whole buffer and returns a view into it; the view's storage is that copy.
    const at::Tensor view = download(host.tpu_view);
    host.flat = view.as_strided({storage_layout(host.tpu_view).second}, {1}, 0);
  }
  auto on_host = [&](const at::Tensor& t) {
    if (!is_tpu(t)) return t;
    return storages.at(t.storage().unsafeGetStorageImpl()).flat.as_strided(t.sizes(), t.strides(),
                                                                          t.storage_offset());
  };
  // host_args keeps the CPU views after the call consumes its stack: an out= tensor may get resized.
  const std::vector<c10::IValue> host_args = host_arguments(*stack, first, on_host);
  torch::jit::Stack cpu_stack(host_args.begin(), host_args.end());
  info.counters->fallbacks++;
  op.callBoxed(&cpu_stack);  // CPU's error, if it refuses the write, reaches the caller from here

  for (auto& [storage, host] : storages) {
    if (!host.written) continue;
    const std::vector<int64_t> dims = storage_dims(host.tpu_view);
    storage_handle(host.tpu_view)
        .set_buffer(upload_contiguous(host.flat.reshape(dims).contiguous(), storage_handle(host.tpu_view).device));
  }
  // An out= tensor that CPU resized left the storage copy: it comes back on its own.
  for (size_t arg : info.mutated) {
    if (!host_args[arg].isTensor() || !is_tpu((*stack)[first + arg].toTensor())) continue;
    const at::Tensor& host = host_args[arg].toTensor();
    at::Tensor& out = (*stack)[first + arg].toTensor();
    if (host.sizes() == out.sizes()) continue;
    out.resize_(host.sizes());
    out.copy_(host);
  }
  // Results: a return that aliases an argument is that argument (the tpu tensor); any other goes to the
  // device of the op.
  const c10::Device device = storages.begin()->second.tpu_view.device();
  const auto& schema = op.schema();
  for (size_t r = 0; r < schema.returns().size(); ++r) {
    const auto* alias = schema.returns()[r].alias_info();
    std::optional<size_t> aliased;
    for (size_t a = 0; alias != nullptr && a < schema.arguments().size() && !aliased; ++a) {
      const auto* arg_alias = schema.arguments()[a].alias_info();
      if (arg_alias != nullptr && arg_alias->beforeSets() == alias->beforeSets()) aliased = a;
    }
    c10::IValue& result = cpu_stack[r];
    if (aliased) {
      stack->push_back((*stack)[first + *aliased]);
    } else if (result.isTensor()) {
      stack->push_back(result.toTensor().to(device));
    } else if (result.isTensorList()) {
      std::vector<at::Tensor> elements = result.toTensorVector();
      for (at::Tensor& t : elements) t = t.to(device);
      stack->push_back(c10::List<at::Tensor>(elements));
    } else {
      stack->push_back(std::move(result));
    }
  }
  return true;
}

}  // namespace torchtpu::aten
