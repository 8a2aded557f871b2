"""Runs PyTorch's OpInfo database on the tpu device against CPU.

For every OpInfo in ``op_db`` and each requested dtype, the first few sample inputs run on CPU and on tpu
copies of them; outputs (and, for float32, gradients w.r.t. the inputs) are compared, and each
(op, dtype) gets a status:

- ``pass``: values match and everything ran natively;
- ``fallback``: values match, but some aten op ran through the CPU fallback (listed);
- ``mismatch``: a value, dtype, shape or device differs from CPU;
- ``error``: the tpu side raised (or its worker process crashed or hung);
- ``skipped``: nothing could be compared (dtype not supported by the OpInfo, sparse tensors, ...).

    python -m torchtpu.testing.opinfo [--ops add,mm] [--dtypes float32,bfloat16] [--samples 3] [--no-grad]

writes ``docs/opinfo_report.md``, ``docs/opinfo_report.png`` and ``bench/results/opinfo.json`` (paths
relative to the current directory; ``--from-json`` renders the first two again from the third). Every
(op, dtype) runs in a worker process, so a crash or a hang costs that one only; :func:`run_dtype` is the
in-process runner that the workers (and tests) call.
"""
from __future__ import annotations

import argparse
import collections
import enum
import functools
import multiprocessing
import queue
import sys
import time
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.testing import assert_close
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

import torchtpu
from torchtpu.metrics import fallback_ops

TPU = torch.device("tpu")


class Status(str, enum.Enum):
    PASS = "pass"
    FALLBACK = "fallback"
    MISMATCH = "mismatch"
    ERROR = "error"
    SKIPPED = "skipped"


# An (op, dtype) whose samples disagree takes the most severe of their statuses.
_SEVERITY = (Status.PASS, Status.FALLBACK, Status.MISMATCH, Status.ERROR)


@dataclass(frozen=True)
class Tolerance:
    rtol: float
    atol: float

    def loosest(self, other: Tolerance) -> Tolerance:
        return Tolerance(max(self.rtol, other.rtol), max(self.atol, other.atol))


# torch.testing's defaults, except bfloat16: its 8-bit mantissa makes one rounding step ~4e-3 of the value,
# and CPU and XLA may round intermediate results differently, so a few steps are allowed.
DEFAULT_TOLERANCES: dict[torch.dtype, Tolerance] = {
    torch.float32: Tolerance(rtol=1.3e-6, atol=1e-5),
    torch.bfloat16: Tolerance(rtol=1.6e-2, atol=1e-2),
    torch.float16: Tolerance(rtol=1e-3, atol=1e-5),
    torch.float64: Tolerance(rtol=1e-7, atol=1e-7),
    torch.complex64: Tolerance(rtol=1.3e-6, atol=1e-5),
    torch.complex128: Tolerance(rtol=1e-7, atol=1e-7),
}
# XLA evaluates transcendental functions with its own approximations, some tens of ulps from ATen's.
TRANSCENDENTAL_TOLERANCE_F32 = Tolerance(rtol=1e-5, atol=1e-5)
# Sums of products round differently when XLA adds the terms in another order; the absolute error grows
# with the number of terms and their magnitude (OpInfo samples reach |x| ~ 9), largest near cancellation.
ACCUMULATING_TOLERANCE_F32 = Tolerance(rtol=1e-5, atol=1e-4)

TRANSCENDENTAL_OPS = frozenset({
    "exp", "exp2", "expm1", "log", "log10", "log1p", "log2", "logit", "xlogy", "sin", "cos", "tan", "asin",
    "acos", "atan", "atan2", "sinh", "cosh", "tanh", "asinh", "acosh", "atanh", "sinc", "sigmoid", "erf",
    "erfc", "erfinv", "lgamma", "digamma", "polygamma", "mvlgamma", "i0", "pow", "float_power", "rsqrt",
    "logaddexp", "logaddexp2", "nn.functional.gelu", "nn.functional.silu", "nn.functional.mish",
    "nn.functional.softplus", "nn.functional.elu", "nn.functional.selu", "nn.functional.celu",
    "nn.functional.logsigmoid", "nn.functional.tanhshrink",
})
TRANSCENDENTAL_PREFIXES = ("special.",)
ACCUMULATING_OPS = frozenset({
    "mm", "bmm", "addmm", "addmv", "addbmm", "baddbmm", "addr", "matmul", "mv", "dot", "vdot", "inner",
    "tensordot", "einsum", "chain_matmul", "trace", "cumsum", "cumprod", "logcumsumexp", "cdist", "dist",
    "norm", "renorm", "softmax", "log_softmax", "logsumexp", "nn.functional.linear", "nn.functional.bilinear",
    "nn.functional.softmin", "nn.functional.normalize", "nn.functional.cosine_similarity",
    "nn.functional.pairwise_distance", "nn.functional.scaled_dot_product_attention", "var", "var_mean", "std",
    "std_mean",
})
ACCUMULATING_PREFIXES = (
    "linalg.", "fft.", "nn.functional.conv", "nn.functional.batch_norm", "nn.functional.layer_norm",
    "nn.functional.group_norm", "nn.functional.instance_norm", "nn.functional.rms_norm",
    "nn.functional.avg_pool", "nn.functional.adaptive_avg_pool", "nn.functional.interpolate",
    "nn.functional.multi_head_attention",
)
# Per-op exceptions to the rules above, keyed by variant name (see variant_name).
TOLERANCE_OVERRIDES: dict[str, dict[torch.dtype, Tolerance]] = {}

