"""Storage model: views share storage, reads of strided views gather the right values, writes through
partial or strided views reach every alias, version counters and autograd behave as on CPU."""
import pytest
import torch
import torchtpu

from torch.testing import assert_close


def pair(t):
    """The same tensor on CPU and on tpu."""
    return t.clone(), t.to("tpu")


VIEWS = {
    "view": lambda t: t.view(4, 6),
    "reshape": lambda t: t.reshape(2, 12),
    "transpose": lambda t: t.transpose(0, 1),
    "permute": lambda t: t.permute(1, 0),
    "expand": lambda t: t[:1].expand(5, 6),
    "slice": lambda t: t[1:3, ::2],
    "select": lambda t: t[:, 2],
    "narrow": lambda t: t.narrow(1, 1, 3),
    "unsqueeze": lambda t: t.unsqueeze(1),
    "squeeze": lambda t: t[:1].squeeze(0),
    "as_strided": lambda t: t.as_strided((3, 3), (5, 2), 1),
    "diagonal": lambda t: t.diagonal(),
    "unfold": lambda t: t[0].unfold(0, 3, 2),
    "t": lambda t: t.t(),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_views_share_storage_and_read_correctly(name):
    base_cpu, base_tpu = pair(torch.arange(24, dtype=torch.float32).reshape(4, 6))
    view_cpu, view_tpu = VIEWS[name](base_cpu), VIEWS[name](base_tpu)
    assert view_tpu.untyped_storage().data_ptr() == base_tpu.untyped_storage().data_ptr()
    assert view_tpu.stride() == view_cpu.stride()
    assert_close(view_tpu.cpu(), view_cpu)
    assert_close((view_tpu * 2).cpu(), view_cpu * 2)


@pytest.mark.parametrize("name", ["slice", "select", "narrow", "transpose", "diagonal", "t", "as_strided"])
def test_write_through_view_reaches_base_and_aliases(name):
    base_cpu, base_tpu = pair(torch.arange(24, dtype=torch.float32).reshape(4, 6))
    alias_cpu, alias_tpu = base_cpu.t(), base_tpu.t()
    VIEWS[name](base_cpu).mul_(-1).add_(0.5)
    VIEWS[name](base_tpu).mul_(-1).add_(0.5)
    assert_close(base_tpu.cpu(), base_cpu)
    assert_close(alias_tpu.cpu(), alias_cpu)


def test_slice_write_seen_by_transposed_view():
    base = torch.zeros(3, 4, device="tpu")
    transposed = base.t()
    base[1].fill_(7)
    base[:, 2] = torch.tensor([1.0, 2.0, 3.0])  # CPU source, strided destination
    expected = torch.zeros(3, 4)
    expected[1].fill_(7)
    expected[:, 2] = torch.tensor([1.0, 2.0, 3.0])
    assert_close(transposed.cpu(), expected.t())
    assert_close(base.cpu(), expected)


def test_whole_storage_write_rebinds_and_keeps_identity():
    x = torch.ones(4, device="tpu")
    pointer = x.data_ptr()
    view = x.view(2, 2)
    x.copy_(torch.arange(4.0))
    assert x.data_ptr() == pointer
    assert_close(view.cpu(), torch.arange(4.0).view(2, 2))


def test_data_ptr_unique_per_storage():
    tensors = [torch.empty(3, device="tpu") for _ in range(10)]
    assert len({t.data_ptr() for t in tensors}) == 10
    base = torch.empty(8, device="tpu")
    assert base[2:].data_ptr() == base.data_ptr() + 2 * base.element_size()


def test_version_counter_bumps_like_cpu():
    for device in ("cpu", "tpu"):
        x = torch.zeros(3, device=device)
        v = x._version
        x.add_(1)
        x[0] = 5
        assert x._version == v + 2


def test_autograd_detects_inplace_modification_like_cpu():
    messages = []
    for device in ("cpu", "tpu"):
        a = torch.randn(3, device=device, requires_grad=True)
        b = a.exp()
        b.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation") as info:
            b.sum().backward()
        messages.append(str(info.value).split("[")[0])
    assert messages[0] == messages[1].replace("tpu", "cpu") or messages[0].startswith(messages[1][:60])


def test_noncontiguous_inputs_to_ops():
    a_cpu, a_tpu = pair(torch.randn(6, 5))
    assert_close((a_tpu.t() @ a_tpu[:, 1:3]).cpu(), a_cpu.t() @ a_cpu[:, 1:3])
    assert_close(a_tpu[::2].sum(dim=0).cpu(), a_cpu[::2].sum(dim=0))


def test_dtype_view_reinterprets_bytes():
    x_cpu, x_tpu = pair(torch.tensor([1.0, -2.0, 0.5]))
    assert torch.equal(x_tpu.view(torch.int32).cpu(), x_cpu.view(torch.int32))
    assert torch.equal((x_tpu.view(torch.int32) + 1).cpu(), x_cpu.view(torch.int32) + 1)


def test_resize_and_out_into_view():
    base = torch.zeros(2, 4, device="tpu")
    torch.add(torch.ones(4, device="tpu"), 1, out=base[1])
    assert_close(base.cpu(), torch.tensor([[0.0] * 4, [2.0] * 4]))
    x = torch.empty(0, device="tpu")
    x.resize_(3, 2)
    assert x.shape == (3, 2)


def test_resize_to_the_same_sizes_keeps_strides_as_cpu():
    for device in ("cpu", "tpu"):
        x = torch.arange(6.0, device=device).view(2, 3).t()
        x.resize_(3, 2)
        assert x.stride() == (1, 3)
        assert x.cpu().tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
        with pytest.raises(RuntimeError, match="Unsupported memory format"):
            x.resize_(3, 2, memory_format=torch.preserve_format)


def test_empty_results_keep_the_meta_kernels_strides():
    # An empty tensor counts as contiguous in every layout; its strides still follow the asked format.
    for shape in [(0, 3, 2, 2), (2, 3, 0, 2)]:
        cpu = torch.zeros(shape).contiguous(memory_format=torch.channels_last)
        tpu = torch.zeros(shape, device="tpu").contiguous(memory_format=torch.channels_last)
        assert tpu.stride() == cpu.stride()


@pytest.mark.parametrize("view", [
    lambda t, j: t[:, :, j:j + 3],                # rows with slack; at j = 2 the view ends where the storage does
    lambda t, j: t[:, 1:5, j:],                   # shrinking rows
    lambda t, j: t[1:, ::2, j + 2],               # nested strides, one column
    lambda t, j: t.as_strided((2, 3, 2), (30, 10, 2), 65 + j),  # three levels with slack, ends at 119
], ids=["columns", "shrinking", "strided column", "three levels"])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_strided_views_read_right_at_every_offset(view, mode, metrics):
    """A strided view reads at its runtime offset (one program for every position) without padding the
    storage: the last row is read on its own where whole rows would run past the storage's end."""
    base_cpu, base_tpu = pair(torch.arange(120, dtype=torch.float32).reshape(4, 6, 5))
    with torchtpu.eager_mode(mode):
        for j in range(3):
            assert_close((view(base_tpu, j) * 2).cpu(), view(base_cpu, j) * 2)
    same_geometry = {view(base_cpu, j).shape for j in range(3)} == {view(base_cpu, 0).shape}
    if same_geometry:
        assert metrics()["ops"]["aten::mul.Tensor"]["compiles"] <= 1  # none per offset
