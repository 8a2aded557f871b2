"""How each op of PyTorch's Core ATen opset (overloads tagged ``torch.Tag.core``) runs on tpu.

    python tools/core_aten_coverage.py

Prints the count per category and the ops of every category but the first, as the table rows of
docs/ops.md. Categories, by what the dispatcher finds for the tpu key:
- lowering rule: a rule in csrc/lowering serves it (registered through the generic kernel);
- hand-written kernel: registered for tpu in csrc/aten without a rule (views, allocation, transfers);
- decomposes: no tpu kernel, but PyTorch's composite kernel rewrites it into other ops;
- CPU fallback: nothing on tpu; it runs on the CPU.
"""
from __future__ import annotations

import collections
import pathlib
import sys

import torch

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from update_registrations import full_name, overloads, rule_names  # noqa: E402

import torchtpu  # noqa: E402,F401  (registers the tpu kernels)

CATEGORIES = ("lowering rule", "hand-written kernel", "decomposes", "CPU fallback")


def core_overloads() -> list[str]:
    names = []
    for schema in torch._C._jit_get_all_schemas():
        if not schema.name.startswith("aten::"):
            continue
        packet = getattr(torch.ops.aten, schema.name[len("aten::"):], None)
        overload = getattr(packet, schema.overload_name or "default", None) if packet is not None else None
        if overload is not None and torch.Tag.core in overload.tags:
            names.append(full_name(schema))
    return sorted(set(names))


def category(name: str, lowered: set[str]) -> str:
    if torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1"):
        return "lowering rule" if name[len("aten::"):] in lowered else "hand-written kernel"
    # Not CompositeExplicitAutogradNonFunctional: for a structured op that kernel only calls its out= overload,
    # which has no tpu kernel either.
    for key in ("CompositeImplicitAutograd", "CompositeExplicitAutograd"):
        if torch._C._dispatch_has_kernel_for_dispatch_key(name, key):
            return "decomposes"
    return "CPU fallback"


def main() -> None:
    lowered = set(overloads(rule_names()))
    by_category: dict[str, list[str]] = collections.defaultdict(list)
    core = core_overloads()
    for name in core:
        by_category[category(name, lowered)].append(name[len("aten::"):])
    print(f"{len(core)} Core ATen overloads")
    print("| how | count | ops |\n|---|---|---|")
    for what in CATEGORIES:
        ops = by_category.get(what, [])
        listed = "" if what == "lowering rule" else ", ".join(f"`{op}`" for op in ops)
        print(f"| {what} | {len(ops)} | {listed} |")


if __name__ == "__main__":
    main()
