"""Random ops on tpu: bernoulli, random_/randint, exponential_, dropout and randperm. Each is reproducible
under torch.manual_seed, advances the generator between calls, has the right range and moments, and runs
without CPU fallbacks."""
import pytest
import torch
import torch.nn.functional as F
from torch.testing import assert_close

import torchtpu
from torchtpu.metrics import fallback_ops

N = 200_000  # samples for moment checks: the standard error of a mean of U(0,1) is ~6.5e-4


def on_tpu(fn, varies=True):
    """Runs fn (which creates tpu tensors) twice under one seed and once more; checks reproducibility,
    that the generator advanced (when the result can vary), and no fallbacks. Returns the first result on
    the CPU."""
    torchtpu.reset_metrics()
    torch.manual_seed(1234)
    first = fn().cpu()
    again = fn().cpu()
    torch.manual_seed(1234)
    repeat = fn().cpu()
    assert fallback_ops() == {}
    assert torch.equal(first, repeat)
    if varies and first.numel() > 16:
        assert not torch.equal(first, again)
    return first


def empty(n=N, dtype=torch.float32):
    return torch.empty(n, dtype=dtype, device="tpu")


# ---- bernoulli ------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64, torch.int64, torch.bool], ids=str)
def test_bernoulli_float(dtype):
    x = on_tpu(lambda: empty(dtype=dtype).bernoulli_(0.3))
    assert x.dtype == dtype
    assert set(x.unique().tolist()) <= {0, 1}
    assert abs(x.double().mean().item() - 0.3) < 5e-3


def test_bernoulli_edges():
    assert on_tpu(lambda: empty(100).bernoulli_(0.0), varies=False).sum() == 0
    assert on_tpu(lambda: empty(100).bernoulli_(1.0), varies=False).sum() == 100


