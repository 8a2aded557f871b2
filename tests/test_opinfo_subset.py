"""Common lowered ops pass their OpInfo samples natively in float32: the fast, in-process subset of
``python -m torchtpu.testing.opinfo`` (same runner, same tolerances)."""
import pytest
import torch

from torchtpu.testing.opinfo import RunConfig, Status, load_op_db, run_dtype, variant_name

LOWERED_OPINFOS = [
    "add", "sub", "mul", "div.no_rounding_mode", "neg", "abs", "exp", "log", "sqrt", "tanh", "sigmoid",
    "nn.functional.relu", "sum", "mean", "amax", "argmax", "mm", "addmm", "bmm", "matmul", "where", "clamp",
    "maximum", "minimum", "pow", "eq", "lt", "nn.functional.mse_loss", "clone",
    # One or two from each later family: linear algebra, special functions, pooling and resampling,
    # order statistics, histograms, masked ops.
    "linalg.solve", "linalg.cholesky", "digamma", "special.i0e", "nn.functional.max_pool3d",
    "nn.functional.interpolate.bilinear", "median", "searchsorted", "histogram", "masked_scatter", "baddbmm",
]
# Complex values: complex64 samples, or float32 samples whose results are complex (the FFT family).
COMPLEX_OPINFOS = [
    ("fft.fft", torch.complex64), ("fft.ifft", torch.complex64), ("fft.rfft", torch.float32),
    ("fft.irfft", torch.complex64), ("fft.hfft", torch.complex64), ("fft.ihfft", torch.float32),
    ("fft.fftn", torch.complex64), ("fft.rfft2", torch.float32), ("fft.irfftn", torch.complex64),
    ("mul", torch.complex64), ("div.no_rounding_mode", torch.complex64), ("abs", torch.complex64),
    ("angle", torch.complex64), ("sgn", torch.complex64), ("mm", torch.complex64), ("matmul", torch.complex64),
    ("sum", torch.complex64), ("view_as_real", torch.complex64), ("polar", torch.float32),
    ("complex", torch.float32), ("stft", torch.float32), ("istft", torch.complex64),
]
# Forward values only, to stay fast; the full tool compares gradients too.
CONFIG = RunConfig(samples=3, check_grad=False)

OPS = {variant_name(op): op for op in load_op_db()}


@pytest.mark.parametrize("name", LOWERED_OPINFOS)
def test_passes_natively(name):
    result = run_dtype(OPS[name], torch.float32, CONFIG)
    check = result.forward
    assert check.status is Status.PASS, f"{name}: {check.status.value} {check.reason} fallback={check.fallback_ops}"
    assert check.samples > 0


@pytest.mark.parametrize("name,dtype", COMPLEX_OPINFOS, ids=[f"{n}-{str(d)[6:]}" for n, d in COMPLEX_OPINFOS])
def test_complex_passes_natively(name, dtype):
    check = run_dtype(OPS[name], dtype, CONFIG).forward
    assert check.status is Status.PASS, f"{name}: {check.status.value} {check.reason} fallback={check.fallback_ops}"
    assert check.samples > 0
