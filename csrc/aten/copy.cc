#include "aten/copy.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/ops/_conj_physical.h>
#include <ATen/ops/_neg_view.h>
#include <ATen/ops/all.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/eq.h>
#include <c10/core/DeviceGuard.h>

#include "aten/op_kernel.h"
#include "aten/storage.h"
#include "lowering/view.h"

namespace torchtpu::aten {
namespace {

bool is_tpu(const at::Tensor& t) { return t.device().type() == c10::DeviceType::PrivateUse1; }

// tpu -> tpu on one device: the lowered `copy_` (convert, broadcast, write through the view).
void copy_on_device(at::Tensor& self, const at::Tensor& src) {
  static const c10::OperatorHandle op =
      c10::Dispatcher::singleton().findSchemaOrThrow("aten::copy_", "");
  torch::jit::Stack stack{self, src, false};
  op_kernel(op, &stack);
}

bool covers_own_storage(const at::Tensor& t) {
  const auto [dtype, numel] = storage_layout(t);
  return lowering::covers_storage(
      lowering::ViewGeometry{to_dtype(t.scalar_type()), t.sizes().vec(), t.strides().vec(), t.storage_offset()}, dtype,
      numel);
}

// The values of a tpu tensor on the host. A view smaller than its storage (x[i], a slice, a row of a KV
// cache) is gathered on the device first, so only its own bytes cross to the host.
at::Tensor download_view(const at::Tensor& t) {
  const auto [dtype, numel] = storage_layout(t);
  const size_t view_bytes = static_cast<size_t>(t.numel()) * t.element_size();
  if (view_bytes >= static_cast<size_t>(numel) * element_size(dtype)) return download(t);
  return download(t.clone(at::MemoryFormat::Contiguous));
}

}  // namespace

at::Tensor& copy_(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  if (self.numel() == 0) return self;
  if (is_tpu(self) && (self.is_conj() || self.is_neg())) {
    // Programs read a source's conj()/neg bits (aten/op_build.cc) but write plain storages: a write through
    // a lazy conj()/neg view stores the conjugate / negation of the values in the view without the bits.
    at::Tensor plain = self;
    at::Tensor values = src;
    if (plain.is_conj()) {
      plain = plain.conj();  // the conj of a conj view is the plain view of the same elements
      values = values.conj();
    }
    if (plain.is_neg()) {
      plain = at::_neg_view(plain);
      values = values.neg();
    }
    copy_(plain, values, non_blocking);
    return self;
  }
  if (is_tpu(self) && is_tpu(src)) {
    if (self.device() == src.device()) {
      copy_on_device(self, src);
    } else {
      // Across tpu devices: through the host for now.
      at::Tensor host = download_view(src);
      copy_(self, host, false);
    }
    return self;
  }
  if (is_tpu(self)) {
    at::assert_no_internal_overlap(self);  // as CPU's copy_: an expanded destination is refused
    // CPU -> tpu: convert and broadcast on the host, then either replace the storage's buffer or upload
    // into a temporary and write through the view on device.
    c10::DeviceGuard guard(self.device());
    at::Tensor dense = src.resolve_conj().resolve_neg().to(self.scalar_type()).expand(self.sizes()).contiguous();
    if (covers_own_storage(self)) {
      storage_handle(self).set_buffer(upload_contiguous(dense, self.device().index()));
      return self;
    }
    at::Tensor staged = at::empty(self.sizes(), self.options());
    storage_handle(staged).set_buffer(upload_contiguous(dense.reshape({-1}), self.device().index()));
    copy_on_device(self, staged);
    return self;
  }
  // tpu -> CPU: fetch, then let the CPU copy convert and broadcast.
  self.copy_(download_view(src));
  return self;
}

at::Tensor copy_from(const at::Tensor& self, const at::Tensor& dst, bool non_blocking) {
  at::Tensor out = dst;
  copy_(out, self, non_blocking);
  return out;
}

at::Tensor copy_from_and_resize(const at::Tensor& self, const at::Tensor& dst) {
  at::Tensor out = dst;
  if (out.sizes() != self.sizes()) out.resize_(self.sizes());
  copy_(out, self, false);
  return out;
}

at::Scalar local_scalar_dense(const at::Tensor& self) {
  TORCH_CHECK(self.numel() == 1, "a Tensor with ", self.numel(), " elements cannot be converted to Scalar");
  return download_view(self).item();
}

bool equal(const at::Tensor& self, const at::Tensor& other) {
  TORCH_CHECK(self.device() == other.device(), "Expected all tensors to be on the same device, but found at least two "
              "devices, ", self.device(), " and ", other.device(), "!");
  if (self.sizes() != other.sizes()) return false;
  // Elementwise on the device (NaN is unequal, dtypes promote as in eq); one bool comes back.
  return at::eq(self, other).all().item<bool>();
}

// conj_physical_: PyTorch's kernel calls CPU's and CUDA's conj stub directly. A write of the conjugate,
// through copy_ (so a conj view's bit is honoured).
at::Tensor& conj_physical_(at::Tensor& self) {
  if (self.is_complex()) copy_(self, at::_conj_physical(self), false);
  return self;
}

}  // namespace torchtpu::aten
