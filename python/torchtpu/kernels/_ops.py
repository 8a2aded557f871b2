"""Custom kernels as PyTorch ops on ``tpu``: a JAX function (which may call ``pl.pallas_call``) or StableHLO text
becomes a ``torch.library`` op whose tpu kernel splices the kernel's functions into the program.

Each distinct (input shapes and dtypes, static arguments) is one *entry*: the kernel built for exactly those
types, registered once with the extension (``_C._register_kernel``) and called through the internal op
``torchtpu::_kernel(Tensor[] inputs, int entry)``. That op is lowered like any other, so strict, fused and
compiled programs contain the kernel as a function call, the inputs stay on the device (no host round trip)
and programs are cached as usual. Under ``torch.compile`` the op's fake kernel answers from the same entry
(JAX's shape rule, or the StableHLO signature), so a compiled graph keeps the kernel without a break.
"""
from __future__ import annotations

import contextvars
import hashlib
import inspect
import re
from typing import Callable

import torch

from torchtpu import _C
from torchtpu.kernels import _jax
from torchtpu.kernels._types import KernelError, TensorSpec, describe


# The platform a kernel is being built for when it is not the device's: KernelOp.tpu_program sets "tpu".
_target_platform: contextvars.ContextVar[str | None] = contextvars.ContextVar("target_platform", default=None)


def interpret_mode() -> bool:
    """Whether Pallas kernels should run in interpret mode: everywhere but on a TPU (Mosaic lowers for TPUs
    only). True on the CPU plugin; False while ``KernelOp.tpu_program`` builds a kernel for a TPU."""
    return (_target_platform.get() or _C._plugin_info()["platform"]) != "tpu"


class _Entry:
    def __init__(self, entry_id: int, kept: list[int]):
        self.id = entry_id
        self.kept = kept  # the inputs the kernel's function takes


