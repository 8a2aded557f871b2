// Autocast on tpu (`torch.autocast("tpu", dtype=torch.bfloat16)`, Trainer's `bf16=True`).
//
// Every tensor on tpu carries the AutocastPrivateUse1 key; while autocast is off it is excluded, while it is on
// each op passes through it first. Ops with no autocast policy fall through to the tpu kernels unchanged. The
// ops with a policy use the lists PyTorch keeps in autocast_mode.h for every backend, so tpu casts exactly the
// ops CUDA casts: matmuls and convolutions to the lower precision, numerically touchy ops (exp, log, norms,
// losses, softmax with a dtype) to float32, and mixed-input ops to the widest input type. The casts themselves
// are ordinary tpu ops, so nothing here runs on the host.
#include <ATen/autocast_mode.h>
#include <torch/library.h>

namespace {

// The signatures in AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE name these types unqualified.
using at::IntArrayRef;
using at::Scalar;
using at::ScalarType;
using at::Tensor;

TORCH_LIBRARY_IMPL(_, AutocastPrivateUse1, m) { m.fallback(torch::CppFunction::makeFallthrough()); }

TORCH_LIBRARY_IMPL(aten, AutocastPrivateUse1, m) {
#define TORCHTPU_LOWER_PRECISION(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, lower_precision_fp)
#define TORCHTPU_FP32(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32)
#define TORCHTPU_FP32_SET_OPT_DTYPE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, fp32_set_opt_dtype)
#define TORCHTPU_FP32_APPEND_DTYPE(REDISPATCH_FUNC, REGISTER_NAME, REGISTER_SIGNATURE, REDISPATCH_SIGNATURE, \
                                   POLICY)                                                                   \
  KERNEL_DIFFERENT_REDISPATCH_SIGNATURE_PRIVATEUSEONE(REDISPATCH_FUNC, REGISTER_NAME, REGISTER_SIGNATURE,    \
                                                      REDISPATCH_SIGNATURE, POLICY)
#define TORCHTPU_PROMOTE(...) KERNEL_PRIVATEUSEONE(__VA_ARGS__, promote)

  AT_FORALL_LOWER_PRECISION_FP(TORCHTPU_LOWER_PRECISION)
  AT_FORALL_FP32(TORCHTPU_FP32)
  AT_FORALL_FP32_SET_OPT_DTYPE(TORCHTPU_FP32_SET_OPT_DTYPE)
  AT_FORALL_DIFFERENT_REDISPATCH_SIGNATURE(TORCHTPU_FP32_APPEND_DTYPE)
  AT_FORALL_PROMOTE(TORCHTPU_PROMOTE)
  // CUDA refuses binary_cross_entropy under autocast because float16 overflows there; with bfloat16 (the tpu
  // default) the safe answer is to compute it in float32, as the other losses are.
  TORCHTPU_FP32(binary_cross_entropy)

#undef TORCHTPU_LOWER_PRECISION
#undef TORCHTPU_FP32
#undef TORCHTPU_FP32_SET_OPT_DTYPE
#undef TORCHTPU_FP32_APPEND_DTYPE
#undef TORCHTPU_PROMOTE
}

}  // namespace
