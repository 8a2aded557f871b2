"""JAX's side of custom kernels: importing it without letting it take the device, exporting a function for
given shapes, and turning the exported module into functions a torchtpu program can call.

JAX runs on the CPU platform unless the user chose one (``JAX_PLATFORMS``): torchtpu owns the accelerator
(two libtpu clients in one process fight over the TPU), and exporting needs no device.
"""
from __future__ import annotations

import functools
import os

import torch

from torchtpu.kernels._types import KernelError, TensorSpec, describe

# Set when torchtpu.kernels is imported, so that a user's own `import jax` after it also leaves the device alone.
os.environ.setdefault("JAX_PLATFORMS", "cpu")

_INSTALL_HINT = "install it with `pip install torchtpu[kernels]` (jax and jaxlib, pinned in requirements.txt)"


@functools.cache
def jax():
    """The ``jax`` module, or a clear KernelError when it is not installed."""
    try:
        import jax as jax_module
        import jax.export  # noqa: F401  (a submodule, not loaded by `import jax`)
    except ImportError as e:
        raise KernelError(f"torchtpu.kernels.jax_op needs JAX, which is not importable ({e}); {_INSTALL_HINT}") from e
    if not jax_module.config.jax_platforms:
        # JAX was imported before torchtpu.kernels, without a platform chosen: pick the CPU as above (this
        # holds while JAX has not started a backend, which it does lazily).
        jax_module.config.update("jax_platforms", "cpu")
    return jax_module


def to_jax_dtype(dtype: torch.dtype):
    jnp = jax().numpy
    names = {torch.float32: jnp.float32, torch.bfloat16: jnp.bfloat16, torch.float16: jnp.float16,
             torch.float64: jnp.float64, torch.int32: jnp.int32, torch.int64: jnp.int64, torch.int8: jnp.int8,
             torch.int16: jnp.int16, torch.uint8: jnp.uint8, torch.bool: jnp.bool_}
    if dtype not in names:
        raise KernelError(f"torchtpu.kernels: dtype {dtype} has no JAX counterpart")
    if dtype in (torch.float64, torch.int64) and not jax().config.jax_enable_x64:
        # JAX would silently compute in 32 bits; the kernel would then not match its inputs.
        raise KernelError(f"torchtpu.kernels: a {dtype} input needs JAX's 64-bit mode "
                          "(jax.config.update('jax_enable_x64', True)); or convert it to 32 bits first")
    return names[dtype]


def to_torch_dtype(dtype) -> torch.dtype:
    name = str(jax().numpy.dtype(dtype))
    dtypes = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
              "float64": torch.float64, "int32": torch.int32, "int64": torch.int64, "int8": torch.int8,
              "int16": torch.int16, "uint8": torch.uint8, "bool": torch.bool}
    if name not in dtypes:
        raise KernelError(f"torchtpu.kernels: the kernel returns {name}, which torch has no dtype for")
    return dtypes[name]


def output_specs(name: str, fn, inputs: list[TensorSpec], statics: dict) -> list[TensorSpec]:
    """The shapes and dtypes ``fn`` returns for these inputs, from JAX's shape rule (no compile, no device)."""
    j = jax()
    structs = [j.ShapeDtypeStruct(s.shape, to_jax_dtype(s.dtype)) for s in inputs]
    try:
        out = j.eval_shape(functools.partial(fn, **statics), *structs)
    except KernelError:
        raise
    except Exception as e:  # JAX's shape errors are TypeError, ValueError, ...: name the op and the inputs
        raise KernelError(f"{name}: the JAX function rejects inputs {describe(inputs)}: {e}") from e
    leaves = j.tree_util.tree_leaves(out)
    return [TensorSpec(tuple(leaf.shape), to_torch_dtype(leaf.dtype)) for leaf in leaves]


def export_functions(name: str, fn, inputs: list[TensorSpec], statics: dict, platform: str,
                     stablehlo_version: str, prefix: str) -> tuple[str, str, list[int]]:
    """Exports ``fn`` for ``platform`` and these inputs. Returns the module's functions as MLIR text (generic
    op syntax, every name prefixed with ``prefix``, all private), the entry function's name, and which inputs
    the entry takes (JAX drops unused ones)."""
    j = jax()
    from jax._src.interpreters import mlir as jax_mlir
    from jaxlib.mlir import ir
    from jaxlib.mlir.dialects import stablehlo

    structs = [j.ShapeDtypeStruct(s.shape, to_jax_dtype(s.dtype)) for s in inputs]
    try:
        exported = j.export.export(j.jit(functools.partial(fn, **statics)), platforms=(platform,))(*structs)
    except Exception as e:
        raise KernelError(f"{name}: exporting the JAX function for {platform} with inputs {describe(inputs)} "
                          f"failed: {e}") from e
    if exported.ordered_effects or exported.unordered_effects:
        raise KernelError(f"{name}: the JAX function has side effects (callbacks, prints); a kernel must be pure")
    if exported.nr_devices != 1:
        raise KernelError(f"{name}: the JAX function is sharded over {exported.nr_devices} devices; a kernel runs "
                          "on one")
    with jax_mlir.make_ir_context():
        module = ir.Module.parse(exported.mlir_module())
        _check_version(name, stablehlo, module, stablehlo_version)
        functions = list(module.body.operations)
        names = [ir.StringAttr(f.attributes["sym_name"]).value for f in functions]
        for n in names:
            ir.SymbolTable.replace_all_symbol_uses(n, prefix + n, module.operation)
        for f, n in zip(functions, names):
            f.attributes["sym_name"] = ir.StringAttr.get(prefix + n)
            f.attributes["sym_visibility"] = ir.StringAttr.get("private")
            # JAX's argument and result attributes (layouts, result names) mean nothing inside our program.
            for attribute in ("arg_attrs", "res_attrs"):
                if attribute in f.attributes:
                    del f.attributes[attribute]
        text = "\n".join(f.get_asm(print_generic_op_form=True) for f in functions)
    return text, prefix + "main", sorted(exported.module_kept_var_idx)


def _check_version(name: str, stablehlo, module, plugin_version: str) -> None:
    """Fails clearly when the kernel needs StableHLO features newer than the plugin's parser knows: JAX's
    StableHLO can be newer than the plugin's, and serializing to the plugin's version is what proves it fits."""
    if not plugin_version or _version(stablehlo.get_current_version()) <= _version(plugin_version):
        return
    try:
        stablehlo.serialize_portable_artifact_str(str(module), plugin_version)
    except Exception as e:
        raise KernelError(
            f"{name}: the kernel uses StableHLO features the device's PJRT plugin cannot read (JAX writes StableHLO "
            f"{stablehlo.get_current_version()}, the plugin reads up to {plugin_version}): {e}") from e


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in text.split("."))
