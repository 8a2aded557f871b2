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


def test_grad_scaler_matches_cpu_natively(metrics):
    """torch.amp.GradScaler("tpu"): unscale, the inf/NaN check, the skipped step and the scale update run
    on the device and follow CPU's scaler step for step, overflow included."""
    results = {}
    for device in ("cpu", "tpu"):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3).to(device)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 8, growth_interval=2)
        scales = []
        for step in range(6):
            x = torch.randn(5, 4, generator=torch.Generator().manual_seed(step)).to(device)
            if step == 3:
                x[0, 0] = float("inf")  # an overflow: the step is skipped and the scale backs off
            scaler.scale(model(x).square().mean()).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
            scales.append(scaler.get_scale())
        results[device] = (scales, [p.detach().cpu() for p in model.parameters()])
    assert results["tpu"][0] == results["cpu"][0]
    for a, b in zip(results["tpu"][1], results["cpu"][1]):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
    assert all(s["fallbacks"] == 0 for s in metrics()["ops"].values())
