"""torch.nn.functional ops on tpu against CPU PyTorch: forward values and autograd gradients, and no CPU
fallback for the ops lowered in csrc/lowering/nn*.cc.

Tolerances: float32 rtol=1e-5/atol=1e-5 (convolutions: atol=1e-4, they sum up to a few hundred products
in a different order); bfloat16 rtol=atol=2e-2 (both sides round to bf16, but tpu accumulates in float32
where CPU's kernels sometimes round intermediate results). Integer results (pooling indices) are exact.
"""
import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops

F32 = dict(rtol=1e-5, atol=1e-5)
CONV = dict(rtol=1e-5, atol=1e-4)
BF16 = dict(rtol=2e-2, atol=2e-2)

def run_both(fn, args, grad_args, dtype):
    """fn on CPU and on tpu copies of args; returns (cpu_out, tpu_out, cpu_grads, tpu_grads)."""
    def prepare(device):
        prepared = []
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                a = a.to(dtype) if a.is_floating_point() else a
                a = a.detach().to(device)
                if i in grad_args:
                    a.requires_grad_()
            prepared.append(a)
        return prepared

    cpu_args, tpu_args = prepare("cpu"), prepare("tpu")
    torchtpu.reset_metrics()
    expected, actual = fn(*cpu_args), fn(*tpu_args)
    grads = ([], [])
    if grad_args:
        upstream = torch.randn(expected.shape).to(expected.dtype)
        expected.backward(upstream)
        actual.backward(upstream.to("tpu"))
        grads = ([cpu_args[i].grad for i in grad_args], [tpu_args[i].grad for i in grad_args])
    return expected, actual, grads


def check(fn, args, grad_args=(), dtype=torch.float32, tol=None):
    tol = tol or (F32 if dtype == torch.float32 else BF16)
    expected, actual, (cpu_grads, tpu_grads) = run_both(fn, args, grad_args, dtype)
    assert actual.device.type == "tpu"
    assert_close(actual.cpu(), expected, **tol)
    for e, a in zip(cpu_grads, tpu_grads):
        assert a.device.type == "tpu"
        assert_close(a.cpu(), e, **tol)
    assert not fallback_ops(), f"CPU fallbacks: {fallback_ops()}"


def randn(*shape):
    return torch.randn(shape)


DTYPES = [torch.float32, torch.bfloat16]


# ---- softmax ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax(fn, dim, dtype):
    check(lambda x: fn(x, dim=dim), [randn(4, 5, 6) * 5], (0,), dtype)


@pytest.mark.parametrize("fn", [F.softmax, F.log_softmax], ids=["softmax", "log_softmax"])
def test_softmax_half_to_float(fn):
    # dtype=float32 on a bf16 input computes in float32 and returns float32 (half_to_float).
    check(lambda x: fn(x, dim=-1, dtype=torch.float32), [randn(3, 7)], (0,), torch.bfloat16)


def test_softmax_large_and_masked_values():
    x = randn(3, 6) * 100
    x[0, :3] = float("-inf")
    check(lambda t: F.softmax(t, dim=1), [x], (0,))
    check(lambda t: F.log_softmax(t, dim=1), [x])


def test_softmax_0d():
    check(lambda t: F.softmax(t, dim=0), [torch.tensor(1.5)], (0,))


# ---- activations --------------------------------------------------------------------------------------

ACTIVATIONS = {
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "hardtanh": F.hardtanh,
    "hardtanh_range": lambda x: F.hardtanh(x, -0.5, 2.0),
    "relu6": F.relu6,
    "leaky_relu": F.leaky_relu,
    "leaky_relu_slope": lambda x: F.leaky_relu(x, 0.2),
    "elu": F.elu,
    "selu": F.selu,
    "celu": lambda x: F.celu(x, 0.7),
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "mish": F.mish,
    "threshold": lambda x: F.threshold(x, 0.5, -2.0),
    "softshrink": lambda x: F.softshrink(x, 0.7),
    "hardshrink": F.hardshrink,
    "glu": F.glu,
    "glu_dim0": lambda x: F.glu(x, 0),
    "rrelu_eval": lambda x: F.rrelu(x, 0.1, 0.3),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(ACTIVATIONS))
def test_activation(name, dtype):
    check(ACTIVATIONS[name], [randn(6, 8) * 3], (0,), dtype)


