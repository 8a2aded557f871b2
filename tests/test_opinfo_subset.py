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
# Forward values only, to stay fast; the full tool compares gradients too.
CONFIG = RunConfig(samples=3, check_grad=False)

OPS = {variant_name(op): op for op in load_op_db()}


@pytest.mark.parametrize("name", LOWERED_OPINFOS)
def test_passes_natively(name):
    result = run_dtype(OPS[name], torch.float32, CONFIG)
    check = result.forward
    assert check.status is Status.PASS, f"{name}: {check.status.value} {check.reason} fallback={check.fallback_ops}"
    assert check.samples > 0
