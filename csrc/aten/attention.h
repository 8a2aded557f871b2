// Which kernel F.scaled_dot_product_attention uses on tpu.
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace torchtpu::aten {

// PyTorch asks the device for an SDPA backend. tpu answers "overrideable" (one program each way, see
// lowering/attention.cc) unless the call needs what that path lacks: dropout, or grouped-query attention
// (keys with fewer heads than queries); then it answers "math", PyTorch's decomposition.
int64_t fused_sdp_choice(const at::Tensor& query, const at::Tensor& key, const at::Tensor& value,
                         const std::optional<at::Tensor>& attn_mask, double dropout_p, bool is_causal,
                         std::optional<double> scale, bool enable_gqa);

}  // namespace torchtpu::aten
