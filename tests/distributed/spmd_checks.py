"""Single-controller SPMD checks, run by test_spmd.py in a child process with TORCHTPU_NUM_DEVICES chips
(the device count is fixed when the plugin starts). ``python spmd_checks.py CHECK [ARGS]`` prints
``OK CHECK`` when every assertion held."""
from __future__ import annotations

import copy
import sys

import torch
import torch.nn.functional as F
from torch.distributed.tensor import Replicate, Shard

import torchtpu
from torchtpu.distributed import Mesh, shard, sharding
from torchtpu.testing.models import SmallGPT


def check_values() -> None:
    """Sharded tensors keep their values through specs of every kind, ops on them match CPU, a write keeps
    the written tensor's sharding, and a sharded parameter occupies its share of each device."""
    assert torch.tpu.device_count() == 4
    mesh = Mesh((2, 2), ("a", "b"))
    x = torch.randn(8, 12)
    w = torch.randn(12, 6)
    cases = {  # spec -> (tiles, replicas)
        ("a", None): ([2, 1], 2),
        (None, "b"): ([1, 2], 2),
        ("a", "b"): ([2, 2], 1),
        ("b", "a"): ([2, 2], 1),
        (("a", "b"), None): ([4, 1], 1),
        (None, None): ([1, 1], 4),
    }
    for spec, (tiles, replicas) in cases.items():
        t = shard(x, mesh, spec)
        s = sharding(t)
        assert s is not None and s.tiles == tiles and s.replicas == replicas, (spec, s)
        torch.testing.assert_close(t.cpu(), x, rtol=0, atol=0)
        tw = shard(w, mesh, (None, "b"))
        torch.testing.assert_close((t * 2 + 1).cpu(), x * 2 + 1)
        torch.testing.assert_close(t.sum(0).cpu(), x.sum(0))
        torch.testing.assert_close((t @ tw).cpu(), x @ w)
        torch.testing.assert_close((t.t() @ t).cpu(), x.t() @ x)  # a view of a sharded tensor
        torch.testing.assert_close(t[1:5, ::2].cpu(), x[1:5, ::2])
        torch.testing.assert_close(F.softmax(t, -1).cpu(), F.softmax(x, -1))
        # Max and min reductions across a split dim (NaN propagating), values and indices, in each mode.
        with_nan = x.clone()
        with_nan[3, 5] = float("nan")
        n = shard(with_nan, mesh, spec)
        for mode in ("strict", "fused"):
            with torchtpu.eager_mode(mode):
                for reduce in (lambda v: v.argmax(0), lambda v: v.argmin(), lambda v: v.amax(0),
                               lambda v: v.max(1).values, lambda v: (v * 2).max(0).indices, lambda v: v.min()):
                    torch.testing.assert_close(reduce(n).cpu(), reduce(with_nan), equal_nan=True)
        t.add_(1.0)
        assert sharding(t) == s, "an in-place update keeps the tensor's sharding"
        torch.testing.assert_close(t.cpu(), x + 1)
    # A fused trace over a sharded tensor whose results are all freed before the flush runs nothing visible.
    t = shard(x, mesh, ("a", None))
    with torchtpu.eager_mode("fused"):
        dropped = t * 2
        del dropped
        torch.tpu.synchronize()
        torch.testing.assert_close((t + 1).cpu(), x + 1)
    # DTensor placements, one per mesh axis.
    t = shard(x, mesh, [Shard(0), Replicate()])
    assert sharding(t).tiles == [2, 1] and sharding(t).replicas == 2
    t = shard(x, mesh, [Shard(1), Shard(0)])
    assert sharding(t).tiles == [2, 2]
    torch.testing.assert_close(t.cpu(), x, rtol=0, atol=0)
    # A parameter keeps its identity when sharded; each device holds a quarter of it.
    torch.tpu.synchronize()
    before = [torch.tpu.memory_allocated(d) for d in range(4)]
    p = torch.nn.Parameter(torch.zeros(256, 256, device="tpu"))
    torch.tpu.synchronize()
    whole = [torch.tpu.memory_allocated(d) - before[d] for d in range(4)]
    assert whole == [256 * 256 * 4, 0, 0, 0], whole
    same = shard(p, mesh, (("a", "b"), None))
    assert same is p and isinstance(p, torch.nn.Parameter)
    torch.tpu.synchronize()
    quarter = [torch.tpu.memory_allocated(d) - before[d] for d in range(4)]
    assert quarter == [256 * 256] * 4, quarter
    shard(p, mesh, None)  # replicated: a whole copy per device
    torch.tpu.synchronize()
    replicated = [torch.tpu.memory_allocated(d) - before[d] for d in range(4)]
    assert replicated == [256 * 256 * 4] * 4, replicated


