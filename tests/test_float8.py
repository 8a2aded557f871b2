"""float8 dtypes on tpu (float8_e4m3fn, float8_e5m2 and their fnuz variants), against CPU torch bit for bit:
transfers, conversions from every source type (CPU's rounding, e4m3fn's saturation, the others' overflow),
the ops CPU's kernels take, CPU's error for the ops they refuse, and torch._scaled_mm lowered natively."""
import pytest
import torch

import torchtpu
from torchtpu.metrics import fallback_ops

TPU = "tpu"
FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]


def assert_same_bits(tpu: torch.Tensor, cpu: torch.Tensor) -> None:
    """Equal dtypes, shapes and values; a NaN matches any NaN (XLA and CPU may write different NaN payloads)."""
    got = tpu.cpu()
    assert got.dtype == cpu.dtype and got.shape == cpu.shape
    if got.dtype.itemsize == 1 and got.is_floating_point():
        got, cpu = got.float(), cpu.float()
    if got.is_floating_point():
        assert torch.equal(got.isnan(), cpu.isnan())
        got, cpu = got.nan_to_num(0.0), cpu.nan_to_num(0.0)
    assert torch.equal(got, cpu), (got - cpu).abs().max()


def conversion_inputs() -> torch.Tensor:
    """Every region of the float8 formats: a dense sweep past their largest values, tiny and subnormal
    magnitudes of both signs, the rounding midpoints, infinities, NaN and both zeros."""
    magnitudes = torch.logspace(-12, 5, 20001)
    return torch.cat([torch.linspace(-70000, 70000, 200001), magnitudes, -magnitudes,
                      torch.tensor([float("inf"), -float("inf"), float("nan"), -0.0, 0.0, 464.0, 465.0, 61440.0])])


@pytest.mark.parametrize("dtype", FLOAT8)
def test_every_code_round_trips_and_widens_as_on_cpu(dtype):
    codes = torch.arange(256, dtype=torch.uint8).view(dtype)
    on_tpu = codes.to(TPU)
    assert torch.equal(on_tpu.cpu().view(torch.uint8), codes.view(torch.uint8))
    for wide in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        assert_same_bits(on_tpu.to(wide), codes.to(wide))


@pytest.mark.parametrize("dtype", FLOAT8)
@pytest.mark.parametrize("source", [torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32])
def test_conversion_rounds_and_overflows_as_on_cpu(dtype, source):
    values = conversion_inputs()
    x = values.clamp(-1e9, 1e9).to(source) if source == torch.int32 else values.to(source)
    assert_same_bits(x.to(TPU).to(dtype), x.to(dtype))


@pytest.mark.parametrize("dtype", FLOAT8)
def test_ops_cpu_takes_match_it(dtype, metrics):
    x = (torch.randn(8, 16) * 4).to(dtype)
    source = torch.randn(8, 16) * 1000
    cases = {
        "abs": lambda t: t.abs(),
        "cat": lambda t: torch.cat([t, t]),
        "stack": lambda t: torch.stack([t, t]),
        "contiguous": lambda t: t.t().contiguous(),
        "slice": lambda t: t[1:3, ::2].contiguous(),
        "flip": lambda t: t.flip(0),
        "fill_": lambda t: t.clone().fill_(1.5),
        "eq": lambda t: t == t.flip(0),
        "ne": lambda t: t != 0,
        "isnan": lambda t: t.isnan(),
        "index": lambda t: t[torch.tensor([0, 2], device=t.device)],
        "index_put_": lambda t: t.clone().index_put_((torch.tensor([0], device=t.device),), t[1]),
        "mm": lambda t: t @ t.t(),
        "copy_ from float32": lambda t: t.clone().copy_(source.to(t.device)),
        "to float8_e5m2": lambda t: t.to(torch.float8_e5m2),
        "view as uint8": lambda t: t.view(torch.uint8).contiguous(),
        "full": lambda t: torch.full((3,), 2.5, dtype=dtype, device=t.device),
        "eye": lambda t: torch.eye(3, dtype=dtype, device=t.device),
    }
    for name, op in cases.items():
        assert_same_bits(op(x.to(TPU)), op(x)), name
    assert fallback_ops() == {}


@pytest.mark.parametrize("op", [lambda t: t + t, lambda t: t.sum(), lambda t: -t, lambda t: t.clamp(-1, 1),
                                lambda t: t.sort(), lambda t: t.normal_()],
                         ids=["add", "sum", "neg", "clamp", "sort", "normal_"])
def test_ops_cpu_refuses_raise_cpus_error(op):
    x = torch.randn(4, 4).to(torch.float8_e4m3fn)
    with pytest.raises(Exception) as on_cpu:
        op(x.clone())
    tpu = x.to(TPU)
    with pytest.raises(type(on_cpu.value)) as on_tpu:
        op(tpu)
    assert str(on_tpu.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]
    assert torch.equal(tpu.cpu().view(torch.uint8), x.view(torch.uint8))  # the tensor is untouched and usable