def test_inplace_activations():
    check(lambda x: F.leaky_relu(x.clone(), 0.1, inplace=True), [randn(4, 4)])
    check(lambda x: F.hardtanh(x.clone(), inplace=True), [randn(4, 4) * 2])
    check(lambda x: F.silu(x.clone(), inplace=True), [randn(4, 4)])
    check(lambda x: F.hardswish(x.clone(), inplace=True), [randn(4, 4) * 3])
    check(lambda x: F.threshold(x.clone(), 0.1, 5.0, inplace=True), [randn(4, 4)])
    check(lambda x: F.rrelu(x.clone(), inplace=True), [randn(4, 4)])  # rrelu_with_noise_, evaluation
    # elu_(inplace) differentiates through the result (elu_backward with is_result=True).
    check(lambda x: F.elu(x * 1, inplace=True), [randn(4, 4)], (0,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("channels", [1, 3])
def test_prelu(channels, dtype):
    check(F.prelu, [randn(2, 3, 4) * 3, randn(channels)], (0, 1), dtype)


def test_rrelu_training_draws_slopes_in_range():
    x = (torch.randn(2000) * 3).to("tpu").requires_grad_()
    torchtpu.reset_metrics()
    y = F.rrelu(x, 0.1, 0.3, training=True)
    y.sum().backward()
    x_cpu, y_cpu, grad = x.detach().cpu(), y.detach().cpu(), x.grad.cpu()
    negative = x_cpu <= 0
    slopes = y_cpu[negative] / x_cpu[negative]
    assert slopes.min() >= 0.1 and slopes.max() < 0.3 and abs(slopes.mean() - 0.2) < 0.01
    assert_close(y_cpu[~negative], x_cpu[~negative])
    assert_close(grad[negative], slopes)  # the backward reuses the drawn noise
    in_place = x.detach().clone()
    F.rrelu(in_place, 0.1, 0.3, training=True, inplace=True)
    slopes = in_place.cpu()[negative] / x_cpu[negative]
    assert slopes.min() >= 0.1 and slopes.max() < 0.3
    assert not fallback_ops()


@pytest.mark.parametrize("fn", [F.hardswish, F.hardsigmoid, F.hardshrink, lambda t: F.huber_loss(t, t)],
                         ids=["hardswish", "hardsigmoid", "hardshrink", "huber_loss"])
def test_integer_input_raises_like_cpu(fn):
    # The meta kernels accept integers; CPU's kernels (and so the rules) do not.
    x = torch.tensor([-2, 0, 3])
    with pytest.raises(RuntimeError, match="not implemented for"):
        fn(x)
    with pytest.raises(RuntimeError, match="not implemented for"):
        fn(x.to("tpu"))


def test_glu_odd_dim_raises_like_cpu():
    with pytest.raises(RuntimeError, match="even"):
        F.glu(torch.randn(3, 5).to("tpu"))


# ---- normalization ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_layer_norm(affine, dtype):
    weight, bias = (randn(4, 5), randn(4, 5)) if affine else (None, None)
    grads = (0, 1, 2) if affine else (0,)
    check(lambda x, w, b: F.layer_norm(x, [4, 5], w, b), [randn(3, 4, 5) * 2 + 1, weight, bias], grads, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("affine", [True, False])
def test_group_norm(affine, dtype):
    weight, bias = (randn(6), randn(6)) if affine else (None, None)
    grads = (0, 1, 2) if affine else (0,)
    check(lambda x, w, b: F.group_norm(x, 3, w, b), [randn(2, 6, 4, 3) * 2 + 1, weight, bias], grads, dtype)


def test_norm_forward_has_no_fallback():
    check(lambda x, w, b: F.layer_norm(x, [5], w, b), [randn(3, 5), randn(5), randn(5)])
    check(lambda x, w, b: F.group_norm(x, 2, w, b), [randn(2, 4, 6), randn(4), randn(4)])


# ---- losses and embedding -----------------------------------------------------------------------------

@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(reduction, weighted):
    target = torch.tensor([0, 3, 1, 3, 2, 4])
    weight = torch.rand(5) + 0.1 if weighted else None
    check(lambda x, t, w: F.nll_loss(x, t, w, ignore_index=1, reduction=reduction),
          [randn(6, 5).log_softmax(1), target, weight], (0,))


def test_nll_loss_unbatched_and_ignore_outside_classes():
    check(lambda x, t: F.nll_loss(x, t), [randn(5), torch.tensor(2)], (0,))
    check(lambda x, t: F.nll_loss(x, t), [randn(4, 5), torch.tensor([0, -100, 4, 2])], (0,))


@pytest.mark.parametrize("loss", [
    lambda x, t: F.nll_loss(x.log_softmax(1), t, ignore_index=1),
    lambda x, t: F.cross_entropy(x, t, ignore_index=1, weight=torch.ones(5, device=x.device), label_smoothing=0.1),
    lambda x, t: F.cross_entropy(x[0], t[0], ignore_index=1),
], ids=["nll_loss", "cross_entropy_weight_smoothing", "cross_entropy_unbatched"])
def test_loss_of_only_ignored_targets_has_zero_gradient(loss):
    """A fully padded batch: the mean is NaN (0 / 0), the gradient 0 as on CPU, never NaN."""
    check(loss, [randn(3, 5), torch.tensor([1, 1, 1])], (0,), tol=dict(F32, equal_nan=True))


def test_hardswish_gradient_at_its_boundaries():
    check(F.hardswish, [torch.tensor([-3.0, 3.0, -3.5, 3.5, 0.5])], (0,))


@pytest.mark.parametrize("dtype", DTYPES)
def test_cross_entropy(dtype):
    check(lambda x, t: F.cross_entropy(x, t), [randn(8, 10) * 3, torch.randint(0, 10, (8,))], (0,), dtype)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_cross_entropy_2d(reduction):
    # [N, C, H, W] input: nll_loss2d_forward / nll_loss2d_backward.
    check(lambda x, t: F.cross_entropy(x, t, reduction=reduction, ignore_index=2),
          [randn(2, 5, 3, 4), torch.randint(0, 5, (2, 3, 4))], (0,))


@pytest.mark.parametrize("padding_idx", [None, 2])
@pytest.mark.parametrize("scale_grad_by_freq", [False, True])
def test_embedding(padding_idx, scale_grad_by_freq):
    indices = torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]])
    check(lambda i, w: F.embedding(i, w, padding_idx=padding_idx, scale_grad_by_freq=scale_grad_by_freq),
          [indices, randn(10, 3)], (1,))


