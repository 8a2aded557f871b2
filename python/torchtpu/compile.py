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

import contextlib
import operator
import warnings

import torch
from torch._C import DispatchKey
from torch._decomp import core_aten_decompositions
from torch._dynamo.backends.common import aot_autograd
from torch._dynamo.device_interface import DeviceInterface, register_interface_for_device
from torch._prims import rng_prims

import torchtpu._C
from torchtpu.eager import fused_in_this_thread

__all__ = ["export", "tpu_backend"]


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


_warned_dynamic = False


def _compile_graph(gm: torch.fx.GraphModule, example_inputs):
    """One AOT graph (forward, backward or inference) as a function run as one program per call."""
    missing = sorted({_op_name(n.target) for n in gm.graph.nodes
                      if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                      and n.target.namespace == "aten" and not _runs_on_tpu(n.target)})
    if missing:
        warnings.warn(f"torchtpu: torch.compile graph has ops with no tpu lowering: {', '.join(missing)}; "
                      "each runs on the CPU between the compiled programs around it (a graph break)", stacklevel=2)
    if _is_dynamic(gm, example_inputs):
        global _warned_dynamic
        if not _warned_dynamic:  # once per process: every dynamo recompile hands a new graph here
            _warned_dynamic = True
            warnings.warn("torchtpu: torch.compile graph with dynamic dimensions (mark_dynamic, dynamic=True, or "
                          "dynamo's automatic dynamic shapes after a recompile): XLA programs have static shapes, so "
                          "it compiles one program for each distinct shape it meets and replays that one afterwards. "
                          "Pad to a few sizes, or pass dynamic=False, to bound the compiles.", stacklevel=2)
        return _ShapeSpecialized(gm)
    return _GraphRunner(gm)


def _is_dynamic(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether an input has a symbolic size. The random state that activation checkpointing saves for the
    backward's recomputation comes with one (AOT autograd makes it on the host while tracing); it is a CPU
    tensor only the host reads (`run_with_rng_state`), never a program's shape, so it does not count."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    random_states = {n for n in placeholders if n.users and all(
        u.target is rng_prims.run_with_rng_state and u.args[0] is n for u in n.users)}
    return any(isinstance(a, torch.SymInt) or (isinstance(a, torch.Tensor) and any(
        isinstance(d, torch.SymInt) for d in a.shape)) for node, a in zip(placeholders, example_inputs)
        if node not in random_states)


