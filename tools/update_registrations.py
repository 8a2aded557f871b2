"""Rewrites the list of lowered overloads in csrc/aten/registrations.cc from the rule table.

For every rule keyed by a functional overload ("aten::foo.bar") it registers that overload, its in-place
twin ("foo_.bar") and every out= overload whose other arguments match it by name and type. Run it after
adding or removing a rule and rebuilding the extension (the rule names come from the built table, since
some families, such as the foreach ops, generate their entries):

    python tools/update_registrations.py
"""
from __future__ import annotations

import pathlib
import re

import torch

ROOT = pathlib.Path(__file__).resolve().parent.parent
REGISTRATIONS = ROOT / "csrc" / "aten" / "registrations.cc"
# Ops with their own hand-written kernel in registrations.cc (never served by the lowered kernel).
HAND_WRITTEN = {"aten::copy_", "aten::cat", "aten::_scaled_dot_product_fused_attention_overrideable",
                "aten::one_hot", "aten::index.Tensor", "aten::index_put", "aten::index_put_",
                "aten::_index_put_impl", "aten::_index_put_impl_"}


def rule_names() -> set[str]:
    from torchtpu import _C

    return set(_C._rule_names())


def full_name(schema) -> str:
    return schema.name + ("." + schema.overload_name if schema.overload_name else "")


def signature(arguments) -> list[tuple[str, str]]:
    return [(a.name, str(a.type)) for a in arguments]


def is_out_argument(argument) -> bool:
    return bool(argument.alias_info and argument.alias_info.is_write and argument.kwarg_only)


def overloads(rules: set[str]) -> list[str]:
    # torchtpu's internal ops ("torchtpu::_append_rows") are defined and registered by hand.
    rules = {r for r in rules if r.startswith("aten::")}
    schemas = {full_name(s): s for s in torch._C._jit_get_all_schemas() if s.name.startswith("aten::")}
    missing = sorted(r for r in rules if r not in schemas)
    if missing:
        raise SystemExit(f"rules for unknown overloads: {missing}")
    chosen = set(rules)
    # In-place twins: "foo_.*" overloads whose arguments match a functional rule's by name and type (an
    # alias annotation is not part of the type); pow_.Scalar is the twin of pow.Tensor_Scalar, not of
    # pow.Scalar.
    for name, schema in schemas.items():
        base = schema.name[len("aten::"):]
        if not base.endswith("_") or any(is_out_argument(a) for a in schema.arguments):
            continue
        for rule in rules:
            functional = schemas[rule]
            if functional.name != "aten::" + base[:-1] or functional.is_mutable:
                continue
            if signature(functional.arguments) == signature(schema.arguments):
                chosen.add(name)
    for name, schema in schemas.items():
        if not any(is_out_argument(a) for a in schema.arguments):
            continue
        wanted = signature([a for a in schema.arguments if not (a.alias_info and a.alias_info.is_write)])
        for candidate_name, candidate in schemas.items():
            if candidate.name == schema.name and not candidate.is_mutable and signature(candidate.arguments) == wanted:
                if candidate_name in rules:
                    chosen.add(name)
                break
    return sorted(n[len("aten::"):] for n in chosen - HAND_WRITTEN)


def main() -> None:
    text = REGISTRATIONS.read_text()
    body = "".join(f'      "{name}",\n' for name in overloads(rule_names()))
    updated, count = re.subn(r"(static const std::vector<const char\*> ops = \{\n)(.*?)(  \};)",
                             lambda m: m.group(1) + body + m.group(3), text, flags=re.S)
    if count != 1:
        raise SystemExit("could not find the list in registrations.cc")
    REGISTRATIONS.write_text(updated)
    print(f"{body.count(chr(10))} overloads registered from {len(rule_names())} rules")


if __name__ == "__main__":
    main()