def test_embedding_bf16():
    check(lambda i, w: F.embedding(i, w), [torch.randint(0, 6, (5, 3)), randn(6, 4)], (1,), torch.bfloat16)


REDUCTIONS = ["mean", "sum", "none"]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_binary_cross_entropy(reduction, dtype):
    probabilities = torch.rand(4, 5).clamp(0.05, 0.95)
    target = torch.rand(4, 5)
    check(lambda x, t: F.binary_cross_entropy(x, t, reduction=reduction), [probabilities, target], (0, 1), dtype)


def test_binary_cross_entropy_weight_and_saturated_inputs():
    # log(0) is clamped at -100 as on CPU, so inputs of exactly 0 and 1 give finite losses.
    x = torch.tensor([[0.0, 1.0, 0.3], [0.5, 1.0, 0.0]])
    t = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    check(lambda x, t, w: F.binary_cross_entropy(x, t, w, reduction="none"), [x, t, randn(3)])
    check(lambda x, t, w: F.binary_cross_entropy(x, t, w), [torch.rand(3, 3), torch.rand(3, 3), randn(3)], (0,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("name", ["smooth_l1", "smooth_l1_beta0", "huber"])
def test_robust_regression_losses(name, reduction, dtype):
    fn = {"smooth_l1": lambda x, t: F.smooth_l1_loss(x, t, reduction=reduction, beta=0.7),
          "smooth_l1_beta0": lambda x, t: F.smooth_l1_loss(x, t, reduction=reduction, beta=0.0),
          "huber": lambda x, t: F.huber_loss(x, t, reduction=reduction, delta=0.6)}[name]
    check(fn, [randn(4, 6), randn(4, 6)], (0, 1), dtype)


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("p", [1, 2])
def test_multi_margin_loss(p, reduction):
    target = torch.tensor([0, 3, 2, 3])
    check(lambda x, w: F.multi_margin_loss(x, target.to(x.device), p=p, margin=0.8, weight=w, reduction=reduction),
          [randn(4, 5), torch.rand(5)])
    check(lambda x: F.multi_margin_loss(x, target[1:2].to(x.device), reduction=reduction), [randn(5)])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_multilabel_margin_loss(reduction):
    # Labels end at the first -1; a repeated label counts twice, as on CPU.
    target = torch.tensor([[3, 0, -1, 1], [1, 1, 2, 0], [-1, 2, 1, 0]])
    check(lambda x: F.multilabel_margin_loss(x, target.to(x.device), reduction=reduction), [randn(3, 4)])
    # Unbatched with reduction none is 0-d, as on CPU (PyTorch's meta kernel says [1]).
    check(lambda x: F.multilabel_margin_loss(x, target[0].to(x.device), reduction=reduction), [randn(4)])


@pytest.mark.parametrize("dtype", DTYPES)
def test_distances(dtype):
    check(lambda a, b: F.pairwise_distance(a, b, p=3), [randn(4, 6), randn(4, 6)], (0, 1), dtype)
    check(lambda a, b: torch.dist(a, b, 1.5), [randn(4, 6), randn(4, 6)], (0, 1), dtype)
    check(lambda a, p, n: F.triplet_margin_loss(a, p, n, swap=True), [randn(4, 6), randn(4, 6), randn(4, 6)], (0, 1, 2), dtype)
    check(lambda x: torch.norm(x, p=2, dim=1, keepdim=True), [randn(3, 5)], (0,), dtype)
    check(lambda x: torch.norm(x, p=float("inf")), [randn(3, 5)], (0,), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_renorm(dtype):
    check(lambda x: torch.renorm(x, 2, 0, 1.5), [randn(4, 6)], (0,), dtype)
    check(lambda x: torch.renorm(x, 1, 1, 2.0), [randn(3, 4, 2)], (0,), dtype)


def test_logit():
    check(lambda x: torch.logit(x), [torch.rand(4, 5)], (0,))
    check(lambda x: torch.logit(x, eps=0.2), [torch.rand(4, 5)], (0,))


def test_margin_loss_gradients():
    # Their backward ops have no meta kernel in PyTorch; torchtpu/_meta.py supplies one.
    target = torch.tensor([0, 3, 2, 3])
    check(lambda x, w: F.multi_margin_loss(x, target.to(x.device), p=2, weight=w), [randn(4, 5), torch.rand(5)], (0,))
    check(lambda x: F.multi_margin_loss(x, target.to(x.device), margin=2.0, reduction="none"), [randn(4, 5)], (0,))
    labels = torch.tensor([[3, 0, -1, 1], [1, 1, 2, 0], [-1, 2, 1, 0]])
    check(lambda x: F.multilabel_margin_loss(x, labels.to(x.device)), [randn(3, 4)], (0,))
    check(lambda x: F.multilabel_margin_loss(x, labels.to(x.device), reduction="none"), [randn(3, 4)], (0,))


def test_multi_margin_loss_bad_target_raises_like_cpu():
    with pytest.raises(RuntimeError):
        F.multi_margin_loss(torch.randn(3, 4).to("tpu"), torch.tensor([0, 1]).to("tpu"))


# ---- convolution --------------------------------------------------------------------------------------

CONVS = {
    "conv1d": (lambda x, w, b: F.conv1d(x, w, b, stride=3, padding=2), (2, 3, 17), (5, 3, 4)),
    "conv2d": (lambda x, w, b: F.conv2d(x, w, b, stride=2, padding=1), (2, 3, 9, 8), (4, 3, 3, 3)),
    "conv2d_dilated_grouped": (lambda x, w, b: F.conv2d(x, w, b, stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2),
                               (2, 4, 9, 8), (6, 2, 3, 2)),
    "conv3d": (lambda x, w, b: F.conv3d(x, w, b, stride=2, padding=1), (1, 2, 5, 6, 4), (3, 2, 3, 3, 3)),
    "conv_transpose1d": (lambda x, w, b: F.conv_transpose1d(x, w, b, stride=2, padding=1), (2, 3, 7), (3, 4, 3)),
    "conv_transpose2d": (lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2,
                                                            dilation=2), (2, 4, 5, 6), (4, 3, 3, 3)),
    # output_padding past the stride (allowed by the dilation): the input gradient must drop what it adds.
    "conv_transpose2d_wide_output_padding": (
        lambda x, w, b: F.conv_transpose2d(x, w, b, stride=(3, 2), padding=(1, 2), output_padding=(2, 3), groups=2,
                                           dilation=(4, 4)), (2, 2, 4, 4), (2, 2, 4, 5)),
}


def conv_bias(weight_shape, transposed):
    return randn(weight_shape[1] * (2 if transposed else 1)) if transposed else randn(weight_shape[0])


@pytest.mark.parametrize("name", list(CONVS))
def test_convolution_forward(name):
    fn, x_shape, w_shape = CONVS[name]
    out_channels = fn(randn(*x_shape), randn(*w_shape), None).shape[1]
    check(fn, [randn(*x_shape), randn(*w_shape), randn(out_channels)], (), tol=CONV)


@pytest.mark.parametrize("name", list(CONVS))
def test_convolution_backward(name):
    # Every gradient requested: output_mask is all true.
    fn, x_shape, w_shape = CONVS[name]
    out_channels = fn(randn(*x_shape), randn(*w_shape), None).shape[1]
    check(fn, [randn(*x_shape), randn(*w_shape), randn(out_channels)], (0, 1, 2), tol=CONV)


def test_convolution_bf16():
    # Against CPU float32 on the same bf16-rounded inputs: tpu accumulates bf16 convolutions in float32
    # and rounds once, so it agrees with float32 to bf16 precision (CPU's bf16 kernel rounds more often).
    fn, x_shape, w_shape = CONVS["conv2d"]
    args = [randn(*x_shape).bfloat16(), randn(*w_shape).bfloat16(), randn(4).bfloat16()]
    torch.manual_seed(1)  # the same upstream gradient for both runs
    expected, _, (cpu_grads, _) = run_both(fn, [a.float() for a in args], (0, 1, 2), torch.float32)
    torch.manual_seed(1)
    _, actual_bf16, (_, tpu_grads_bf16) = run_both(fn, args, (0, 1, 2), torch.bfloat16)
    assert actual_bf16.dtype == torch.bfloat16
    assert_close(actual_bf16.cpu().float(), expected, **BF16)
    for e, a in zip(cpu_grads, tpu_grads_bf16):
        assert_close(a.cpu().float(), e, rtol=2e-2, atol=5e-2)


LAYOUTS = ["contiguous", "channels_last"]


def in_layout(t: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "contiguous":
        return t.contiguous()
    return t.to(memory_format=torch.channels_last if t.dim() == 4 else torch.channels_last_3d)


@pytest.mark.parametrize("name", [n for n in CONVS if "1d" not in n])
@pytest.mark.parametrize("input_layout", LAYOUTS)
@pytest.mark.parametrize("weight_layout", LAYOUTS)
def test_convolution_result_layout_is_the_one_torch_compile_assumes(name, input_layout, weight_layout):
    # PyTorch lays out the result of a convolution on an "overrideable" backend (tpu's) row-major, whatever
    # its operands' layouts: that is what torch.compile's fake tensors assume, so eager tpu gives the same
    # strides (a channels-last result broke a compiled conv followed by flatten); the values agree with
    # CPU's, and the gradients have their inputs' layouts, as on CPU.
    fn, x_shape, w_shape = CONVS[name]
    x, w = in_layout(randn(*x_shape), input_layout), in_layout(randn(*w_shape), weight_layout)
    expected = fn(x, w, None)
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    actual = fn(xt, wt, None)
    assert actual.is_contiguous()
    with torch._subclasses.fake_tensor.FakeTensorMode() as mode:
        assert fn(mode.from_tensor(xt), mode.from_tensor(wt), None).stride() == actual.stride()
    assert_close(actual.cpu(), expected, **CONV)
    x.requires_grad_()
    w.requires_grad_()
    fn(x, w, None).sum().backward()
    actual.sum().backward()
    assert xt.grad.stride() == x.grad.stride() and wt.grad.stride() == w.grad.stride()
    assert_close(xt.grad.cpu(), x.grad, **CONV)


def test_convolution_backward_partial_mask():
    # No bias and an input without grad: output_mask = [False, True, False].
    check(lambda x, w: F.conv2d(x, w), [randn(2, 3, 8, 8), randn(4, 3, 3, 3)], (1,), tol=CONV)


# ---- pooling ------------------------------------------------------------------------------------------

POOLS = {
    "max": lambda x: F.max_pool2d(x, 3, 2, 1),
    "max_ceil_dilated": lambda x: F.max_pool2d(x, (3, 2), (2, 2), (1, 0), dilation=(1, 2), ceil_mode=True),
    "avg": lambda x: F.avg_pool2d(x, 3, 2, 1),
    "avg_ceil_exclude_pad": lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    "avg_divisor": lambda x: F.avg_pool2d(x, 2, divisor_override=3),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", list(POOLS))
def test_pool2d(name, dtype):
    check(POOLS[name], [randn(2, 3, 10, 9)], (0,), dtype)


def test_pool2d_unbatched():
    check(POOLS["max"], [randn(3, 8, 8)], (0,))
    check(POOLS["avg"], [randn(3, 8, 8)], (0,))


# ---- batch norm -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("affine", [True, False])
def test_batch_norm_training_updates_running_stats(affine):
    torch.manual_seed(0)
    cpu_bn = torch.nn.BatchNorm2d(4, affine=affine)
    tpu_bn = torch.nn.BatchNorm2d(4, affine=affine).to("tpu")
    tpu_bn.load_state_dict(cpu_bn.state_dict())
    x = randn(8, 4, 5, 5) * 3 + 1
    x_cpu, x_tpu = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    weights = torch.arange(5.0)
    torchtpu.reset_metrics()
    for bn, inp in ((cpu_bn, x_cpu), (tpu_bn, x_tpu)):
        for _ in range(2):
            (bn(inp) * weights.to(inp.device)).sum().backward()
    assert not fallback_ops()
    assert_close(tpu_bn.running_mean.cpu(), cpu_bn.running_mean)
    assert_close(tpu_bn.running_var.cpu(), cpu_bn.running_var)
    assert tpu_bn.num_batches_tracked.item() == 2
    assert_close(x_tpu.grad.cpu(), x_cpu.grad, rtol=1e-4, atol=1e-5)
    if affine:
        assert_close(tpu_bn.weight.grad.cpu(), cpu_bn.weight.grad, rtol=1e-4, atol=1e-5)
        assert_close(tpu_bn.bias.grad.cpu(), cpu_bn.bias.grad, rtol=1e-4, atol=1e-5)


def test_batch_norm_eval_uses_running_stats():
    torch.manual_seed(0)
    cpu_bn = torch.nn.BatchNorm1d(3)
    cpu_bn.running_mean.uniform_(-1, 1)
    cpu_bn.running_var.uniform_(0.5, 2)
    cpu_bn.eval()
    tpu_bn = torch.nn.BatchNorm1d(3).to("tpu").eval()
    tpu_bn.load_state_dict(cpu_bn.state_dict())
    check(lambda x: tpu_bn(x) if x.device.type == "tpu" else cpu_bn(x), [randn(6, 3)], (0,))


def test_batch_norm_with_update():
    weight, bias = randn(4), randn(4)
    mean, var = randn(4), torch.rand(4) + 0.5
    x = randn(6, 4, 3)
    cpu_mean, cpu_var = mean.clone(), var.clone()
    tpu_mean, tpu_var = mean.to("tpu"), var.to("tpu")

    def fn(x, w, b):
        stats = (tpu_mean, tpu_var) if x.device.type == "tpu" else (cpu_mean, cpu_var)
        return torch.ops.aten._batch_norm_with_update(x, w, b, *stats, 0.2, 1e-5)[0]

    check(fn, [x, weight, bias], (0, 1, 2))
    assert_close(tpu_mean.cpu(), cpu_mean)
    assert_close(tpu_var.cpu(), cpu_var)


def test_max_pool2d_indices():
    x = randn(2, 3, 9, 8)
    x[0, 0, :3, :3] = 1.0  # ties: the first maximum wins, as on CPU
    expected = F.max_pool2d(x, 3, 2, 1, return_indices=True)
    actual = F.max_pool2d(x.to("tpu"), 3, 2, 1, return_indices=True)
    assert_close(actual[0].cpu(), expected[0])
    assert actual[1].dtype == torch.int64
    assert torch.equal(actual[1].cpu(), expected[1])


# ---- a small CNN step ---------------------------------------------------------------------------------

def test_cnn_training_step():
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, padding=1)
            self.fc = torch.nn.Linear(4 * 4 * 4, 5)

        def forward(self, x):
            x = F.max_pool2d(F.gelu(self.conv(x)), 2)
            return self.fc(torch.flatten(x, 1)).log_softmax(-1)

    cpu_net = Net()
    tpu_net = Net()
    tpu_net.load_state_dict(cpu_net.state_dict())
    tpu_net = tpu_net.to("tpu")
    x = randn(2, 3, 8, 8)
    target = torch.tensor([1, 4])
    F.nll_loss(cpu_net(x), target).backward()
    x_tpu = x.to("tpu")
    torchtpu.reset_metrics()
    F.nll_loss(tpu_net(x_tpu), target.to("tpu")).backward()
    for (name, p), q in zip(cpu_net.named_parameters(), tpu_net.parameters()):
        assert_close(q.grad.cpu(), p.grad, **CONV, msg=name)
    assert not fallback_ops()


def test_logsigmoid():
    check(F.logsigmoid, [randn(4, 6) * 10], (0,))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,output_size", [((2, 3, 7, 9), (3, 4)), ((2, 3, 8, 8), (2, 2)), ((3, 10, 6), (4, 3))])
def test_adaptive_avg_pool2d(shape, output_size, dtype):
    check(lambda x: F.adaptive_avg_pool2d(x, output_size), [randn(*shape)], (0,), dtype)


@pytest.mark.parametrize("mode", ["reflect", "replicate"])
@pytest.mark.parametrize("shape,pad", [((2, 3, 7), (2, 3)), ((2, 3, 5, 6), (1, 2, 3, 0)), ((1, 2, 3, 4, 5), (1, 1, 2, 0, 1, 2))])
def test_reflection_and_replication_pad(shape, pad, mode):
    check(lambda x: F.pad(x, pad, mode=mode), [randn(*shape)], (0,))


# ---- ctc_loss (nn_ctc.cc) -------------------------------------------------------------------------------
# Float64 compares at rtol=atol=1e-10 (both run the same recurrence in a different order), float32 at F32.

CTC_LENGTHS = ([12, 7, 3, 0, 12], [5, 2, 0, 1, 3])  # an empty input, an empty target, one with no path


def ctc_case(dtype, concatenated, seed=0):
    generator = torch.Generator().manual_seed(seed)
    input_lengths, target_lengths = CTC_LENGTHS
    log_probs = torch.randn(12, 5, 6, generator=generator, dtype=dtype).log_softmax(2)
    targets = torch.randint(1, 6, (5, 5), generator=generator)
    targets[0, 1] = targets[0, 0]  # a repeated label needs a blank between its copies
    if concatenated:
        targets = torch.cat([row[:n] for row, n in zip(targets, target_lengths)])
    return log_probs, targets


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("concatenated", [False, True], ids=["padded", "concatenated"])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("zero_infinity", [False, True])
def test_ctc_loss(dtype, concatenated, reduction, zero_infinity, metrics):
    log_probs, targets = ctc_case(dtype, concatenated)
    input_lengths, target_lengths = CTC_LENGTHS

    def loss(x, y):
        # Tensor lengths, as training code passes them: ctc_loss reads them on the host.
        return F.ctc_loss(x, y, torch.tensor(input_lengths), torch.tensor(target_lengths), reduction=reduction,
                          zero_infinity=zero_infinity)

    tol = F32 if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    expected, actual, (cpu_grads, tpu_grads) = run_both(loss, [log_probs, targets], (0,), dtype)
    assert_close(actual.cpu(), expected, **tol, equal_nan=True)
    # Without zero_infinity the sample with no path has an infinite loss and NaN gradients, on CPU too.
    assert_close(tpu_grads[0].cpu(), cpu_grads[0], **tol, equal_nan=True)
    assert not fallback_ops(), f"CPU fallbacks: {fallback_ops()}"


def test_ctc_loss_lengths_are_operands():
    """A loop whose lengths change every batch reuses one program per longest target; the longest input may
    change too (a batch padded to a fixed T)."""
    log_probs, targets = ctc_case(torch.float32, concatenated=False)
    x = log_probs.to("tpu").requires_grad_()
    generator = torch.Generator().manual_seed(1)

    def step(input_lengths, target_lengths):
        x.grad = None
        F.ctc_loss(x, targets.to("tpu"), input_lengths, target_lengths, zero_infinity=True).backward()
        expected = log_probs.clone().requires_grad_()
        F.ctc_loss(expected, targets, input_lengths, target_lengths, zero_infinity=True).backward()
        assert_close(x.grad.cpu(), expected.grad, **F32)

    step(torch.tensor([12, 3, 5, 9, 1]), torch.tensor([5, 1, 2, 4, 0]))
    torchtpu.reset_metrics()
    for _ in range(4):
        input_lengths = torch.randint(0, 13, (5,), generator=generator)
        target_lengths = torch.randint(0, 5, (5,), generator=generator)
        target_lengths[1] = 5
        step(input_lengths, target_lengths)
    counts = torchtpu.metrics()["ops"]
    assert counts["aten::_ctc_loss"]["compiles"] == 0 and counts["aten::_ctc_loss_backward"]["compiles"] == 0
    assert not fallback_ops()


def test_ctc_loss_dtype_cpu_refuses():
    log_probs, targets = ctc_case(torch.float32, concatenated=False)
    lengths = CTC_LENGTHS
    with pytest.raises(RuntimeError, match="not implemented for 'BFloat16'"):
        F.ctc_loss(log_probs.bfloat16().to("tpu"), targets.to("tpu"), *lengths)


def test_ctc_loss_in_fused_debug_and_compiled_modes():
    log_probs, targets = ctc_case(torch.float32, concatenated=False)
    lengths = [torch.tensor(n) for n in CTC_LENGTHS]
    torchtpu.reset_metrics()
    expected = log_probs.clone().requires_grad_()
    F.ctc_loss(expected, targets, *lengths, zero_infinity=True).backward()
    for mode in ("fused", "debug"):
        with torchtpu.eager_mode(mode):
            x = log_probs.to("tpu").requires_grad_()
            F.ctc_loss(x, targets.to("tpu"), *lengths, zero_infinity=True).backward()
            assert_close(x.grad.cpu(), expected.grad, **F32)
    compiled = torch.compile(lambda x, y: F.ctc_loss(x, y, *lengths, zero_infinity=True), backend="tpu")
    assert_close(compiled(log_probs.to("tpu"), targets.to("tpu")).cpu(),
                 F.ctc_loss(log_probs, targets, *lengths, zero_infinity=True), **F32)
    assert not fallback_ops()


@pytest.mark.parametrize("module, dim, shape", [
    (lambda: nn.Conv1d(8, 8, 5, groups=2), 0, (2, 8, 16)), (lambda: nn.Conv1d(8, 8, 5, groups=2), 2, (2, 8, 16)),
    (lambda: nn.Linear(6, 4), 0, (3, 6)), (lambda: nn.Linear(6, 4), 1, (3, 6))])
def test_weight_norm_is_lowered(module, dim, shape, metrics):
    # nn.utils.parametrizations.weight_norm (Wav2Vec2's and HuBERT's positional convolution) calls the fused
    # _weight_norm_interface and its backward.
    from torch.nn.utils.parametrizations import weight_norm

    torch.manual_seed(0)
    cpu = weight_norm(module(), dim=dim)
    tpu = copy.deepcopy(cpu).to("tpu")
    x = torch.randn(*shape)
    cpu(x).square().sum().backward()
    out = tpu(x.to("tpu"))
    out.square().sum().backward()
    assert_close(out.detach().cpu(), cpu(x).detach(), rtol=1e-5, atol=1e-6)
    for p_cpu, p_tpu in zip(cpu.parameters(), tpu.parameters()):
        assert_close(p_tpu.grad.cpu(), p_cpu.grad, rtol=1e-5, atol=1e-5)
    assert fallback_ops() == {}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(8, 13), (5, 30), (18, 22)])
def test_antialiased_bicubic_matches_cpu_with_gradients(size, align_corners, dtype):
    # Keys' cubic filter (a = -0.5) widened by the scale when shrinking, as PyTorch's kernel; no fallback.
    def interpolate(t):
        return F.interpolate(t, size=size, mode="bicubic", antialias=True, align_corners=align_corners)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-12, atol=1e-12)
    check(interpolate, [randn(2, 3, 17, 20)], (0,), dtype=dtype, tol=tol)


def test_antialiased_bicubic_uint8_images_are_within_1_of_cpu():
    # CPU weighs uint8 images in fixed point; tpu in float32, rounding and clamping after each dim.
    image = (torch.rand(1, 3, 32, 40) * 255).to(torch.uint8)
    expected = F.interpolate(image, size=(8, 13), mode="bicubic", antialias=True)
    actual = F.interpolate(image.to("tpu"), size=(8, 13), mode="bicubic", antialias=True).cpu()
    assert actual.dtype == torch.uint8
    assert (actual.int() - expected.int()).abs().max().item() <= 1