class _ShapeSpecialized:
    """A graph with symbolic sizes: a _GraphRunner per distinct set of sizes (its int inputs)."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        self.runners = {}
        self._boxed_call = True

    def __call__(self, args: list):
        sizes = tuple(a for a in args if isinstance(a, int))
        runner = self.runners.get(sizes)
        if runner is None:
            runner = self.runners[sizes] = _GraphRunner(self.gm)
        return runner(args)


def _is_device_tensor(value) -> bool:
    return isinstance(value, torch.Tensor) and value.device.type == "tpu"


def _tensors(value) -> list:
    return [v for v in (value if isinstance(value, (list, tuple)) else [value]) if isinstance(v, torch.Tensor)]


class _ValueRecorder(torch.fx.Interpreter):
    """Runs the graph once, remembering which node made each CPU tensor and which nodes are CPU-only."""

    def __init__(self, gm):
        super().__init__(gm)
        # id(CPU tensor) -> (node, index in the node's list result or None, tensor); the tensor is kept so
        # its id stays its own.
        self.made_by = {}
        self.cpu_nodes = set()

    @contextlib.contextmanager
    def _set_current_node(self, node):
        # The Interpreter makes each node's meta the process-wide `fx_traceback.current_meta` while it runs, for
        # tracers that copy it into the nodes they make. This runs real tensors and traces nothing, and another
        # thread may be tracing (dynamo compiles one graph at a time, but a first call runs outside its lock):
        # swapping the global under that tracer broke its bookkeeping ("Expected current_level > 0").
        yield

    def run_node(self, node):
        result = super().run_node(node)
        listed = isinstance(result, (list, tuple))
        for i, t in enumerate(result if listed else [result]):
            if isinstance(t, torch.Tensor) and t.device.type == "cpu":
                self.made_by.setdefault(id(t), (node, i if listed else None, t))
        if node.op == "call_function" and not any(_is_device_tensor(t) for t in _tensors(result)) and all(
                n in self.cpu_nodes or (n.op in ("placeholder", "get_attr") and not _is_device_tensor(self.env[n]))
                for n in node.all_input_nodes):
            self.cpu_nodes.add(node)
        return result


class _GraphRunner:
    """Runs one AOT graph. The first call records it in fused mode as one trace and keeps the program
    with its plan (aten/compiled_graph.h); later calls run the graph's CPU part (a step count, say) as
    Python ops, then the program on the new inputs, with no op dispatched on tpu. A graph that cannot be
    replayed, or a call whose inputs differ from the capture's, runs through the fused driver."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm
        # A graph that saves or restores the random state (activation checkpointing replaying dropout) does so
        # on the host, between its ops: a replay would skip that, so such a graph always runs recorded.
        self.replayable = not any(node.target in _RNG_STATE_OPS for node in gm.graph.nodes)
        self.captured = False
        self.program = None  # torchtpu._C._CompiledGraph
        self.why_not = None  # why the graph is not replayed, once captured
        # AOT autograd passes the arguments as one list (an instance attribute: wrappers copy __dict__).
        self._boxed_call = True

    def __call__(self, args: list):
        if self.program is not None:
            device_inputs = [args[i] for i in self.device_args] + self.device_constants
            if self.program.fits(device_inputs):
                outputs = self._replay(args, device_inputs)
                args.clear()  # the graph's inputs may go as soon as the program has them
                return outputs
        if not self.captured and self.replayable:
            self.captured = True
            outputs = self._capture(args)
        else:
            with fused_in_this_thread():  # leaving the block runs the recorded graph as one program
                outputs = self.gm(*args)
        args.clear()
        return outputs

    def _capture(self, args: list):
        constants = [operator.attrgetter(n.target)(self.gm) for n in self.gm.graph.nodes if n.op == "get_attr"]
        self.device_args = [i for i, a in enumerate(args) if _is_device_tensor(a)]
        self.device_constants = [c for c in constants if _is_device_tensor(c)]
        recorder = _ValueRecorder(self.gm)
        with fused_in_this_thread():
            trace = torchtpu._C._capture_begin()
            outputs = recorder.run(*args)
            flat = list(outputs) if isinstance(outputs, (list, tuple)) else [outputs]
            program, self.why_not = torchtpu._C._capture_end(
                trace, [args[i] for i in self.device_args] + self.device_constants,
                [o for o in flat if _is_device_tensor(o)])
        if program is not None:
            self._plan(recorder, program, flat, type(outputs))
        return outputs

    def _plan(self, recorder: _ValueRecorder, program, flat: list, output_type) -> None:
        """Where each output of a replay comes from, and the CPU part that computes the CPU values."""
        needed = []  # CPU-part nodes whose values a replay needs, in order

        def cpu_node(t: torch.Tensor):
            node, index, _ = recorder.made_by.get(id(t), (None, None, None))
            if node is None or not (node.op in ("placeholder", "get_attr") or node in recorder.cpu_nodes):
                return None
            if (node, index) not in needed:
                needed.append((node, index))
            return needed.index((node, index))

        scalar_slots = [cpu_node(t) for t in program.take_cpu_scalars()]
        layout, device_index = [], 0
        for value in flat:
            if _is_device_tensor(value):
                layout.append(("device", device_index))
                device_index += 1
            elif isinstance(value, torch.Tensor):
                layout.append(("cpu", cpu_node(value)))
            else:
                layout.append(("constant", value))
        if None in scalar_slots or any(kind == "cpu" and slot is None for kind, slot in layout):
            self.why_not = "a CPU value it uses is computed from a tpu value"
            return
        self.program = program
        self.scalar_slots = scalar_slots
        self.layout = layout
        self.output_type = output_type
        self.cpu_part = _cpu_part(self.gm, recorder.cpu_nodes, needed) if recorder.cpu_nodes or needed else None

    def _replay(self, args: list, device_inputs: list):
        cpu_values = self.cpu_part(*args) if self.cpu_part is not None else []
        device_outputs = self.program.run(device_inputs, [cpu_values[i] for i in self.scalar_slots])
        outputs = [device_outputs[slot] if kind == "device" else cpu_values[slot] if kind == "cpu" else slot
                   for kind, slot in self.layout]
        return outputs if self.output_type is list else self.output_type(outputs)


def _cpu_part(gm: torch.fx.GraphModule, cpu_nodes: set, needed: list) -> torch.fx.GraphModule:
    """The graph's CPU-only nodes (all of them: their in-place updates of CPU inputs must happen on every
    call) as a graph of the same inputs returning the `needed` values: (node, index in its list or None)."""
    graph = torch.fx.Graph()
    copied = {}
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "get_attr") or node in cpu_nodes:
            copied[node] = graph.node_copy(node, lambda n: copied[n])
    graph.output([copied[n] if i is None else graph.call_function(operator.getitem, (copied[n], i))
                  for n, i in needed])
    return torch.fx.GraphModule(gm, graph)