def check_errors() -> None:
    """Bad sharding requests raise clear errors and leave the tensor as it was."""
    mesh = Mesh((2, 2), ("a", "b"))
    x = torch.randn(6, 4)
    t = x.to("tpu")
    expected = [
        (("c", None), ValueError, "axis 'c' is not in the mesh"),
        (("a", "b", None), ValueError, "has 3 entries for a tensor of 2 dims"),
        ((("a", "b"), None), ValueError, "dimension 0 of size 6 does not divide into 4 pieces"),
        (("a", "a"), ValueError, "mesh axis 'a' splits more than one dimension"),
    ]
    for spec, kind, words in expected:
        try:
            shard(t, mesh, spec)
        except kind as e:
            assert words in str(e), (spec, str(e))
        else:
            raise AssertionError(f"shard(..., {spec}) did not raise")
    try:
        shard(t[2:], mesh, ("a", None))
    except RuntimeError as e:
        assert "cover its whole storage" in str(e), str(e)
    else:
        raise AssertionError("sharding a view did not raise")
    for shape, words in [((3,), "has 3 devices but the process has 4"), ((2, 2), "axis names must differ")]:
        try:
            Mesh(shape, ("a", "a") if len(shape) == 2 else ("a",))
        except ValueError as e:
            assert words in str(e), str(e)
        else:
            raise AssertionError(f"Mesh{shape} did not raise")
    assert sharding(t) is None
    torch.testing.assert_close(t.cpu(), x)
    torch.testing.assert_close((t * 2).cpu(), x * 2)


def _loss(out, target):
    return F.cross_entropy(out.flatten(0, 1), target.flatten())


def _plan(model: SmallGPT, mesh: Mesh, strategy: str) -> None:
    """How the GPT's parameters are split. dp: replicated. tp: Megatron-style, each block's attention input
    projection and first MLP layer split by output (column-parallel), the attention output projection and
    second MLP layer by input (row-parallel). fsdp: every parameter split along its first dim."""
    axis = mesh.axis_names[-1]
    if strategy == "dp":
        for p in model.parameters():
            shard(p, mesh)
        return
    if strategy == "tp":
        for block in model.blocks:
            for column in (block.qkv, block.mlp[0]):
                shard(column.weight, mesh, (axis, None))
                shard(column.bias, mesh, (axis,))
            for row in (block.proj, block.mlp[2]):
                shard(row.weight, mesh, (None, axis))
        return
    n = mesh.shape[axis]
    for p in model.parameters():
        shard(p, mesh, (axis,) + (None,) * (p.dim() - 1) if p.shape[0] % n == 0 else None)


def check_train(strategy: str, mode: str) -> None:
    """Three SGD-momentum steps of the small GPT with its parameters split by ``strategy`` and the batch split
    over the mesh (dp, fsdp), run strict, fused or compiled, end at one CPU process's parameters (1e-5);
    after the first step, no step compiles anything."""
    n = torch.tpu.device_count()
    torch.manual_seed(0)
    reference = SmallGPT(dim=32, heads=4, layers=2, context=16)
    data = torch.randint(0, 64, (8, 17))
    x, y = data[:, :-1], data[:, 1:]

    def step(model, opt, x, y):
        opt.zero_grad()
        loss = _loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    cpu = copy.deepcopy(reference)
    cpu_opt = torch.optim.SGD(cpu.parameters(), lr=0.1, momentum=0.9)
    cpu_losses = [step(cpu, cpu_opt, x, y).item() for _ in range(3)]

    mesh = Mesh((2, n // 2), ("dp", "model")) if strategy == "tp" else Mesh((n,), ("d",))
    model = copy.deepcopy(reference).to("tpu")
    _plan(model, mesh, strategy)
    batch = (None, None) if strategy == "tp" else ("d", None)
    if strategy == "tp":
        batch = ("dp", None)
    xs, ys = shard(x, mesh, batch), shard(y, mesh, batch)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    run = torch.compile(step, backend="tpu") if mode == "compiled" else step
    torchtpu.eager_mode("fused" if mode == "fused" else "strict")
    losses = []
    for i in range(3):
        if i == 2:
            torchtpu.reset_metrics()
        losses.append(run(model, opt, xs, ys).item())
    metrics = torchtpu.metrics()
    compiles = sum(op["compiles"] for op in metrics["ops"].values()) + metrics["fused"]["compiles"]
    assert compiles == 0, f"step 3 compiled {compiles} programs"
    if mode == "compiled":
        assert metrics["compiled"]["replays"] >= 1, metrics["compiled"]
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), rtol=1e-5, atol=1e-5)
    for (name, p), q in zip(model.named_parameters(), cpu.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-5, msg=name)
    if strategy == "fsdp":  # the split parameters stay split
        assert sharding(model.blocks[0].mlp[0].weight).tiles == [n, 1]


if __name__ == "__main__":
    name, *args = sys.argv[1:]
    {"values": check_values, "errors": check_errors, "train": check_train}[name](*args)
    print(f"OK {name}")
