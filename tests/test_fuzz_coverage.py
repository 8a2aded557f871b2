"""Every fuzz entry once (tests/test_fuzz_*.py): it matches CPU on its simplest case, no op it dispatches falls
back to the CPU, and together the entries reach a stated share of the rule families."""
import importlib
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

import torchtpu
from fuzz_support import FUZZ, run

FUZZ_FILES = sorted(p.stem for p in Path(__file__).parent.glob("test_fuzz_*.py") if p.stem != Path(__file__).stem)


def all_families() -> dict:
    """Every file's families by name; a family name is one table across the files."""
    families = {}
    for stem in FUZZ_FILES:
        for name, table in importlib.import_module(stem).FAMILIES.items():
            assert name not in families, f"family {name} is defined twice ({stem})"
            families[name] = table
    return families


def rule_family(op: str) -> str:
    """'aten::add_.Tensor' and 'aten::add.out' both belong to the family 'add'."""
    return op.split("::")[-1].split(".")[0].rstrip("_")


def test_every_entry_runs_on_tpu_rules_and_covers_the_table():
    families = all_families()
    reached, fallbacks, failures = set(), {}, []
    for family, table in families.items():
        for name in sorted(table):
            torchtpu.reset_metrics()

            @settings(FUZZ, max_examples=1)
            @given(data=st.data())
            def once(data):
                run(table[name](data.draw))
            try:
                once()
            except Exception as error:  # noqa: BLE001 - every failing entry is reported, not just the first
                failures.append(f"{family}/{name}: {error}")
            for op, counts in torchtpu.metrics()["ops"].items():
                if counts["executions"]:
                    reached.add(rule_family(op))
                if counts["fallbacks"]:
                    fallbacks.setdefault(op, []).append(name)
    assert not failures, "\n".join(failures)
    assert not fallbacks, f"ops the fuzzer reaches run on the CPU fallback: {fallbacks}"
    rule_families = {rule_family(r) for r in torchtpu._C._rule_names()}
    share = len(reached & rule_families) / len(rule_families)
    assert share >= 0.60, f"the fuzzer reaches {share:.0%} of the rule families"  # 65% when written