# OpInfos whose samples pass index tensors that the op requires on the host: only their input moves to tpu.
HOST_ARGUMENT_OPS = frozenset({"tensor_split"})
# Ops whose output is uninitialised memory, but whose OpInfo skips its CPU comparison without saying why.
UNDEFINED_OUTPUT_OPS = frozenset({"empty_strided"})
# Reasons OpInfos give for skipping their CPU comparison that are not about the outputs being comparable.
_IRRELEVANT_SKIP_REASONS = frozenset({"Skipped!", "Triton DSL not available"})


Arguments = tuple[Any, tuple[Any, ...], dict[str, Any]]  # a sample's input, args and kwargs


@dataclass(frozen=True)
class RunConfig:
    samples: int = 3  # samples compared per (op, dtype)
    check_grad: bool = True  # compare input gradients too, for float32 OpInfos that support autograd
    op_budget_s: float = 60.0  # per (op, dtype): samples not started after this long are dropped


@dataclass
class CheckResult:
    """Outcome of one check (forward values, or gradients) of an (op, dtype) over its samples."""
    status: Status
    reason: str = ""  # why it is not a pass: the skip reason, error or first mismatch
    fallback_ops: list[str] = field(default_factory=list)  # aten ops that ran through the CPU fallback
    samples: int = 0  # samples compared


@dataclass
class DtypeResult:
    dtype: str
    forward: CheckResult
    grad: CheckResult | None = None  # None: gradients not checked for this dtype
    notes: list[str] = field(default_factory=list)  # e.g. values not compared, time budget used up
    warnings: list[str] = field(default_factory=list)  # every distinct warning raised while running
    seconds: float = 0.0


@dataclass
class OpResult:
    name: str
    dtypes: dict[str, DtypeResult]


def variant_name(op: Any) -> str:
    """``op.name``, plus ``.variant_test_name`` for the OpInfos that test one op several ways."""
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def load_op_db() -> list[Any]:
    """PyTorch's OpInfo list. Importing it parses ``sys.argv`` for PyTorch's own test flags (``--help``
    even prints unittest's help), so it is imported with an empty command line."""
    argv = sys.argv
    sys.argv = argv[:1]
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    finally:
        sys.argv = argv
    return op_db


def select_ops(op_db: Iterable[Any], names: Iterable[str] | None) -> list[Any]:
    """The OpInfos matching ``names`` (an op name selects all its variants, ``name.variant`` one), or all."""
    if names is None:
        return list(op_db)
    wanted = set(names)
    selected = [op for op in op_db if op.name in wanted or variant_name(op) in wanted]
    unknown = wanted - {op.name for op in selected} - {variant_name(op) for op in selected}
    if unknown:
        raise ValueError(f"no OpInfo named {', '.join(sorted(unknown))}")
    return selected


def tolerance_for(op: Any, dtype: torch.dtype) -> Tolerance:
    """For ``op``'s floating outputs in ``dtype``: its override, else its category's (float32, and
    complex64 whose parts are float32), else the dtype's default."""
    override = TOLERANCE_OVERRIDES.get(variant_name(op), {}).get(dtype)
    if override is not None:
        return override
    if dtype in (torch.float32, torch.complex64):
        # Imported here, like every use of PyTorch's test internals: importing them parses sys.argv (see
        # load_op_db); any OpInfo passed in comes from load_op_db, which has imported them already.
        from torch.testing._internal.opinfo.core import ReductionOpInfo, SpectralFuncInfo
        if isinstance(op, (ReductionOpInfo, SpectralFuncInfo)) or _matches(op.name, ACCUMULATING_OPS,
                                                                            ACCUMULATING_PREFIXES):
            return ACCUMULATING_TOLERANCE_F32
        if _matches(op.name, TRANSCENDENTAL_OPS, TRANSCENDENTAL_PREFIXES):
            return TRANSCENDENTAL_TOLERANCE_F32
    return DEFAULT_TOLERANCES[dtype]


