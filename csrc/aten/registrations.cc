// The one place tpu kernels are registered. Lowered ops share op_kernel through their unboxed entries (the
// generated table of aten/lowered_ops.cc); a handful of ops that move data between host and device, or only
// touch metadata, have their own kernels. Everything else takes the CPU fallback.
// tests/test_registrations.py checks that every lowered op has a rule.
#include <ATen/ops/_reshape_alias_native.h>
#include <ATen/ops/as_strided_native.h>
#include <ATen/ops/is_set_to_native.h>
#include <ATen/ops/view_as_complex_native.h>
#include <ATen/ops/view_as_real_native.h>
#include <ATen/ops/unfold_native.h>
#include <ATen/ops/view_native.h>
#include <torch/library.h>

#include "aten/append.h"
#include "aten/attention.h"
#include "aten/batch_norm.h"
#include "aten/copy.h"
#include "aten/data_dependent.h"
#include "aten/fallback.h"
#include "aten/kernel.h"
#include "aten/one_hot.h"
#include "aten/op_kernel.h"
#include "aten/registrations.h"
#include "aten/storage_ops.h"

TORCH_LIBRARY_IMPL(aten, PrivateUse1, m) {
  using namespace torchtpu::aten;
  for (const LoweredOp& op : lowered_ops()) op.register_entry(m, op.name);
  m.impl("bincount", &bincount);
  m.impl("cat", torch::CppFunction::makeFromBoxedFunction<&cat_kernel>());
  m.impl("_scaled_dot_product_fused_attention_overrideable",
         torch::CppFunction::makeFromBoxedFunction<&attention_kernel>());
  m.impl("_copy_from", &copy_from);
  m.impl("_to_copy", &to_copy);
  m.impl("_fused_sdp_choice", &fused_sdp_choice);
  m.impl("_has_compatible_shallow_copy_type", &has_compatible_shallow_copy_type);
  m.impl("_copy_from_and_resize", &copy_from_and_resize);
  m.impl("_local_scalar_dense", &local_scalar_dense);
  m.impl("_index_put_impl", torch::CppFunction::makeFromBoxedFunction<&index_put_kernel>());
  m.impl("_index_put_impl_", torch::CppFunction::makeFromBoxedFunction<&index_put_kernel>());
  m.impl("_unique", &unique);
  m.impl("_unique2", &unique2);
  m.impl("_reshape_alias", &at::native::_reshape_alias);
  m.impl("as_strided", &at::native::as_strided_tensorimpl);
  m.impl("conj_physical_", &conj_physical_);
  m.impl("copy_", &copy_);
  m.impl("empty.memory_format", &empty_memory_format);
  m.impl("equal", &equal);
  m.impl("is_set_to", &at::native::is_set_to);  // compares storages and geometry, as on every device
  m.impl("index.Tensor", torch::CppFunction::makeFromBoxedFunction<&index_kernel>());
  m.impl("index_put", torch::CppFunction::makeFromBoxedFunction<&index_put_kernel>());
  m.impl("index_put_", torch::CppFunction::makeFromBoxedFunction<&index_put_kernel>());
  m.impl("masked_select", &masked_select);
  m.impl("masked_select.out", &masked_select_out);
  m.impl("native_batch_norm", &native_batch_norm);
  m.impl("nonzero", &nonzero);
  m.impl("nonzero.out", &nonzero_out);
  m.impl("one_hot", torch::CppFunction::makeFromBoxedFunction<&one_hot_kernel>());
  // One in-order queue per device, and pending executions hold their buffers: nothing to record.
  m.impl("record_stream", [](at::Tensor&, c10::Stream) {});
  m.impl("empty_strided", &empty_strided);
  m.impl("resize_", &resize_);
  m.impl("set_", &set_empty);
  m.impl("set_.source_Storage", &set_source_storage);
  m.impl("set_.source_Storage_storage_offset", &set_source_storage_offset);
  m.impl("set_.source_Tensor", &set_source_tensor);
  m.impl("unfold", &at::native::unfold);
  m.impl("unique_consecutive", torch::CppFunction::makeFromBoxedFunction<&unique_consecutive_kernel>());
  m.impl("unique_dim", torch::CppFunction::makeFromBoxedFunction<&unique_dim_kernel>());
  m.impl("view", &at::native::view);
  m.impl("view.dtype", &at::native::view_dtype);
  m.impl("view_as_complex", &at::native::view_as_complex);
  m.impl("view_as_real", &at::native::view_as_real);
}

// torchtpu's internal ops: lowered like ATen ops, called by the hand-written kernels above (aten/append.h).
TORCH_LIBRARY(torchtpu, m) {
  m.def("_append_rows(Tensor storage, Tensor piece, Scalar rows, int capacity) -> Tensor");
  m.def("_attention_prefix(Tensor query, Tensor key_storage, Tensor value_storage, Scalar kv_len, int kv_heads, "
        "int capacity, bool is_causal, float? scale) -> (Tensor, Tensor, Tensor, Tensor)");
  m.def("_kernel(Tensor[] inputs, int entry) -> Tensor[]");  // aten/kernel.h
}

TORCH_LIBRARY_IMPL(torchtpu, PrivateUse1, m) {
  using torchtpu::aten::op_kernel;
  m.impl("_append_rows", torch::CppFunction::makeFromBoxedFunction<&op_kernel>());
  m.impl("_attention_prefix", torch::CppFunction::makeFromBoxedFunction<&op_kernel>());
  m.impl("_kernel", torch::CppFunction::makeFromBoxedFunction<&op_kernel>());
}

TORCH_LIBRARY_IMPL(torchtpu, Meta, m) {
  m.impl("_append_rows", &torchtpu::aten::append_rows_meta);
  m.impl("_attention_prefix", &torchtpu::aten::attention_prefix_meta);
  m.impl("_kernel", &torchtpu::aten::kernel_meta);
}

TORCH_LIBRARY_IMPL(_, PrivateUse1, m) {
  m.fallback(torch::CppFunction::makeFromBoxedFunction<&torchtpu::aten::cpu_fallback>());
}