def assert_scaled_mm_close(tpu: torch.Tensor, cpu: torch.Tensor) -> None:
    """CPU scales the operands before its product, tpu scales the float32 product (so a TPU multiplies float8
    operands): float32 rounding apart, which can move a result across one rounding step of the output dtype."""
    got = tpu.cpu()
    assert got.dtype == cpu.dtype and got.shape == cpu.shape
    rtol = {torch.float32: 1e-5, torch.float16: 2**-10, torch.bfloat16: 2**-7}.get(cpu.dtype, 2**-2)
    torch.testing.assert_close(got.float(), cpu.float(), rtol=rtol, atol=1e-5)


SCALED_MM_CASES = {
    "tensorwise bf16": dict(scale_a=torch.tensor(0.5), scale_b=torch.tensor(2.0), out_dtype=torch.bfloat16),
    "tensorwise f32": dict(scale_a=torch.tensor(0.5), scale_b=torch.tensor(2.0), out_dtype=torch.float32),
    "tensorwise f16": dict(scale_a=torch.tensor(0.3), scale_b=torch.tensor(0.7), out_dtype=torch.float16),
    "bias": dict(scale_a=torch.tensor(0.5), scale_b=torch.tensor(2.0), bias=torch.randn(64).bfloat16(),
                 out_dtype=torch.bfloat16),
    "rowwise": dict(scale_a=torch.rand(16, 1), scale_b=torch.rand(1, 64), out_dtype=torch.bfloat16),
    "float8 out with scale_result": dict(scale_a=torch.tensor(0.5), scale_b=torch.tensor(2.0),
                                         scale_result=torch.tensor(4.0), out_dtype=torch.float8_e4m3fn),
    "f32 out ignores scale_result": dict(scale_a=torch.tensor(0.5), scale_b=torch.tensor(2.0),
                                         scale_result=torch.tensor(4.0), out_dtype=torch.float32),
    "default out dtype": dict(scale_a=torch.tensor(0.5), scale_b=torch.tensor(2.0)),
}


@pytest.mark.parametrize("case", list(SCALED_MM_CASES))
@pytest.mark.parametrize("b_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_scaled_mm_is_lowered_and_matches_cpu(case, b_dtype, metrics):
    a = (torch.randn(16, 32) * 3).to(torch.float8_e4m3fn)
    b = (torch.randn(64, 32) * 3).to(b_dtype).t()  # column-major, as the kernels require
    kwargs = SCALED_MM_CASES[case]
    expected = torch._scaled_mm(a, b, **kwargs)
    on_tpu = {k: v.to(TPU) if isinstance(v, torch.Tensor) else v for k, v in kwargs.items()}
    assert_scaled_mm_close(torch._scaled_mm(a.to(TPU), b.to(TPU), **on_tpu), expected)
    assert fallback_ops() == {}
    assert metrics()["ops"]["aten::_scaled_mm"]["executions"] == 1


def test_scaled_mm_bad_arguments_raise_cpus_error():
    a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    b = torch.randn(64, 32).to(torch.float8_e4m3fn).t()
    one = torch.tensor(1.0)
    for args in [(a, b, torch.ones(16), one), (a, b.t().contiguous(), one, one), (a.float(), b, one, one)]:
        with pytest.raises(Exception) as on_cpu:
            torch._scaled_mm(*args)
        with pytest.raises(type(on_cpu.value)) as on_tpu:
            torch._scaled_mm(*(t.to(TPU) for t in args))
        assert str(on_tpu.value).splitlines()[0] == str(on_cpu.value).splitlines()[0]


def quantize(x: torch.Tensor):
    """Per-tensor float8 quantization, as float8 training recipes write it."""
    scale = x.abs().max().clamp(min=1e-12) / 448.0
    return (x / scale).to(torch.float8_e4m3fn), scale


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_quantized_matmul_matches_cpu_in_eager_modes(mode):
    x, w = torch.randn(32, 64), torch.randn(48, 64)

    def step(x, w):
        xq, xs = quantize(x)
        wq, ws = quantize(w)
        return torch._scaled_mm(xq, wq.t(), xs.float(), ws.float(), out_dtype=torch.bfloat16)

    expected = step(x, w)
    with torchtpu.eager_mode(mode):
        got = step(x.to(TPU), w.to(TPU))
    assert_scaled_mm_close(got, expected)


def test_quantized_matmul_compiles():
    x, w = torch.randn(32, 64), torch.randn(48, 64)

    def step(x, w):
        xq, xs = quantize(x)
        wq, ws = quantize(w)
        return torch._scaled_mm(xq, wq.t(), xs.float(), ws.float(), out_dtype=torch.float32).relu()

    compiled = torch.compile(step, backend="tpu")
    assert_scaled_mm_close(compiled(x.to(TPU), w.to(TPU)), step(x, w))


def test_save_and_load_keep_float8_bits(tmp_path):
    x = torch.randn(5, 7).to(torch.float8_e5m2)
    torch.save({"w": x.to(TPU)}, tmp_path / "w.pt")
    loaded = torch.load(tmp_path / "w.pt")["w"]
    assert loaded.device.type == TPU and loaded.dtype == torch.float8_e5m2
    assert torch.equal(loaded.cpu().view(torch.uint8), x.view(torch.uint8))
    assert "float8_e5m2" in repr(loaded)


def test_unsupported_float8_format_is_refused_by_name():
    with pytest.raises(NotImplementedError, match="Float8_e8m0fnu"):
        torch.ones(3, dtype=torch.float8_e8m0fnu).to(TPU)