class KernelOp:
    """One custom op: its schema, the ``build`` that makes an entry's functions for given types, and the
    torch.library registrations. Call it like the op (``op(x, w, eps=1e-6)``)."""

    def __init__(self, qualname: str, schema: str, build: Callable, output_specs: Callable):
        if "::" not in qualname:
            raise KernelError(f"kernel op name {qualname!r} must be 'namespace::name'")
        self.qualname = qualname
        namespace, name = qualname.split("::", 1)
        self._build = build                  # (inputs, statics, plugin info, prefix) -> (functions, entry, kept)
        self._output_specs = output_specs    # (inputs, statics) -> [TensorSpec]
        self._entries: dict = {}
        self._specs: dict = {}
        self._library = torch.library.Library(namespace, "FRAGMENT")
        self._library.define(name + schema)
        self._schema = torch._C.parse_schema(qualname + schema)
        self._library.impl(name, self._run, "PrivateUse1")
        self._library.impl(name, self._on_cpu, "CPU")
        torch.library.register_fake(qualname, self._fake, lib=self._library)
        self.op = getattr(getattr(torch.ops, namespace), name).default

    def __call__(self, *args, **kwargs):
        return self.op(*args, **kwargs)

    def _split(self, args: tuple, kwargs: dict) -> tuple[list[torch.Tensor], dict]:
        """The tensor arguments in schema order and the others by name (the kernel's static arguments)."""
        tensors, statics = [], {}
        for i, argument in enumerate(self._schema.arguments):
            if i < len(args):
                value = args[i]
            elif argument.name in kwargs:
                value = kwargs[argument.name]
            else:
                value = argument.default_value
            if isinstance(argument.type, torch.TensorType):
                tensors.append(value)
            else:
                statics[argument.name] = value
        return tensors, statics

    def _key(self, tensors: list[torch.Tensor], statics: dict):
        specs = tuple(TensorSpec.of(t) for t in tensors)
        return specs, tuple(sorted(statics.items()))

    def _outputs(self, specs: tuple, statics: dict) -> list[TensorSpec]:
        key = (specs, tuple(sorted(statics.items())))
        if key not in self._specs:
            self._specs[key] = self._output_specs(list(specs), statics)
        return self._specs[key]

    def _entry(self, tensors: list[torch.Tensor], statics: dict) -> _Entry:
        key = self._key(tensors, statics)
        entry = self._entries.get(key)
        if entry is None:
            info = _C._plugin_info()
            specs = list(key[0])
            # Names unique to this entry yet the same in every process, so programs that contain the kernel
            # hit the persistent cache.
            digest = hashlib.sha1(repr((self.qualname, key, info["platform"])).encode()).hexdigest()[:12]
            outputs = self._outputs(key[0], statics)  # the shape rule first: its errors are the clearest
            functions, entry_name, kept = self._build(specs, statics, info, f"k{digest}_")
            entry_id = _C._register_kernel(self.qualname, functions, entry_name,
                                           [(specs[i].dtype, list(specs[i].shape)) for i in kept],
                                           [(o.dtype, list(o.shape)) for o in outputs])
            entry = self._entries[key] = _Entry(entry_id, kept)
            if _C._aot_recording() and info["platform"] != "tpu":
                # The programs recorded here hold the interpreted kernel; torchtpu.aot checks the TPU one too.
                _C._aot_record(f"{self.qualname} (Mosaic)", self.tpu_program(*specs, **statics))
        return entry

    def tpu_program(self, *inputs: TensorSpec, **statics) -> str:
        """The kernel for these input types built for a TPU (Pallas lowered to Mosaic, not interpreted), as
        a whole StableHLO module calling it, for torchtpu.aot to compile for a TPU topology without a TPU."""
        token = _target_platform.set("tpu")
        try:
            functions, entry, kept = self._build(list(inputs), statics,
                                                 {"platform": "tpu", "stablehlo_current_version": ""}, "k_")
        finally:
            _target_platform.reset(token)
        outputs = self._outputs(tuple(inputs), statics)
        params = [_mlir_type(inputs[i]) for i in kept]
        results = [_mlir_type(o) for o in outputs]
        return (f"module @torchtpu {{\n{functions}\n  func.func public @main("
                + ", ".join(f"%arg{i}: {t}" for i, t in enumerate(params)) + f") -> ({', '.join(results)}) {{\n"
                + f"    %r:{len(results)} = \"func.call\"(" + ", ".join(f"%arg{i}" for i in range(len(params)))
                + f") {{callee = @{entry}}} : ({', '.join(params)}) -> ({', '.join(results)})\n"
                + "    \"func.return\"(" + ", ".join(f"%r#{i}" for i in range(len(results)))
                + f") : ({', '.join(results)}) -> ()\n  }}\n}}\n")

    def _run(self, *args, **kwargs):
        tensors, statics = self._split(args, kwargs)
        devices = {t.device for t in tensors}
        if len(devices) != 1:
            raise KernelError(f"{self.qualname}: all tensor arguments must be on one tpu device, got "
                              f"{sorted(str(d) for d in devices)}")
        entry = self._entry(tensors, statics)
        results = torch.ops.torchtpu._kernel([tensors[i] for i in entry.kept], entry.id)
        return results[0] if len(self._schema.returns) == 1 else tuple(results)

    def _on_cpu(self, *args, **kwargs):
        raise KernelError(f"{self.qualname} runs on tpu only: move its tensors with .to('tpu') (got CPU tensors)")

    def _fake(self, *args, **kwargs):
        tensors, statics = self._split(args, kwargs)
        outputs = self._outputs(tuple(TensorSpec.of(t) for t in tensors), statics)
        device = tensors[0].device
        results = [torch.empty(o.shape, dtype=o.dtype, device=device) for o in outputs]
        if len(results) != len(self._schema.returns):
            raise KernelError(f"{self.qualname}: the kernel returns {len(results)} tensors but its schema declares "
                              f"{len(self._schema.returns)}")
        return results[0] if len(results) == 1 else tuple(results)

    def register_autograd(self, backward: Callable, setup_context: Callable | None = None) -> None:
        """PyTorch's ``torch.library.register_autograd`` for this op."""
        torch.library.register_autograd(self.qualname, backward, setup_context=setup_context, lib=self._library)


def _schema_from_signature(fn: Callable, num_outputs: int) -> str:
    """``(Tensor x, Tensor w, float eps=1e-06) -> Tensor``: parameters without a default are tensors, those with
    a bool, int or float default are static arguments of that type."""
    kinds = {bool: "bool", int: "int", float: "float"}
    parts = []
    for p in inspect.signature(fn).parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise KernelError(f"kernel function {fn.__name__} takes *args/**kwargs: give `schema=` explicitly")
        if p.default is p.empty:
            parts.append(f"Tensor {p.name}")
        elif type(p.default) in kinds:
            parts.append(f"{kinds[type(p.default)]} {p.name}={p.default!r}")
        else:
            raise KernelError(f"kernel function {fn.__name__}: parameter {p.name} has a default of type "
                              f"{type(p.default).__name__}; static arguments are bool, int or float (or give `schema=`)")
    returns = "Tensor" if num_outputs == 1 else "(" + ", ".join(["Tensor"] * num_outputs) + ")"
    return f"({', '.join(parts)}) -> {returns}"


