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
    # Served by the lowered kernel, by a hand-written kernel that hands other calls to it (cat, attention),
    # or an internal torchtpu:: op: either way a tpu kernel of its own, not the CPU fallback.
    unregistered = [name for name in _C._rule_names()
                    if not torch._C._dispatch_has_kernel_for_dispatch_key(name, "PrivateUse1")]
    assert unregistered == []
    lowered = {"aten::" + op for op in _C._lowered_ops()}
    assert {"aten::cat", "aten::_scaled_dot_product_fused_attention_overrideable"}.isdisjoint(lowered)


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
    assert set(m) == {"ops", "transfers", "program_cache", "fused", "compiled"}
    assert m["ops"]["aten::add.Tensor"]["executions"] == 1
    assert m["transfers"]["to_host"] >= 1
