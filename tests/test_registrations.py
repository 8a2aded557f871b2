"""The registration list and the rule table agree: every op served by the lowered kernel has a rule,
and every rule is reachable from some registered overload."""
import torch

import torchtpu
from torchtpu import _C


def _functional_candidates(name):
    base, _, overload = name.partition(".")
    if base.endswith("_"):
        yield base[:-1] + ("." + overload if overload else "")
    yield name


def test_every_rule_is_registered():
    registered = {"aten::" + op for op in _C._lowered_ops()}
    assert set(_C._rule_names()) <= registered


def test_every_registered_op_runs_through_a_rule():
    # Calling an op whose rule cannot be derived raises "no lowering rule"; exercise one overload of each
    # kind (functional, in-place, out=) cheaply.
    x = torch.ones(3, device="tpu")
    x.abs_()
    torch.abs(x, out=torch.empty(3, device="tpu"))
    torch.max(torch.ones(2, 3, device="tpu"), dim=1, out=(torch.empty(0, device="tpu"),
                                                          torch.empty(0, dtype=torch.long, device="tpu")))


def test_metrics_shape():
    torchtpu.reset_metrics()
    (torch.ones(2, device="tpu") + 1).cpu()
    m = torchtpu.metrics()
    assert set(m) == {"ops", "transfers", "program_cache"}
    assert m["ops"]["aten::add.Tensor"]["executions"] == 1
    assert m["transfers"]["to_host"] >= 1