def jax_op(qualname: str, fn: Callable, *, num_outputs: int = 1, schema: str | None = None,
           backward: Callable | None = None, setup_context: Callable | None = None,
           differentiable: bool = True) -> KernelOp:
    """Wraps the JAX function ``fn`` as the PyTorch op ``qualname`` ("namespace::name") on ``tpu``.

    ``fn`` takes its tensors positionally and its static arguments (bool, int, float) by keyword; it may call
    ``pl.pallas_call`` (pass ``interpret=torchtpu.kernels.interpret_mode()``). The schema comes from ``fn``'s
    signature unless given. Without ``backward``, gradients come from ``jax.vjp`` of ``fn``, itself exported as
    the op ``qualname + "_vjp"``; with it, ``backward`` and ``setup_context`` are PyTorch's
    ``register_autograd`` functions. ``differentiable=False`` makes a backward through the op an error (for
    ops that are themselves gradients)."""
    schema = schema or _schema_from_signature(fn, num_outputs)

    def build(inputs, statics, info, prefix):
        return _jax.export_functions(qualname, fn, inputs, statics, info["platform"],
                                     info["stablehlo_current_version"], prefix)

    op = KernelOp(qualname, schema, build, lambda inputs, statics: _jax.output_specs(qualname, fn, inputs, statics))
    if not differentiable:
        op.register_autograd(_no_backward(qualname))
    elif backward is not None:
        op.register_autograd(backward, setup_context)
    else:
        _register_vjp(op, fn)
    return op


def _register_vjp(op: KernelOp, fn: Callable) -> None:
    """Gradients of a JAX kernel from ``jax.vjp``: one more kernel op taking the tensors and the output
    gradients and returning one gradient per tensor (zeros for integer tensors, which have none)."""
    arguments = op._schema.arguments
    tensor_names = [a.name for a in arguments if isinstance(a.type, torch.TensorType)]
    static_parts = [f"{a.type} {a.name}" for a in arguments if not isinstance(a.type, torch.TensorType)]
    num_outputs = len(op._schema.returns)
    grad_names = [f"grad_{i}" for i in range(num_outputs)]
    returns = ", ".join(["Tensor"] * len(tensor_names))
    schema = f"({', '.join([f'Tensor {n}' for n in tensor_names + grad_names] + static_parts)}) -> ({returns})"

    def vjp(*arrays, **statics):
        j = _jax.jax()
        primals, cotangents = arrays[:len(tensor_names)], arrays[len(tensor_names):]
        try:
            out, pullback = j.vjp(lambda *xs: fn(*xs, **statics), *primals)
            grads = pullback(j.tree_util.tree_unflatten(j.tree_util.tree_structure(out), list(cotangents)))
        except Exception as e:
            raise KernelError(f"{op.qualname}: jax.vjp cannot differentiate the kernel (a pallas_call has no "
                              f"automatic reverse mode): give jax_op a `backward=`. JAX said: {e}") from e
        return tuple(g if j.numpy.issubdtype(p.dtype, j.numpy.inexact) else j.numpy.zeros(p.shape, p.dtype)
                     for g, p in zip(grads, primals))

    vjp_op = jax_op(op.qualname + "_vjp", vjp, schema=schema, differentiable=False)

    def setup_context(ctx, inputs, output):
        tensors, ctx.statics = op._split(tuple(inputs), {})
        ctx.save_for_backward(*tensors)
        outputs = output if isinstance(output, tuple) else (output,)
        ctx.output_specs = [(o.shape, o.dtype) for o in outputs]

    def backward(ctx, *grads):
        tensors = ctx.saved_tensors
        device = tensors[0].device
        grads = [g if g is not None else torch.zeros(shape, dtype=dtype, device=device)
                 for g, (shape, dtype) in zip(grads, ctx.output_specs)]
        results = vjp_op(*tensors, *grads, **ctx.statics)
        results = iter(results if isinstance(results, tuple) else (results,))
        per_argument = []
        for argument in arguments:
            if isinstance(argument.type, torch.TensorType):
                g = next(results)
                per_argument.append(g if g.is_floating_point() else None)
            else:
                per_argument.append(None)
        return tuple(per_argument)

    op.register_autograd(backward, setup_context)


