"""``torch.compile(backend="tpu")`` (docs/compile.md).

Dynamo captures the Python code as FX graphs; AOT autograd splits each into a forward and a backward graph
of ATen ops, decomposing only the ops tpu has no lowering for (PyTorch's core ATen decompositions, less the
ops the rule table lowers itself, so e.g. attention keeps its fused rule). Each graph then runs through the
fused eager driver: its ops are recorded with the same rules and program cache as eager, and the whole graph
becomes one XLA program, compiled once per graph and input layout and found in the cache on later calls.

An op without a lowering inside a graph is a graph break in effect: it warns once, naming the op, and runs
on the CPU between the programs before and after it (the eager fallback), never a crash.
"""
from __future__ import annotations

import warnings

import torch
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device

from torchtpu.eager import eager_mode

__all__ = ["tpu_backend"]


def _op_name(op: torch._ops.OpOverload) -> str:
    """The rule table's name of an ATen overload: ``mul.Tensor``, ``relu`` (default overload)."""
    name = op._schema.name.removeprefix("aten::")
    return name if op._overloadname == "default" else f"{name}.{op._overloadname}"


def _has_tpu_kernel(op: torch._ops.OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "PrivateUse1")


def _runs_on_tpu(op: torch._ops.OpOverload) -> bool:
    """A tpu kernel, or a composite one that calls other ops (views such as permute are of this kind)."""
    return _has_tpu_kernel(op) or any(
        torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), key)
        for key in ("CompositeExplicitAutograd", "CompositeExplicitAutogradNonFunctional", "CompositeImplicitAutograd"))


def _decompositions() -> dict:
    return {op: fn for op, fn in core_aten_decompositions().items()
            if not (isinstance(op, torch._ops.OpOverload) and _has_tpu_kernel(op))}


def _compile_graph(gm: torch.fx.GraphModule, example_inputs):
    """One AOT graph (forward, backward or inference) as a function run as one fused program per call."""
    missing = sorted({_op_name(n.target) for n in gm.graph.nodes
                      if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                      and n.target.namespace == "aten" and not _runs_on_tpu(n.target)})
    if missing:
        warnings.warn(f"torchtpu: torch.compile graph has ops with no tpu lowering: {', '.join(missing)}; "
                      "each runs on the CPU between the compiled programs around it (a graph break)", stacklevel=2)

    def run(args: list) -> list:
        with eager_mode("fused"):  # leaving the block runs the recorded graph as one program
            outputs = gm(*args)
        args.clear()  # the graph's inputs may go as soon as the program has them
        return outputs

    run._boxed_call = True  # AOT autograd passes the arguments as one list
    return run


def tpu_backend(gm: torch.fx.GraphModule, example_inputs, **options):
    """The dynamo backend ``"tpu"``."""
    if options:
        raise ValueError(f"torch.compile(backend='tpu') takes no options, got {sorted(options)}")
    return aot_autograd(fw_compiler=_compile_graph, bw_compiler=_compile_graph, inference_compiler=_compile_graph,
                        decompositions=_decompositions(), keep_inference_input_mutations=True)(gm, example_inputs)


class TpuInterface(DeviceInterface):
    """What dynamo asks of a device (current device, streams, synchronize) answered by ``torch.tpu``."""

    class device:  # noqa: N801  (dynamo's name)
        def __new__(cls, device):
            return torch.tpu.device(device)

    class Worker:
        @staticmethod
        def set_device(device: int) -> None:
            torch.tpu.set_device(device)

        @staticmethod
        def current_device() -> int:
            return torch.tpu.current_device()

        @staticmethod
        def get_device_properties(device=None):
            return None

    @staticmethod
    def current_device() -> int:
        return torch.tpu.current_device()

    @staticmethod
    def set_device(device) -> None:
        torch.tpu.set_device(device)

    @staticmethod
    def device_count() -> int:
        return torch.tpu.device_count()

    @staticmethod
    def is_available() -> bool:
        return torch.tpu.is_available()

    @staticmethod
    def synchronize(device=None) -> None:
        torch.tpu.synchronize(device)

    @staticmethod
    def is_bf16_supported(including_emulation: bool = False) -> bool:
        return True

    @staticmethod
    def memory_allocated(device=None) -> int:
        return torch.tpu.memory_allocated(device)

    @staticmethod
    def is_triton_capable(device=None) -> bool:
        return False


def install() -> None:
    torch._dynamo.register_backend(name="tpu")(tpu_backend)
    register_interface_for_device("tpu", TpuInterface)
