#include "aten/attention.h"

#include <ATen/Context.h>
#include <ATen/native/DispatchStub.h>
#include <ATen/native/transformers/attention.h>
#include <ATen/native/transformers/sdp_utils_cpp.h>

namespace torchtpu::aten {

int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool /*is_causal*/,
                         std::optional<double> /*scale*/, bool /*enable_gqa*/) {
  // [batch, heads, length, dim]; key and value may share each head among a group of query heads (GQA).
  const bool four_d = query.dim() == 4 && key.dim() == 4 && value.dim() == 4;
  const bool same_heads = four_d && key.size(1) == value.size(1) && key.size(1) > 0 &&
                          query.size(1) % key.size(1) == 0;
  const bool floating_mask = !attn_mask.has_value() || attn_mask->is_floating_point() ||
                             attn_mask->scalar_type() == at::kBool;
  const bool fused = at::globalContext().userEnabledOverrideableSDP() && dropout_p == 0.0 && same_heads &&
                     floating_mask && !query.is_nested();
  if (fused || !at::globalContext().userEnabledMathSDP()) return static_cast<int64_t>(sdp::SDPBackend::overrideable);
  return static_cast<int64_t>(sdp::SDPBackend::math);
}

}  // namespace torchtpu::aten

namespace at::native {
// scaled_dot_product_attention asks this stub, per device type, which backend to run.
REGISTER_PRIVATEUSE1_DISPATCH(_fused_sdp_choice_stub, &torchtpu::aten::fused_sdp_choice)
}  // namespace at::native