def _matches(name: str, names: frozenset[str], prefixes: tuple[str, ...]) -> bool:
    return name in names or name.startswith(prefixes)


def _incomparable_reason(op: Any, dtype: torch.dtype) -> str | None:
    """Why this op's values cannot be compared across devices, if they cannot: the reason the OpInfo gives
    for skipping its own CPU-vs-accelerator test (non-deterministic or undefined outputs)."""
    if op.name in UNDEFINED_OUTPUT_OPS:
        return "output is uninitialised memory"
    from torch.testing._internal.opinfo.core import DecorateInfo  # here: see tolerance_for
    for info in op.decorators:
        if not (isinstance(info, DecorateInfo)
                and info.is_active("TestCommon", "test_compare_cpu", TPU.type, dtype, {})):
            continue
        for decorator in info.decorators:
            reason = _skip_reason(decorator)
            if reason and reason not in _IRRELEVANT_SKIP_REASONS:
                return reason
    return None


def _skip_reason(decorator: Callable[..., Any]) -> str | None:
    """The reason of a ``unittest.skip(reason)`` decorator; None for any other decorator."""
    def probe() -> None:
        pass
    decorated = decorator(probe)
    if not getattr(decorated, "__unittest_skip__", False):
        return None
    return decorated.__unittest_skip_why__