def _no_backward(name: str) -> Callable:
    def backward(ctx, *grads):
        raise KernelError(f"{name} has no gradient (it is itself a kernel's gradient: double backward through "
                          "kernels is not supported)")
    return backward


_FUNCTION = re.compile(r"func\.func\s+(?:(?:public|private)\s+)?@([\w$.]+)")
_TENSOR = re.compile(r"tensor<([^>]*)>")
_ELEMENT_TYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64,
                  "i1": torch.bool, "i8": torch.int8, "i16": torch.int16, "i32": torch.int32, "i64": torch.int64,
                  "ui8": torch.uint8}


def _mlir_type(spec: TensorSpec) -> str:
    element = {dtype: name for name, dtype in _ELEMENT_TYPES.items()}[spec.dtype]
    return "tensor<" + "".join(f"{d}x" for d in spec.shape) + element + ">"


def _tensor_types(text: str, qualname: str) -> list[TensorSpec]:
    specs = []
    for body in _TENSOR.findall(text):
        *dims, element = body.split("x")
        if element not in _ELEMENT_TYPES or not all(d.isdigit() for d in dims):
            raise KernelError(f"{qualname}: unsupported kernel type tensor<{body}> (static shapes of "
                              f"{', '.join(_ELEMENT_TYPES)} only)")
        specs.append(TensorSpec(tuple(int(d) for d in dims), _ELEMENT_TYPES[element]))
    return specs


def _main_signature(text: str, qualname: str) -> tuple[list[TensorSpec], list[TensorSpec]]:
    """The parameter and result types of ``@main`` in StableHLO text (``func.func`` syntax)."""
    start = re.search(r"func\.func\s+(?:public\s+)?@main\(", text)
    if start is None:
        raise KernelError(f"{qualname}: the StableHLO module has no `func.func @main(...)`")
    depth, i = 1, start.end()
    while depth and i < len(text):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        i += 1
    body = text.find("{\n", i)
    results = text[i:body] if body >= 0 else ""
    return _tensor_types(text[start.end():i - 1], qualname), _tensor_types(results, qualname)


def _stablehlo_functions(text: str, prefix: str) -> tuple[str, str]:
    """The module's functions with every name prefixed and made private, and the entry's name."""
    header = re.match(r"\s*module\b[^{]*\{", text)
    body = text[header.end():text.rstrip().rfind("}")] if header else text
    names = set(_FUNCTION.findall(body))
    body = re.sub(r"@([\w$.]+)", lambda m: "@" + prefix + m.group(1) if m.group(1) in names else m.group(0), body)
    body = re.sub(r"func\.func\s+(?:(?:public|private)\s+)?@", "func.func private @", body)
    return body, prefix + "main"


def stablehlo_op(qualname: str, kernel: str | Callable, *, num_outputs: int = 1, schema: str | None = None,
                 backward: Callable | None = None, setup_context: Callable | None = None) -> KernelOp:
    """Wraps a kernel written in StableHLO as the PyTorch op ``qualname`` on ``tpu`` (no JAX needed).

    ``kernel`` is a module with ``func.func @main`` (fixed shapes), or a builder called with one
    ``TensorSpec`` (shape, dtype) per tensor argument and the static arguments by keyword, returning such a
    module for those types. ``backward``/``setup_context`` register gradients as in ``jax_op``."""
    builder = kernel if callable(kernel) else None
    if schema is None:
        if builder is not None:
            schema = _schema_from_signature(builder, num_outputs)
        else:
            inputs, outputs = _main_signature(kernel, qualname)
            returns = "Tensor" if len(outputs) == 1 else "(" + ", ".join(["Tensor"] * len(outputs)) + ")"
            schema = f"({', '.join(f'Tensor x{i}' for i in range(len(inputs)))}) -> {returns}"

    def module_for(inputs, statics) -> str:
        text = builder(*inputs, **statics) if builder is not None else kernel
        declared, _ = _main_signature(text, qualname)
        if declared != list(inputs):
            raise KernelError(f"{qualname}: the kernel's @main takes {describe(declared)} but was called with "
                              f"{describe(inputs)}")
        return text

    def build(inputs, statics, info, prefix):
        functions, entry = _stablehlo_functions(module_for(inputs, statics), prefix)
        return functions, entry, list(range(len(inputs)))

    op = KernelOp(qualname, schema, build, lambda inputs, statics: _main_signature(module_for(inputs, statics),
                                                                                    qualname)[1])
    if backward is not None:
        op.register_autograd(backward, setup_context)
    return op