def export(model: torch.nn.Module, example_inputs: tuple, kwargs: dict | None = None) -> str:
    """The StableHLO text of `model` called on `example_inputs` (model and inputs on tpu): the program that
    torch.compile would run for its inference graph, captured through ``torch.export`` with the same
    decompositions and rules. Parameters, buffers and inputs are the arguments of ``@main``."""
    exported = torch.export.export(model, tuple(example_inputs), kwargs)
    module = exported.run_decompositions(_decompositions()).module()
    for value in [*module.parameters(), *module.buffers(), *example_inputs]:
        if isinstance(value, torch.Tensor) and not _is_device_tensor(value):
            raise ValueError("torchtpu.export: the model and its inputs must be on tpu, found a tensor on "
                             f"{value.device}")
    with torch.no_grad(), fused_in_this_thread():
        trace = torchtpu._C._capture_begin()
        module(*example_inputs, **(kwargs or {}))
        text = torchtpu._C._capture_text(trace)
    if not text:
        raise RuntimeError("torchtpu.export: the model did not run as one program on tpu (it reads a value on "
                           "the host, runs an op without a tpu lowering, or has no tpu op)")
    return text


# torch.compile's modes. Each graph already runs as one XLA program, replayed without dispatching its ops
# (what "reduce-overhead" asks of CUDA graphs), and XLA chooses its own kernels: every mode compiles the same.
_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


def tpu_backend(gm: torch.fx.GraphModule, example_inputs, mode: str | None = None, **options):
    """The dynamo backend ``"tpu"``."""
    if mode is not None and mode not in _MODES:
        raise ValueError(f"torch.compile(backend='tpu'): unknown mode {mode!r}; the modes are {', '.join(_MODES)}")
    # torch.compile(options={...}) arrives as one keyword, `options`; name what the user passed.
    given = {**(options.pop("options", None) or {}), **options}
    if given:
        raise ValueError(f"torch.compile(backend='tpu') takes no options, got {sorted(given)}")
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


def _graph_on_tpu(gm: torch.fx.GraphModule, example_inputs) -> bool:
    """Whether the graph takes, holds or makes a tpu tensor (dynamo notes each node's example value)."""
    values = [*example_inputs, *gm.parameters(), *gm.buffers()]
    values += [t for node in gm.graph.nodes for t in _tensors(node.meta.get("example_value"))]
    return any(_is_device_tensor(v) for v in values)


# Higher-order ops that AOT autograd puts around a random op whose state activation checkpointing saves for
# the recomputation. PyTorch implements them for CPU, CUDA, HPU and XPU only ("Backend not supported for tpu").
_RNG_STATE_OPS = (rng_prims.run_and_save_rng_state, rng_prims.run_with_rng_state)


def _teach_rng_state_ops_tpu() -> None:
    save, replay = _RNG_STATE_OPS
    save_elsewhere = save.py_kernels[DispatchKey.BackendSelect]
    replay_elsewhere = replay.py_kernels[DispatchKey.BackendSelect]
    if getattr(save_elsewhere, "_torchtpu", False):
        return

    def save_state(op, *args, **kwargs):
        if rng_prims.get_device(args, kwargs) != "tpu":
            return save_elsewhere(op, *args, **kwargs)
        return torch.tpu.get_rng_state(), op(*args, **kwargs)

    def run_with_state(rng_state, op, *args, **kwargs):
        if rng_prims.get_device(args, kwargs) != "tpu":
            return replay_elsewhere(rng_state, op, *args, **kwargs)
        current = torch.tpu.get_rng_state()
        torch.tpu.set_rng_state(rng_state.cpu())
        try:
            return op(*args, **kwargs)
        finally:
            torch.tpu.set_rng_state(current)

    save_state._torchtpu = run_with_state._torchtpu = True
    save.py_kernels[DispatchKey.BackendSelect] = save_state
    replay.py_kernels[DispatchKey.BackendSelect] = run_with_state


def _route_default_backend_to_tpu() -> None:
    """``torch.compile(model)`` names inductor, whose code generator for a device called "tpu" is Google's
    TorchTPU's (Pallas kernels through its ``torch_tpu`` package); on this device it would fail with
    ``No module named 'torch_tpu'``. A graph on tpu goes to the tpu backend instead, as a CUDA user's
    ``torch.compile(model)`` goes to inductor; graphs elsewhere still get inductor, options and all."""
    inductor = torch._TorchCompileInductorWrapper
    if getattr(inductor.__call__, "_torchtpu_routed", False):
        return
    compile_with_inductor = inductor.__call__

    def call(self, model_, inputs_, **kwargs):
        if _graph_on_tpu(model_, inputs_):
            return tpu_backend(model_, inputs_)
        return compile_with_inductor(self, model_, inputs_, **kwargs)

    call._torchtpu_routed = True
    inductor.__call__ = call


def install() -> None:
    torch._dynamo.register_backend(name="tpu")(tpu_backend)
    register_interface_for_device("tpu", TpuInterface)
    _route_default_backend_to_tpu()
    _teach_rng_state_ops_tpu()