class _CpuRunObserver(TorchDispatchMode):
    """Watches the aten ops of a CPU run for what tpu cannot reproduce: random numbers (tpu's generator
    draws another stream from the same seed, so such outputs can only be compared by shape and dtype).
    It watches a run on copies of the arguments, never the reference run: under a dispatch mode PyTorch
    computes some complex ops wrongly (complex pinverse and lstsq residuals, torch 2.13)."""

    def __init__(self) -> None:
        super().__init__()
        self.drew_random = False

    def __torch_dispatch__(self, func: Any, types: Any, args: Sequence[Any] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        output = func(*args, **kwargs)
        self.drew_random |= torch.Tag.nondeterministic_seeded in func.tags
        return output


def _copy_arguments(tree: Any) -> Any:
    """``tree`` with every tensor cloned (a copy the op may modify in place)."""
    def copy(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            return leaf.detach().clone().requires_grad_(leaf.requires_grad)
        return leaf
    return tree_map(copy, tree)


def _to_tpu(tree: Any) -> Any:
    """A copy of ``tree`` with every tensor on tpu; ``device="cpu"`` arguments (factory OpInfos take the
    sample device) become tpu too."""
    def move(leaf: Any) -> Any:
        if isinstance(leaf, torch.Tensor):
            # A fresh leaf, so gradients w.r.t. it correspond to those w.r.t. the CPU sample's tensor.
            return _copy_to_tpu(leaf).requires_grad_(leaf.requires_grad)
        if isinstance(leaf, torch.device) and leaf.type == "cpu":
            return TPU
        if isinstance(leaf, str) and leaf == "cpu":
            return TPU.type
        return leaf
    return tree_map(move, tree)


def _copy_to_tpu(tensor: torch.Tensor) -> torch.Tensor:
    """A detached tpu copy of ``tensor``. A view is copied with its whole storage and viewed the same way,
    since some samples (as_strided's) reach storage outside the view, which ``.to()`` alone would drop."""
    is_view = tensor._base is not None
    tensor = tensor.detach()
    if not is_view:
        return tensor.to(TPU)
    storage_numel = tensor.untyped_storage().nbytes() // tensor.element_size()
    storage = tensor.as_strided((storage_numel,), (1,), 0).to(TPU)
    return storage.as_strided(tensor.size(), tensor.stride(), tensor.storage_offset()).detach()


def _unsupported_reason(tree: Any) -> str | None:
    """Why tpu cannot hold some tensor in ``tree``, if it cannot."""
    for leaf in tree_flatten(tree)[0]:
        if not isinstance(leaf, torch.Tensor):
            continue
        if leaf.layout != torch.strided:
            return f"{leaf.layout} tensors (tpu has strided tensors only)"
        if leaf.is_quantized:
            return "quantized tensors"
    return None


def _describe(error: BaseException) -> str:
    """``Type: first line of the message``, short enough for a table cell."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return _truncate(f"{type(error).__name__}: {lines[0] if lines else ''}")


def _truncate(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _difference(actual: Any, expected: Any, tolerance: Tolerance, compare_values: bool, what: str = "output",
                canonical: Callable[[Any], Any] | None = None) -> str | None:
    """None when the tpu result ``actual`` agrees with the CPU result ``expected``, else what differs first
    (``what`` names the results in the message). Tensors must match in device type, dtype and shape, and,
    if ``compare_values``, in value (after ``canonical``, applied to host copies of both): floating and
    complex ones within ``tolerance``, the rest exactly."""
    actual_leaves, actual_spec = tree_flatten(actual)
    expected_leaves, expected_spec = tree_flatten(expected)
    if actual_spec != expected_spec:
        return _truncate(f"{what} structure differs: {actual_spec} vs {expected_spec}")

    def where(index: int) -> str:
        return f"{what}[{index}]" if len(expected_leaves) > 1 else what

    for index, (got, want) in enumerate(zip(actual_leaves, expected_leaves)):
        if not isinstance(want, torch.Tensor):
            continue
        if not isinstance(got, torch.Tensor):
            return f"{where(index)}: expected a tensor, got {type(got).__name__}"
        if got.device.type != TPU.type:
            return f"{where(index)} is on {got.device}, expected {TPU.type}"
        if (got.dtype, got.shape) != (want.dtype, want.shape):
            return f"{where(index)}: {got.dtype}{list(got.shape)}, expected {want.dtype}{list(want.shape)}"
    if not compare_values:
        return None

    def host(leaf: Any) -> Any:
        return leaf.detach().cpu() if isinstance(leaf, torch.Tensor) else leaf

    actual, expected = tree_map(host, actual), tree_map(host, expected)
    if canonical is not None:
        actual, expected = canonical(actual), canonical(expected)
    for index, (got, want) in enumerate(zip(tree_flatten(actual)[0], tree_flatten(expected)[0])):
        if isinstance(want, torch.Tensor):
            exact = not (want.dtype.is_floating_point or want.dtype.is_complex)
        elif isinstance(want, (bool, int, float, complex)):
            exact = not isinstance(want, (float, complex))
        else:  # strings, dtypes, sizes, ...
            if got != want:
                return _truncate(f"{where(index)}: {got!r}, expected {want!r}")
            continue
        try:
            assert_close(got, want, rtol=0 if exact else tolerance.rtol, atol=0 if exact else tolerance.atol,
                         equal_nan=True, check_stride=False)
        except (AssertionError, TypeError, ValueError) as error:
            # "Tensor-likes are not close! / Mismatched elements: ... / Greatest absolute difference: ..."
            details = "; ".join(line.strip() for line in str(error).splitlines()[1:] if line.strip())
            return _truncate(f"{where(index)}: {details or str(error)}", 300)
    return None


def _select_by_indices(dim_position: int, arguments: Arguments, output: Any) -> Any:
    """A sort, argsort or topk output with its indices replaced by the input elements they select: the
    order of equal elements is unspecified (unless ``stable=True``), so only the selected values are
    comparable. ``dim_position``: where ``dim`` is among the positional arguments after the input."""
    sample_input, args, kwargs = arguments
    dim = args[dim_position] if len(args) > dim_position else kwargs.get("dim", -1)
    if isinstance(output, torch.Tensor):  # argsort: the indices alone
        return sample_input.detach().gather(dim, output)
    values, indices = output
    return values, sample_input.detach().gather(dim, indices)


def _eigenpairs_in_cpu_order(arguments: Arguments, output: Any) -> Any:
    """A linalg.eig (eigenvalues, |eigenvectors|) or linalg.eigvals output with its eigenpairs in the order
    CPU's LAPACK lists them: PyTorch specifies no order, and tpu's QR iteration finds them in another. Each
    of CPU's eigenvalues (of the sample input, computed here) takes the nearest one not yet taken."""
    values = output[0] if isinstance(output, tuple) else output
    if values.numel() == 0:
        return output
    reference = torch.linalg.eigvals(arguments[0].detach()).reshape(-1, values.shape[-1])
    flat = values.reshape(-1, values.shape[-1])
    order = torch.empty(flat.shape, dtype=torch.long)
    for batch, (wanted, found) in enumerate(zip(reference, flat)):
        distance = (wanted.unsqueeze(1) - found.to(wanted.dtype).unsqueeze(0)).abs()
        for position in range(distance.shape[0]):
            nearest = int(distance[position].argmin())
            order[batch, position] = nearest
            distance[:, nearest] = float("inf")
    order = order.reshape(values.shape)
    values = values.gather(-1, order)
    if not isinstance(output, tuple):
        return values
    vectors = output[1].gather(-1, order.unsqueeze(-2).expand(output[1].shape))
    return values, vectors


# Ops whose outputs are compared through a function of (CPU sample arguments, host output), by OpInfo name.
CANONICAL_OUTPUTS: dict[str, Callable[[Arguments, Any], Any]] = {
    "sort": functools.partial(_select_by_indices, 0),
    "argsort": functools.partial(_select_by_indices, 0),
    "topk": functools.partial(_select_by_indices, 1),  # topk(input, k, dim)
    "linalg.eig": _eigenpairs_in_cpu_order,
    "linalg.eigvals": _eigenpairs_in_cpu_order,
}


def _differentiable_outputs(output: Any) -> list[int]:
    """Positions, among the flattened output's leaves, of the tensors that require grad."""
    return [i for i, leaf in enumerate(tree_flatten(output)[0])
            if isinstance(leaf, torch.Tensor) and leaf.requires_grad]


def _weighted_sum_grads(output: Any, positions: list[int], inputs: list[torch.Tensor],
                        weights: list[torch.Tensor]) -> tuple[torch.Tensor | None, ...]:
    """Gradients of sum_i (output_i * weight_i).sum() w.r.t. ``inputs``; random weights make every
    element of every output count with a different factor."""
    leaves = tree_flatten(output)[0]
    loss = sum((leaves[p] * weight).sum() for p, weight in zip(positions, weights))
    return torch.autograd.grad(loss, inputs, allow_unused=True)


def _outcome(difference: str | None, fallbacks: Iterable[str]) -> CheckResult:
    """One compared sample's result, from its first difference (None: none) and the ops that fell back."""
    fell_back = sorted(fallbacks)
    if difference is not None:
        status, reason = Status.MISMATCH, difference
    elif fell_back:
        status, reason = Status.FALLBACK, ""
    else:
        status, reason = Status.PASS, ""
    return CheckResult(status, reason, fell_back, samples=1)


def _skipped(reason: str) -> CheckResult:
    return CheckResult(Status.SKIPPED, reason)


def _call(op: Any, arguments: Arguments) -> Any:
    sample_input, args, kwargs = arguments
    return op(sample_input, *args, **kwargs)


@dataclass
class _SampleOutcome:
    forward: CheckResult
    grad: CheckResult | None = None  # None: gradients not checked
    drew_random: bool = False  # the CPU run sampled random numbers, so only shapes and dtypes were compared


def _check_sample(op: Any, sample: Any, tolerance: Tolerance, compare_values: bool,
                  check_grad: bool) -> _SampleOutcome:
    """Runs one sample on CPU and on tpu and compares the outputs, then the gradients if ``check_grad``.
    Never raises: whatever either side raises becomes part of the outcome, so one op cannot stop a run."""
    def skip(reason: str) -> _SampleOutcome:
        return _SampleOutcome(_skipped(reason), _skipped(reason) if check_grad else None)

    cpu_arguments: Arguments = (sample.input, tuple(sample.args), dict(sample.kwargs))
    unsupported = _unsupported_reason(cpu_arguments)
    if unsupported:
        return skip(unsupported)
    # Copied before the CPU run, which may modify its arguments in place.
    tpu_arguments: Arguments = ((_to_tpu(sample.input), *cpu_arguments[1:]) if op.name in HOST_ARGUMENT_OPS
                                else _to_tpu(cpu_arguments))
    observer = _CpuRunObserver()
    try:
        with observer:
            _call(op, _copy_arguments(cpu_arguments))
    except Exception:
        pass  # the reference run below reports what CPU refuses
    try:
        expected = sample.output_process_fn_grad(_call(op, cpu_arguments))
    except Exception as error:
        return skip(f"CPU reference failed: {_describe(error)}")
    unsupported = _unsupported_reason(expected)
    if unsupported:
        return skip(unsupported)
    compare_values = compare_values and not observer.drew_random

    torchtpu.reset_metrics()
    try:
        actual = sample.output_process_fn_grad(_call(op, tpu_arguments))
        fell_back = fallback_ops()  # before comparing: only the op's own work counts
        canonical = CANONICAL_OUTPUTS.get(op.name)
        difference = _difference(actual, expected, tolerance, compare_values,
                                 canonical=functools.partial(canonical, cpu_arguments) if canonical else None)
        forward = _outcome(difference, fell_back)
    except Exception as error:
        return _SampleOutcome(CheckResult(Status.ERROR, _describe(error), sorted(fallback_ops()), 1),
                              _skipped("the forward failed on tpu") if check_grad else None)
    grad = (_check_grad(cpu_arguments, tpu_arguments, expected, actual, tolerance, compare_values)
            if check_grad else None)
    return _SampleOutcome(forward, grad, observer.drew_random)


def _check_grad(cpu_arguments: Arguments, tpu_arguments: Arguments, expected: Any, actual: Any,
                tolerance: Tolerance, compare_values: bool) -> CheckResult:
    """Compares the gradients of a random weighting of the outputs w.r.t. the inputs that require grad."""
    cpu_leaves, tpu_leaves = tree_flatten(cpu_arguments)[0], tree_flatten(tpu_arguments)[0]
    wrt = [i for i, leaf in enumerate(cpu_leaves) if isinstance(leaf, torch.Tensor) and leaf.requires_grad]
    positions = _differentiable_outputs(expected)
    if not wrt or not positions:
        return _skipped("no input or no output requires grad")
    generator = torch.Generator().manual_seed(0)
    expected_leaves = tree_flatten(expected)[0]
    weights = [torch.randn(expected_leaves[p].shape, dtype=expected_leaves[p].dtype, generator=generator)
               for p in positions]
    try:
        expected_grads = _weighted_sum_grads(expected, positions, [cpu_leaves[i] for i in wrt], weights)
    except Exception as error:
        return _skipped(f"CPU backward failed: {_describe(error)}")

    torchtpu.reset_metrics()
    try:
        actual_grads = _weighted_sum_grads(actual, positions, [tpu_leaves[i] for i in wrt],
                                           [weight.to(TPU) for weight in weights])
        # Broadcast inputs get their gradients summed, so gradients accumulate even for elementwise ops.
        grad_tolerance = tolerance.loosest(ACCUMULATING_TOLERANCE_F32)
        fell_back = fallback_ops()  # before comparing: only the op's own work counts
        difference = _difference(actual_grads, expected_grads, grad_tolerance, compare_values, what="grad")
        return _outcome(difference, fell_back)
    except Exception as error:
        return CheckResult(Status.ERROR, _describe(error), sorted(fallback_ops()), 1)


class _Tally:
    """Folds per-sample outcomes into one CheckResult."""

    def __init__(self) -> None:
        self._worst: CheckResult | None = None
        self._fallback_ops: set[str] = set()
        self._skip_reasons: list[str] = []
        self.samples = 0

    def add(self, outcome: CheckResult) -> None:
        if outcome.status is Status.SKIPPED:
            self._skip_reasons.append(outcome.reason)
            return
        self.samples += 1
        self._fallback_ops.update(outcome.fallback_ops)
        if self._worst is None or _SEVERITY.index(outcome.status) > _SEVERITY.index(self._worst.status):
            self._worst = outcome

    def result(self) -> CheckResult:
        if self._worst is None:
            reason = self._skip_reasons[0] if self._skip_reasons else "no sample inputs"
            return _skipped(reason)
        return CheckResult(self._worst.status, self._worst.reason, sorted(self._fallback_ops), self.samples)


# Samples looked at per compared sample: skipped ones (sparse, failing on CPU) don't count, but a
# generator of nothing but unusable samples must not be walked to its end.
_SCAN_FACTOR = 4


def run_dtype(op: Any, dtype: torch.dtype, config: RunConfig) -> DtypeResult:
    """Runs up to ``config.samples`` samples of ``op`` in ``dtype`` on CPU and tpu and compares them."""
    started = time.monotonic()
    name = dtype_name(dtype)
    if dtype not in op.supported_dtypes("cpu"):
        return DtypeResult(name, _skipped("dtype not supported by the OpInfo on CPU"))
    check_grad = config.check_grad and op.supports_autograd and dtype == torch.float32
    tolerance = tolerance_for(op, dtype)
    incomparable = _incomparable_reason(op, dtype)
    forward, grad = _Tally(), _Tally()
    notes: list[str] = []
    if incomparable:
        notes.append(f"values not compared: {incomparable}")
    drew_random = False
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.manual_seed(0)  # sample inputs are random: the same for every run
        try:
            samples = iter(op.sample_inputs("cpu", dtype, requires_grad=check_grad))
            for _ in range(config.samples * _SCAN_FACTOR):
                if forward.samples >= config.samples:
                    break
                if forward.samples and time.monotonic() - started > config.op_budget_s:
                    notes.append(f"time budget of {config.op_budget_s:g} s used up after "
                                 f"{forward.samples} samples")
                    break
                sample = next(samples, None)
                if sample is None:
                    break
                outcome = _check_sample(op, sample, tolerance, incomparable is None, check_grad)
                forward.add(outcome.forward)
                if outcome.grad is not None:
                    grad.add(outcome.grad)
                drew_random |= outcome.drew_random
        except Exception as error:  # the sample generator itself; _check_sample catches everything else
            notes.append(f"sample generation failed: {_describe(error)}")
    if drew_random and not incomparable:
        notes.append("values not compared: random op (tpu draws another stream from the same seed)")
    return DtypeResult(
        dtype=name,
        forward=forward.result(),
        grad=grad.result() if check_grad else None,
        notes=notes,
        warnings=sorted({_truncate(str(w.message), 300) for w in caught}),
        seconds=round(time.monotonic() - started, 3),
    )


# --- worker processes -----------------------------------------------------------------------------------

def _serve(tasks: Any, results: Any, config: RunConfig) -> None:
    """Worker loop: runs (op name, dtype) tasks until it receives None."""
    ops = {variant_name(op): op for op in load_op_db()}
    while (task := tasks.get()) is not None:
        name, dtype = task
        results.put((name, run_dtype(ops[name], dtype, config)))


class _Worker:
    """A process running one (op, dtype) at a time; the caller replaces it when it dies or overruns."""

    def __init__(self, context: Any, config: RunConfig) -> None:
        self._tasks, self._results = context.Queue(), context.Queue()
        self._process = context.Process(target=_serve, args=(self._tasks, self._results, config), daemon=True)
        self._process.start()
        self.task: tuple[str, torch.dtype] | None = None
        self._submitted = 0.0

    def submit(self, task: tuple[str, torch.dtype]) -> None:
        self.task, self._submitted = task, time.monotonic()
        self._tasks.put(task)

    def poll(self, timeout_s: float) -> tuple[str, DtypeResult] | None:
        """The finished task's result; an error result if the process died or ran past ``timeout_s``
        (it is then killed and must be replaced); None while it is still running."""
        assert self.task is not None
        try:
            finished = self._results.get_nowait()
        except queue.Empty:
            if self._process.is_alive() and time.monotonic() - self._submitted < timeout_s:
                return None
            reason = (f"worker process died (exit code {self._process.exitcode})" if not self._process.is_alive()
                      else f"timed out after {timeout_s:g} s")
            self._process.kill()
            self._process.join()
            finished = (self.task[0], DtypeResult(dtype_name(self.task[1]), CheckResult(Status.ERROR, reason)))
        self.task = None
        return finished

    @property
    def alive(self) -> bool:
        return self._process.is_alive()

    def close(self) -> None:
        self._tasks.put(None)
        self._process.join(timeout=30)
        self._process.kill()  # no-op once it has exited


def run_isolated(ops: Sequence[Any], dtypes: Sequence[torch.dtype], config: RunConfig, jobs: int,
                 timeout_s: float, on_op_done: Callable[[int, OpResult], None]) -> list[OpResult]:
    """Runs every (op, dtype) in ``jobs`` worker processes; calls ``on_op_done(count, result)`` as each op
    completes. Results come back in the order of ``ops``."""
    # Fresh interpreters: forking would copy a process whose runtime threads may already be running.
    context = multiprocessing.get_context("spawn")
    pending = collections.deque((variant_name(op), dtype) for op in ops for dtype in dtypes)
    done: dict[str, dict[str, DtypeResult]] = {variant_name(op): {} for op in ops}
    workers = [_Worker(context, config) for _ in range(min(jobs, len(pending)))]
    completed = 0
    while pending or any(w.task for w in workers):
        progressed = False
        for index, worker in enumerate(workers):
            if worker.task is None and pending:
                worker.submit(pending.popleft())
            finished = worker.poll(timeout_s) if worker.task else None
            if finished is None:
                continue
            progressed = True
            name, result = finished
            done[name][result.dtype] = result
            if not worker.alive:
                workers[index] = _Worker(context, config)
            if len(done[name]) == len(dtypes):
                completed += 1
                on_op_done(completed, OpResult(name, {dtype_name(d): done[name][dtype_name(d)] for d in dtypes}))
        if not progressed:
            time.sleep(0.05)
    for worker in workers:
        worker.close()
    return [OpResult(name, {dtype_name(d): per_dtype[dtype_name(d)] for d in dtypes})
            for name, per_dtype in done.items()]


# --- command line ---------------------------------------------------------------------------------------

_SHORT_DTYPE = {"float32": "f32", "bfloat16": "bf16", "float16": "f16", "float64": "f64", "complex64": "c64"}


def _progress_line(count: int, total: int, result: OpResult) -> str:
    parts = []
    for name, dtype_result in result.dtypes.items():
        text = f"{_SHORT_DTYPE[name]}: {dtype_result.forward.status.value}"
        if dtype_result.grad is not None:
            text += f" (grad {dtype_result.grad.status.value})"
        parts.append(text)
    return f"[{count}/{total}] {result.name} " + ", ".join(parts)


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m torchtpu.testing.opinfo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dtypes", default="float32,bfloat16",
                        help=f"comma-separated, of {', '.join(dtype_name(d) for d in DEFAULT_TOLERANCES)}")
    parser.add_argument("--ops", help="comma-separated OpInfo names (an op name selects all its variants)")
    parser.add_argument("--samples", type=int, default=RunConfig.samples, help="samples compared per op and dtype")
    parser.add_argument("--no-grad", action="store_true", help="don't compare gradients")
    parser.add_argument("--op-budget", type=float, default=RunConfig.op_budget_s,
                        help="seconds per op and dtype after which remaining samples are dropped")
    parser.add_argument("--timeout", type=float, default=600.0,
                        help="seconds after which an op and dtype's worker is killed and the run counts as an error")
    parser.add_argument("--jobs", type=int, default=1, help="worker processes")
    parser.add_argument("--json", default="bench/results/opinfo.json", help="all details, as JSON")
    parser.add_argument("--from-json", metavar="PATH",
                        help="don't run: render the markdown and plot from an earlier run's JSON")
    parser.add_argument("--out-md", default="docs/opinfo_report.md", help="markdown report")
    parser.add_argument("--out-png", default="docs/opinfo_report.png", help="plot of the totals")
    args = parser.parse_args(argv)
    by_name = {dtype_name(d): d for d in DEFAULT_TOLERANCES}
    try:
        args.dtypes = [by_name[name.strip()] for name in args.dtypes.split(",")]
    except KeyError as error:
        parser.error(f"unsupported dtype {error}")
    args.ops = [name.strip() for name in args.ops.split(",")] if args.ops else None
    if args.samples < 1 or args.jobs < 1:
        parser.error("--samples and --jobs must be at least 1")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from torchtpu.testing import report  # here: report imports this module's result types

    args = _parse_args(argv)
    if args.from_json:
        results, run_info = report.read_json(args.from_json)
    else:
        command = "python -m torchtpu.testing.opinfo" + "".join(
            f" {a}" for a in (sys.argv[1:] if argv is None else argv))
        try:
            ops = select_ops(load_op_db(), args.ops)
        except ValueError as error:
            print(error, file=sys.stderr)
            return 2
        config = RunConfig(samples=args.samples, check_grad=not args.no_grad, op_budget_s=args.op_budget)
        print(f"running {len(ops)} OpInfos x {', '.join(map(dtype_name, args.dtypes))} on tpu against cpu",
              flush=True)
        started = time.monotonic()
        results = run_isolated(ops, args.dtypes, config, args.jobs, args.timeout,
                               lambda count, result: print(_progress_line(count, len(ops), result), flush=True))
        run_info = report.RunInfo(
            command=command,
            torch_version=torch.__version__,
            dtypes=[dtype_name(d) for d in args.dtypes],
            samples=args.samples,
            check_grad=config.check_grad,
            seconds=round(time.monotonic() - started, 1),
        )
    summary = report.summarize(results, run_info.dtypes)
    written = [args.out_md, args.out_png]
    if not args.from_json:
        report.write_json(results, summary, run_info, args.json)  # first: it holds everything
        written.insert(0, args.json)
    report.write_markdown(results, summary, run_info, args.out_md)
    report.write_plot(summary, args.out_png)
    print(report.totals_text(summary))
    print("wrote " + ", ".join(written))
    return 0


if __name__ == "__main__":
    # Run main from this module under its package name, not as __main__: report.py and the worker processes
    # use that module's Status and result classes, and identity checks on them must see the same ones.
    from torchtpu.testing.opinfo import main as package_main
    sys.exit(package_main())