def test_bernoulli_tensor_probabilities():
    p = torch.tensor([0.0, 0.25, 0.9, 1.0]).repeat(N // 4, 1).to("tpu")
    x = on_tpu(lambda: torch.bernoulli(p))
    assert x.dtype == torch.float32 and x.shape == (N // 4, 4)
    assert_close(x.mean(0), torch.tensor([0.0, 0.25, 0.9, 1.0]), atol=1e-2, rtol=0)
    # bernoulli_.Tensor broadcasts p over self.
    y = on_tpu(lambda: torch.empty(N // 4, 4, device="tpu").bernoulli_(p[0]))
    assert_close(y.mean(0), torch.tensor([0.0, 0.25, 0.9, 1.0]), atol=1e-2, rtol=0)


def test_bernoulli_p_overload():
    x = on_tpu(lambda: torch.bernoulli(empty(), 0.7))
    assert abs(x.mean().item() - 0.7) < 5e-3


# ---- random_, randint -----------------------------------------------------------------------------

def test_random_from_to():
    x = on_tpu(lambda: empty(dtype=torch.int64).random_(-5, 5))
    assert x.min() == -5 and x.max() == 4
    assert abs(x.double().mean().item() + 0.5) < 0.03
    counts = torch.bincount(x + 5, minlength=10).double() / N
    assert_close(counts, torch.full((10,), 0.1, dtype=torch.float64), atol=5e-3, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.uint8], ids=str)
def test_random_to(dtype):
    x = on_tpu(lambda: empty(dtype=dtype).random_(7))
    assert x.dtype == dtype
    assert x.min() == 0 and x.max() == 6
    assert (x == x.round()).all()


@pytest.mark.parametrize("dtype,upper", [(torch.float32, 2**24), (torch.bfloat16, 2**8), (torch.int8, 127),
                                         (torch.uint8, 255), (torch.int64, 2**63 - 1), (torch.bool, 1)], ids=str)
def test_random_default_range(dtype, upper):
    x = on_tpu(lambda: empty(dtype=dtype).random_())
    assert x.min() >= 0 and x.double().max() <= upper
    if upper < 2**20:
        assert x.double().max() >= upper * 0.95  # the whole range is reached
    assert x.double().mean().item() == pytest.approx(upper / 2, rel=0.02)


def test_random_from_without_to():
    x = on_tpu(lambda: empty(dtype=torch.int8).random_(100, None))
    assert x.min() == 100 and x.max() == 127


def test_randint():
    x = on_tpu(lambda: torch.randint(3, 13, (N,), device="tpu"))
    assert x.dtype == torch.int64 and x.min() == 3 and x.max() == 12
    assert abs(x.double().mean().item() - 7.5) < 0.05


# ---- exponential_ ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_exponential(dtype):
    x = on_tpu(lambda: empty(dtype=dtype).exponential_(2.0)).double()
    assert x.min() >= 0 and torch.isfinite(x).all()
    assert abs(x.mean().item() - 0.5) < 0.01
    assert abs(x.var().item() - 0.25) < 0.02


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
def test_normal_family(dtype):
    x = on_tpu(lambda: empty(dtype=dtype).normal_(1.5, 2.0)).double()
    assert abs(x.mean().item() - 1.5) < 0.03 and abs(x.std().item() - 2.0) < 0.03
    y = on_tpu(lambda: empty(dtype=dtype).log_normal_(0.0, 0.5)).double()
    assert y.min() > 0 and abs(y.log().mean().item()) < 0.01 and abs(y.log().std().item() - 0.5) < 0.01
    # Cauchy has no moments: its median and quartiles are median -/+ sigma.
    z = on_tpu(lambda: empty(dtype=dtype).cauchy_(1.0, 2.0)).double()
    assert_close(z.quantile(torch.tensor([0.25, 0.5, 0.75], dtype=torch.float64)),
                 torch.tensor([-1.0, 1.0, 3.0], dtype=torch.float64), atol=0.05, rtol=0)


def test_normal_with_tensor_arguments():
    mean = torch.tensor([-10.0, 0.0, 10.0]).repeat(N // 3, 1).to("tpu")
    std = torch.tensor([1.0, 0.5, 0.0], device="tpu")
    x = on_tpu(lambda: torch.normal(mean, std))
    assert_close(x.mean(0), torch.tensor([-10.0, 0.0, 10.0]), atol=0.02, rtol=0)
    assert_close(x.std(0), torch.tensor([1.0, 0.5, 0.0]), atol=0.02, rtol=0)
    y = on_tpu(lambda: torch.normal(mean, 3.0))
    assert_close(y.std(0), torch.full((3,), 3.0), atol=0.05, rtol=0)
    z = on_tpu(lambda: torch.normal(2.0, std.repeat(N // 3, 1)))
    assert_close(z.mean(0), torch.full((3,), 2.0), atol=0.02, rtol=0)


def test_normal_negative_std_gives_nan_with_checks_off():
    # CPU raises after reading std, and so does the device's value check (tests/test_value_checks.py); with
    # checks off those samples are marked rather than drawn from normal(mean, |std|).
    with torchtpu.value_checks(False):
        x = torch.normal(torch.zeros(4, device="tpu"), torch.tensor([1.0, -1.0, 1.0, -2.0], device="tpu")).cpu()
    assert x.isnan().tolist() == [False, True, False, True]


def test_geometric():
    x = on_tpu(lambda: empty().geometric_(0.25)).double()
    assert x.min() >= 1 and torch.equal(x, x.round())
    assert abs(x.mean().item() - 4.0) < 0.05  # mean 1 / p


def test_multinomial_with_replacement_frequencies():
    p = torch.tensor([[0.0, 1.0, 3.0, 4.0], [5.0, 0.0, 0.0, 5.0]], device="tpu")
    x = on_tpu(lambda: torch.multinomial(p, 50_000, replacement=True))
    assert x.dtype == torch.int64 and x.shape == (2, 50_000)
    frequencies = torch.stack([torch.bincount(row, minlength=4) for row in x]).double() / 50_000
    assert_close(frequencies, torch.tensor([[0.0, 0.125, 0.375, 0.5], [0.5, 0.0, 0.0, 0.5]], dtype=torch.float64),
                 atol=0.01, rtol=0)
    assert torch.multinomial(p[0], 3).shape == (3,)


def test_multinomial_without_replacement():
    p = torch.tensor([1.0, 0.0, 2.0, 1.0, 0.0], device="tpu").repeat(4000, 1)
    draws = on_tpu(lambda: torch.multinomial(p, 3))
    # Distinct categories in each row, never a zero-probability one.
    assert torch.equal(draws.sort(dim=1).values, torch.tensor([[0, 2, 3]]).expand(4000, 3))
    # The first draw follows p: category 2 half of the time.
    assert abs((draws[:, 0] == 2).double().mean().item() - 0.5) < 0.03


# ---- dropout --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_train(p, dtype):
    x = torch.randn(N).to(dtype)
    dev = x.to("tpu")
    out = on_tpu(lambda: F.dropout(dev, p, training=True))
    assert out.dtype == dtype
    kept = out != 0
    assert abs(kept.double().mean().item() - (1 - p)) < 5e-3
    assert_close(out[kept], (x[kept].float() / (1 - p)).to(dtype))


def test_native_dropout_mask_and_backward():
    x = torch.randn(1000, 10)
    dev = x.to("tpu").requires_grad_()
    torchtpu.reset_metrics()
    out, mask = torch.native_dropout(dev.detach(), 0.25, True)
    assert mask.dtype == torch.bool
    assert_close(out.cpu(), x * mask.cpu() / 0.75)
    y = F.dropout(dev, 0.25, training=True)
    grad = torch.randn(1000, 10)
    y.backward(grad.to("tpu"))
    kept = (y != 0).cpu()
    assert_close(dev.grad.cpu(), grad * kept / 0.75)
    assert fallback_ops() == {}


def test_dropout_eval_and_edges():
    x = torch.randn(50, 8)
    dev = x.to("tpu")
    torchtpu.reset_metrics()
    assert_close(F.dropout(dev, 0.5, training=False).cpu(), x)
    out, mask = torch.native_dropout(dev, 0.5, False)
    assert_close(out.cpu(), x) and mask.cpu().all()
    assert (F.dropout(dev, 1.0, training=True).cpu() == 0).all()
    assert_close(F.dropout(dev, 0.0, training=True).cpu(), x)
    assert fallback_ops() == {}


def test_dropout_module_reproducible():
    layer = torch.nn.Dropout(0.3).to("tpu")
    x = torch.ones(4096, device="tpu")
    out = on_tpu(lambda: layer(x))
    assert ((out == 0) | ((out - 1 / 0.7).abs() < 1e-6)).all()


# ---- randperm -------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [0, 1, 2, 10, 1000])
def test_randperm_is_permutation(n):
    x = on_tpu(lambda: torch.randperm(n, device="tpu"))
    assert x.dtype == torch.int64
    assert torch.equal(x.sort().values, torch.arange(n))


@pytest.mark.parametrize("dtype", [torch.int32, torch.float32], ids=str)
def test_randperm_dtype(dtype):
    x = on_tpu(lambda: torch.randperm(100, dtype=dtype, device="tpu"))
    assert x.dtype == dtype
    assert torch.equal(x.sort().values, torch.arange(100, dtype=dtype))


def test_randperm_uniform_positions():
    # Over many permutations of 4, each value lands in each position a quarter of the time.
    torch.manual_seed(0)
    perms = torch.stack([torch.randperm(4, device="tpu").cpu() for _ in range(2000)])
    freq = torch.stack([(perms == v).double().mean(0) for v in range(4)])
    assert_close(freq, torch.full((4, 4), 0.25, dtype=torch.float64), atol=0.04, rtol=0)


def test_bad_arguments_raise():
    with pytest.raises(RuntimeError, match="from.*less than.*to"):
        torch.empty(3, device="tpu").random_(5, 2)
    with pytest.raises(RuntimeError, match=r"p to be in \[0, 1\]"):
        torch.empty(3, device="tpu").bernoulli_(1.5)
    with pytest.raises(RuntimeError, match="lambda > 0"):
        torch.empty(3, device="tpu").exponential_(-1.0)
    with pytest.raises(RuntimeError, match=r"p to be in \(0, 1\)"):
        torch.empty(3, device="tpu").geometric_(1.5)
    with pytest.raises(RuntimeError, match="std"):
        torch.empty(3, device="tpu").normal_(0.0, -1.0)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_uniform_stays_below_its_upper_bound(dtype):
    # A float32 draw near 1 rounds up to 1 in 16 bits; CPU draws 16-bit uniforms with the type's own mantissa
    # digits and CUDA turns a value equal to `to` into `from`. 2^20 samples saw hundreds of 1.0 before.
    unit = torch.rand(2**20, dtype=dtype, device="tpu").cpu()
    assert 0 <= unit.min() and unit.max() < 1
    shifted = torch.empty(2**20, dtype=dtype, device="tpu").uniform_(2, 3).cpu()
    assert 2 <= shifted.min() and shifted.max() < 3
    assert abs(unit.float().mean().item() - 0.5) < 0.01


@pytest.mark.parametrize("sample", [
    lambda t, g: t.exponential_(generator=g), lambda t, g: t.geometric_(0.3, generator=g),
    lambda t, g: t.log_normal_(generator=g), lambda t, g: t.cauchy_(generator=g)],
    ids=["exponential_", "geometric_", "log_normal_", "cauchy_"])
def test_samplers_take_an_explicit_tpu_generator(sample, metrics):
    # Their meta kernels refuse a tpu generator, which sent them to the CPU fallback, where it failed.
    draws = []
    for _ in range(2):
        generator = torch.Generator(device="tpu")
        generator.manual_seed(5)
        draws.append(sample(torch.empty(1000, device="tpu"), generator).cpu())
    assert torch.equal(draws[0], draws[1])
    assert fallback_ops() == {}


@pytest.mark.filterwarnings("ignore:The operator")
def test_a_tpu_generator_drives_ops_that_run_on_the_cpu():
    """poisson and binomial take the CPU fallback; a tpu generator seeds them, reproducibly."""
    g = torch.Generator(device="tpu")
    rates = torch.full((N,), 4.0, device="tpu")
    g.manual_seed(3)
    first = torch.poisson(rates, generator=g).cpu()
    second = torch.poisson(rates, generator=g).cpu()
    g.manual_seed(3)
    assert torch.equal(torch.poisson(rates, generator=g).cpu(), first)
    assert not torch.equal(first, second)
    assert abs(first.mean().item() - 4.0) < 0.05 and abs(first.var().item() - 4.0) < 0.1
    counts = torch.binomial(torch.full((4,), 10.0, device="tpu"), torch.full((4,), 0.5, device="tpu"), generator=g)
    assert counts.device.type == "tpu" and ((counts >= 0) & (counts <= 10)).all().item()


def test_a_tpu_generator_given_to_a_cpu_op_raises_a_clear_error():
    for sample in (lambda g: torch.randn(3, generator=g), lambda g: torch.empty(3).uniform_(generator=g)):
        with pytest.raises(RuntimeError, match="Expected a 'cpu' device type for generator but found 'tpu'"):
            sample(torch.Generator(device="tpu"))
