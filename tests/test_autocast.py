"""torch.autocast on tpu: the policies PyTorch applies on CUDA (CPU's lists differ: it keeps exp in the lower
precision, for one), with the casts done on the device. Values are compared with CPU's autocast."""
import pytest
import torch
import torch.nn.functional as F


def test_autocast_policies_match_cpu():
    lin_cpu = torch.nn.Linear(8, 4)
    lin_tpu = torch.nn.Linear(8, 4).tpu()
    lin_tpu.load_state_dict(lin_cpu.state_dict())
    x = torch.randn(3, 8)
    table = torch.randn(10, 8)
    ids = torch.tensor([1, 5, 9])
    results = {}
    for device, lin in (("cpu", lin_cpu), ("tpu", lin_tpu)):
        with torch.autocast(device, dtype=torch.bfloat16):
            y = lin(x.to(device))                          # lower precision
            e = F.embedding(ids.to(device), table.to(device))  # no policy: falls through unchanged
            s = torch.softmax(y, -1, dtype=torch.float32)   # float32 with a dtype argument
            p = torch.exp(y)                                # float32
            a = torch.addcmul(e[:, :4], y, y)               # promote to the widest input
        results[device] = (y, e, s, p, a)
    expected = (torch.bfloat16, torch.float32, torch.float32, torch.float32, torch.float32)
    for cpu, tpu, dtype in zip(results["cpu"], results["tpu"], expected):
        assert tpu.device.type == "tpu"
        assert tpu.dtype == dtype
        torch.testing.assert_close(tpu.cpu().float(), cpu.float(), atol=2e-2, rtol=2e-2)


def test_autocast_backward_gives_float32_grads():
    lin = torch.nn.Linear(8, 4).tpu()
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = lin(torch.randn(2, 8, device="tpu"))
    out.float().sum().backward()
    assert lin.weight.grad.dtype == torch.float32


def test_autocast_disabled_inside_is_float32():
    lin = torch.nn.Linear(8, 4).tpu()
    with torch.autocast("tpu", dtype=torch.bfloat16):
        with torch.autocast("tpu", enabled=False):
            assert lin(torch.randn(2, 8, device="tpu")).dtype == torch.float32


@pytest.mark.parametrize("op", [torch.binary_cross_entropy_with_logits, F.binary_cross_entropy])
def test_autocast_losses_run_in_float32(op):
    x = torch.rand(4, device="tpu").to(torch.bfloat16)
    t = torch.rand(4, device="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        assert op(x, t).dtype == torch.float32
