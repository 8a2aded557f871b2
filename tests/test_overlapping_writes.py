"""Writes into memory that the op's tensors share (aten/overlapping_writes.h): an expanded or overlapping
destination, or a dense destination that partly overlaps a dense input. tpu raises CPU's error where CPU
refuses the write, and gives CPU's result where CPU accepts it; the tensors stay usable after an error."""
import warnings

import pytest
import torch
import torchtpu

from torch.testing import assert_close


def idx(device, values):
    return torch.tensor(values, device=device)


# An expanded destination: (name, op). CPU refuses the first group and accepts the second.
REFUSED = {
    "add_": lambda t: t.add_(1),
    "mul_": lambda t: t.mul_(2),
    "clamp_": lambda t: t.clamp_(0, 1),
    "sigmoid_": lambda t: t.sigmoid_(),
    "uniform_": lambda t: t.uniform_(),
    "copy_ tpu": lambda t: t.copy_(torch.ones(2, 3, device=t.device)),
    "copy_ from cpu": lambda t: t.copy_(torch.ones(2, 3)),
    "exp out=": lambda t: torch.exp(torch.ones(2, 3, device=t.device), out=t),
    "mm out=": lambda t: torch.mm(torch.ones(2, 2, device=t.device), torch.ones(2, 3, device=t.device), out=t),
    "scatter_": lambda t: t.scatter_(1, torch.zeros(2, 3, dtype=torch.long, device=t.device), 1.0),
    "foreach add_": lambda t: torch._foreach_add_([t], 1.0),
}
ACCEPTED = {
    "fill_": lambda t: t.fill_(1),
    "zero_": lambda t: t.zero_(),
    "index_fill_": lambda t: t.index_fill_(1, idx(t.device, [0]), 5.0),
    "index_put_ accumulate": lambda t: t.index_put_((idx(t.device, [0, 1]),), torch.ones(2, 3, device=t.device),
                                                    accumulate=True),
    "masked_fill_": lambda t: t.masked_fill_(torch.ones(2, 3, dtype=torch.bool, device=t.device), 1.0),
    "sum out=": lambda t: torch.sum(torch.arange(24.0, device=t.device).reshape(2, 3, 4), 2, out=t),
    "setitem": lambda t: t.__setitem__((0,), 7.0),
}


def expanded(device):
    base = torch.arange(3.0, device=device)
    return base, base.expand(2, 3)


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_a_write_into_an_expanded_tensor_raises_as_on_cpu(name):
    _, cpu_view = expanded("cpu")
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor") as cpu_error:
        REFUSED[name](cpu_view)
    base, view = expanded("tpu")
    with pytest.raises(RuntimeError) as tpu_error:
        REFUSED[name](view)
    assert str(tpu_error.value).splitlines()[0] == str(cpu_error.value).splitlines()[0]
    assert_close(base.cpu(), torch.arange(3.0))  # nothing was written
    assert_close((view + 1).cpu(), torch.arange(3.0).expand(2, 3) + 1)


@pytest.mark.parametrize("name", sorted(ACCEPTED))
def test_a_write_into_an_expanded_tensor_that_cpu_accepts_gives_cpus_result(name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # CPU deprecates some of these; its warning is the same on tpu
        cpu_base, cpu_view = expanded("cpu")
        ACCEPTED[name](cpu_view)
        base, view = expanded("tpu")
        ACCEPTED[name](view)
    assert_close(base.cpu(), cpu_base)


PARTIAL = {
    "add_ transposed": lambda x: x.add_(x.t()),
    "copy_ shifted": lambda x: x.view(-1)[1:].copy_(x.view(-1)[:-1]),
    "add out= shifted": lambda x: torch.add(x.view(-1)[:-1], 1, out=x.view(-1)[1:]),
}


@pytest.mark.parametrize("name", sorted(PARTIAL))
def test_a_dense_write_that_partly_overlaps_an_input_raises_as_on_cpu(name):
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor"):
        PARTIAL[name](torch.arange(9.0).reshape(3, 3))
    x = torch.arange(9.0, device="tpu").reshape(3, 3)
    with pytest.raises(RuntimeError, match="some elements of the input tensor and the written-to tensor"):
        PARTIAL[name](x)
    assert_close(x.cpu(), torch.arange(9.0).reshape(3, 3))


def test_an_overlapping_as_strided_write_is_computed_as_cpu_computes_it():
    cpu = torch.arange(9.0)
    cpu.as_strided((2, 2), (1, 1)).add_(1)  # element 1 is written twice
    x = torch.arange(9.0, device="tpu")
    x.as_strided((2, 2), (1, 1)).add_(1)
    assert_close(x.cpu(), cpu)


def test_in_place_writes_of_the_same_view_and_of_disjoint_views_stay_on_the_device():
    x = torch.arange(12.0, device="tpu").reshape(3, 4)
    before = torchtpu.metrics()["ops"].get("aten::add_.Tensor", {}).get("fallbacks", 0)
    x.add_(x)                           # the same view: no overlap to resolve
    x[0].add_(x[1])                     # two rows of one storage, disjoint
    x.view(-1)[:4].add_(x.view(-1)[4:8])
    x[:, 0].add_(x[:, 1])               # strided, disjoint
    cpu = torch.arange(12.0).reshape(3, 4)
    cpu.add_(cpu)
    cpu[0].add_(cpu[1])
    cpu.view(-1)[:4].add_(cpu.view(-1)[4:8])
    cpu[:, 0].add_(cpu[:, 1])
    assert_close(x.cpu(), cpu)
    assert torchtpu.metrics()["ops"]["aten::add_.Tensor"]["fallbacks"] == before


def test_fused_mode_resolves_overlapping_writes_as_strict_mode():
    with torchtpu.eager_mode("fused"):
        base, view = expanded("tpu")
        pending = base * 2  # recorded, not run yet
        with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
            view.mul_(2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            view.index_put_((idx("tpu", [0, 1]),), torch.ones(2, 3, device="tpu"), accumulate=True)
        assert_close(base.cpu(), torch.tensor([2.0, 3.0, 4.0]))
        assert_close(pending.cpu(), torch.tensor([0.0, 2.0, 4.0]))
