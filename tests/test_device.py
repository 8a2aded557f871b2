"""The ``torch.tpu`` device module, ``torch.accelerator``, the tensor/module conveniences and pinned memory."""
from __future__ import annotations

import gc
import subprocess
import time

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from helpers import run_python

TPU = torch.device("tpu", 0)


# ---- helpers ------------------------------------------------------------------------------------------

def to_tpu_and_back(cpu: torch.Tensor) -> torch.Tensor:
    """Round-trips ``cpu`` through the device and checks the result is on tpu on the way."""
    on_device = cpu.to("tpu")
    assert on_device.device.type == "tpu"
    return on_device.cpu()


def assert_on_tpu_equal(actual: torch.Tensor, expected_cpu: torch.Tensor, index: int = 0) -> None:
    assert actual.device == torch.device("tpu", index)
    torch.testing.assert_close(actual.cpu(), expected_cpu)



def assert_subprocess_ok(result: subprocess.CompletedProcess) -> None:
    assert result.returncode == 0, f"exit {result.returncode}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"


def random_draws(seed_fn, n: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    """Calls ``seed_fn`` then draws torch.rand and torch.randn on tpu; returns host copies."""
    seed_fn()
    return torch.rand(n, device="tpu").cpu(), torch.randn(n, device="tpu").cpu()


def live_bytes_of(fn) -> int:
    """memory_allocated() delta while the tensor built by ``fn`` is alive."""
    gc.collect()
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    tensor = fn()
    torch.tpu.synchronize()
    grown = torch.tpu.memory_allocated() - before
    del tensor
    return grown


# ---- availability and current device -------------------------------------------------------------------

def test_is_available_and_device_count():
    assert torch.tpu.is_available() is True
    assert isinstance(torch.tpu.device_count(), int)
    assert torch.tpu.device_count() >= 1
    assert torch.tpu.is_initialized() is True  # device_count() loads the plugin (is_available() does not)


def test_current_and_set_device():
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(0)
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device("tpu:0")
    assert torch.tpu.current_device() == 0
    torch.tpu.set_device(torch.device("tpu", 0))
    assert torch.tpu.current_device() == 0
    assert torch.ones(1, device="tpu").device == TPU


def test_device_context_manager():
    with torch.tpu.device(0):
        assert torch.tpu.current_device() == 0
        assert torch.zeros(2, device="tpu").device == TPU
    with torch.tpu.device("tpu:0"):
        assert torch.tpu.current_device() == 0
    assert torch.tpu.current_device() == 0


def test_device_context_manager_restores_on_exception():
    with pytest.raises(ValueError):
        with torch.tpu.device(0):
            raise ValueError("boom")
    assert torch.tpu.current_device() == 0


def test_synchronize():
    x = torch.arange(16.0, device="tpu") * 3
    torch.tpu.synchronize()
    torch.tpu.synchronize(0)
    torch.tpu.synchronize("tpu:0")
    torch.tpu.synchronize(torch.device("tpu", 0))
    torch.testing.assert_close(x.cpu(), torch.arange(16.0) * 3)


# ---- events and streams -------------------------------------------------------------------------------

def queue_heavy_work() -> torch.Tensor:
    """About half a second of products on this host, launched asynchronously (back-pressure aside)."""
    x = torch.randn(1024, 1024, device="tpu")
    for _ in range(20):
        x = x @ x * 1e-3
    return x


def test_event_is_pending_until_the_work_before_it_finishes():
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    assert end.query()  # never recorded
    start.record()
    result = queue_heavy_work()  # kept: in fused mode work whose results are dropped never runs
    end.record()
    assert not end.query()
    with pytest.raises(RuntimeError, match="must be completed"):
        start.elapsed_time(end)
    end.synchronize()
    assert end.query() and start.query()
    assert torch.tpu.current_stream().query()
    del result


def test_elapsed_time_measures_the_device_work_between_events():
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    wall = time.perf_counter()
    start.record()
    queue_heavy_work()
    end.record()
    end.synchronize()
    wall_ms = (time.perf_counter() - wall) * 1e3
    elapsed = start.elapsed_time(end)
    assert 0 < elapsed <= wall_ms + 1.0
    # An event recorded when nothing is queued is reached at once: two in a row are about 0 ms apart.
    again = torch.tpu.Event(enable_timing=True)
    again.record()
    again.synchronize()
    assert 0 <= end.elapsed_time(again) < 50
    # A torch.Event of the tpu device works as the end event too (torch.Event's own elapsed_time takes
    # only a torch.Event itself as its end event, not a torch.tpu.Event).
    plain = torch.Event(device="tpu", enable_timing=True)
    plain.record()
    plain.synchronize()
    assert 0 <= again.elapsed_time(plain) < 50
    assert start.elapsed_time(plain) >= elapsed


def test_elapsed_time_refuses_events_of_two_devices():
    result = run_python("""
        import torch, torchtpu
        start = torch.tpu.Event(enable_timing=True)
        start.record()
        with torch.tpu.device(1):
            end = torch.tpu.Event(enable_timing=True)
            end.record()
        end.synchronize()
        try:
            start.elapsed_time(end)
        except RuntimeError as e:
            assert "different devices, tpu:0 and tpu:1" in str(e), e
            print("OK")
    """, TORCHTPU_NUM_DEVICES="2")
    assert result.stdout.strip().endswith("OK"), result.stderr[-2000:]


def test_elapsed_time_needs_timing_events():
    start, end = torch.tpu.Event(), torch.tpu.Event(enable_timing=True)
    start.record()
    end.record()
    end.synchronize()
    with pytest.raises(ValueError, match="enable_timing"):
        start.elapsed_time(end)
    with pytest.raises(TypeError, match="torch.Event"):
        end.elapsed_time("not an event")


def test_events_in_fused_mode_cover_the_recorded_ops():
    import torchtpu
    with torchtpu.eager_mode("fused"):
        before = torchtpu.metrics()["fused"]["flushes"].get("event", 0)
        start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
        start.record()
        queue_heavy_work()
        end.record()  # runs the recorded trace first
        assert torchtpu.metrics()["fused"]["flushes"].get("event", 0) == before + 1
        end.synchronize()
        assert start.elapsed_time(end) > 0


def test_stream_and_accelerator_synchronize_wait_for_everything_queued():
    import torchtpu
    stream = torch.tpu.current_stream()
    result = queue_heavy_work()
    assert not stream.query()
    stream.synchronize()
    assert stream.query()
    with torchtpu.eager_mode("fused"):
        before = torchtpu.metrics()["fused"]["flushes"].get("synchronize", 0)
        result = result + 1  # recorded, not yet run
        torch.accelerator.synchronize()
        assert torchtpu.metrics()["fused"]["flushes"].get("synchronize", 0) == before + 1
        assert torch.tpu.current_stream().query()
    event = torch.tpu.Event()
    event.record()
    event.wait(torch.tpu.Stream())  # every stream is the one queue: nothing to order
    torch.tpu.Stream().wait_event(event)


# ---- random -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seeder", [torch.tpu.manual_seed, torch.tpu.manual_seed_all, torch.manual_seed],
                         ids=["tpu.manual_seed", "tpu.manual_seed_all", "torch.manual_seed"])
def test_seed_reproduces_rand_and_randn(seeder):
    rand_a, randn_a = random_draws(lambda: seeder(1234))
    rand_b, randn_b = random_draws(lambda: seeder(1234))
    torch.testing.assert_close(rand_a, rand_b, rtol=0, atol=0)
    torch.testing.assert_close(randn_a, randn_b, rtol=0, atol=0)
    assert ((rand_a >= 0) & (rand_a < 1)).all()
    rand_c, randn_c = random_draws(lambda: seeder(4321))
    assert not torch.equal(rand_a, rand_c)
    assert not torch.equal(randn_a, randn_c)


def test_torch_manual_seed_seeds_tpu_generator():
    torch.manual_seed(77)
    assert torch.tpu.initial_seed() == 77


def test_initial_seed_and_seed():
    torch.tpu.manual_seed(42)
    assert torch.tpu.initial_seed() == 42
    torch.tpu.seed()
    fresh = torch.tpu.initial_seed()
    assert isinstance(fresh, int)
    # Reseeding with the fresh value reproduces the stream seed() started.
    torch.tpu.manual_seed(fresh)
    first = torch.rand(4, device="tpu").cpu()
    torch.tpu.manual_seed(fresh)
    torch.testing.assert_close(torch.rand(4, device="tpu").cpu(), first, rtol=0, atol=0)


def test_get_and_set_rng_state_restores_sequence():
    torch.tpu.manual_seed(9)
    torch.rand(3, device="tpu")  # advance a little first
    state = torch.tpu.get_rng_state()
    assert isinstance(state, torch.Tensor)
    assert state.dtype == torch.uint8
    assert state.device.type == "cpu"
    expected = [torch.rand(5, device="tpu").cpu(), torch.randn(5, device="tpu").cpu()]
    torch.tpu.set_rng_state(state)
    actual = [torch.rand(5, device="tpu").cpu(), torch.randn(5, device="tpu").cpu()]
    for a, e in zip(actual, expected):
        torch.testing.assert_close(a, e, rtol=0, atol=0)
    # get_rng_state returns a snapshot: later draws do not change it.
    snapshot = state.clone()
    torch.rand(5, device="tpu")
    assert torch.equal(state, snapshot)
    assert not torch.equal(torch.tpu.get_rng_state(), snapshot)


@pytest.mark.parametrize("state", [lambda s: s.to("tpu"), lambda s: s.float()], ids=["on_tpu", "float"])
@pytest.mark.parametrize("set_state", [torch.tpu.set_rng_state, lambda s: torch.Generator("tpu").set_state(s)],
                         ids=["set_rng_state", "generator"])
def test_an_rng_state_of_another_device_or_dtype_raises_cpus_type_error(state, set_state):
    """A checkpoint loaded with map_location="tpu" holds its RNG state on tpu: CPU's TypeError, no crash."""
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):
        set_state(state(torch.tpu.get_rng_state()))
    with pytest.raises(RuntimeError, match="16 contiguous bytes"):
        set_state(torch.zeros(8, dtype=torch.uint8))
    assert torch.rand(2, device="tpu").shape == (2,)


def test_rng_state_inside_a_torch_func_transform():
    """Activation checkpointing saves the tpu RNG state; inside grad() the state is still a plain CPU tensor,
    so grad of a checkpointed function gives CPU's message about saved tensor hooks."""
    from torch.func import grad
    from torch.utils.checkpoint import checkpoint

    x = torch.randn(3, device="tpu")
    torch.testing.assert_close(grad(lambda v: (torch.tpu.get_rng_state(), v.sum())[1])(x).cpu(), torch.ones(3))
    with pytest.raises(RuntimeError, match="saved tensor hooks"):
        grad(lambda v: checkpoint(torch.sin, v, use_reentrant=False).sum())(x)


def test_get_rng_state_all_roundtrip():
    states = torch.tpu.get_rng_state_all()
    assert len(states) == torch.tpu.device_count()
    expected = torch.rand(6, device="tpu").cpu()
    torch.tpu.set_rng_state_all(states)
    torch.testing.assert_close(torch.rand(6, device="tpu").cpu(), expected, rtol=0, atol=0)


def test_get_amp_supported_dtype():
    dtypes = torch.tpu.get_amp_supported_dtype()
    assert torch.bfloat16 in dtypes
    assert all(isinstance(d, torch.dtype) for d in dtypes)


# ---- memory -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype,numel", [(torch.float32, 1000), (torch.int64, 333), (torch.bfloat16, 2048)])
def test_memory_allocated_tracks_written_tensor(dtype, numel):
    gc.collect()
    torch.tpu.synchronize()
    before = torch.tpu.memory_allocated()
    t = torch.ones(numel, dtype=dtype, device="tpu")
    torch.tpu.synchronize()
    expected = numel * t.element_size()
    assert torch.tpu.memory_allocated() - before == expected
    assert torch.tpu.memory_allocated(0) - before == expected
    assert torch.tpu.memory_allocated("tpu:0") - before == expected
    del t
    gc.collect()
    torch.tpu.synchronize()
    assert torch.tpu.memory_allocated() == before


def test_memory_allocated_of_cpu_copy():
    assert live_bytes_of(lambda: torch.arange(500, dtype=torch.float32).to("tpu")) == 500 * 4


def test_max_memory_allocated_and_reset_peak():
    gc.collect()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_allocated() == base
    big = torch.ones(25_000, device="tpu")
    torch.tpu.synchronize()
    peak = torch.tpu.max_memory_allocated()
    assert peak >= base + 100_000
    del big
    gc.collect()
    assert torch.tpu.memory_allocated() == base
    assert torch.tpu.max_memory_allocated() == peak  # the peak survives the free
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == torch.tpu.memory_allocated() == base


def test_memory_stats_dict():
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert stats["allocated_bytes.all.peak"] == torch.tpu.max_memory_allocated()


def test_mem_get_info():
    assert torch.accelerator.get_memory_info() == torch.accelerator.get_memory_info(0)
    info = torch.tpu.mem_get_info()
    assert isinstance(info, tuple) and len(info) == 2
    free, total = info
    assert isinstance(free, int) and isinstance(total, int)
    assert 0 < free <= total
    assert torch.tpu.mem_get_info(0)[1] == total
    assert torch.tpu.mem_get_info("tpu:0")[1] == total


def test_empty_cache():
    t = torch.ones(10, device="tpu")
    assert torch.tpu.empty_cache() is None
    torch.testing.assert_close(t.cpu(), torch.ones(10))


# ---- torch.accelerator --------------------------------------------------------------------------------

def test_torch_accelerator():
    assert torch.accelerator.is_available()
    acc = torch.accelerator.current_accelerator()
    assert acc == torch.device("tpu")
    assert acc.type == "tpu"
    assert torch.accelerator.device_count() == torch.tpu.device_count()
    assert torch.accelerator.current_device_index() == 0
    x = torch.arange(8.0, device="tpu") + 1
    torch.accelerator.synchronize()
    torch.accelerator.synchronize(0)
    torch.testing.assert_close(x.cpu(), torch.arange(8.0) + 1)


def test_torch_accelerator_set_device_index():
    torch.accelerator.set_device_index(0)
    assert torch.accelerator.current_device_index() == 0
    assert torch.tpu.current_device() == 0


# ---- Tensor.tpu / Module.tpu / is_tpu -----------------------------------------------------------------

def test_tensor_tpu_and_is_tpu():
    cpu = torch.arange(6.0).view(2, 3)
    assert cpu.is_tpu is False
    t = cpu.tpu()
    assert t.is_tpu is True
    assert_on_tpu_equal(t, cpu)
    assert_on_tpu_equal(cpu.tpu(0), cpu)
    assert t.tpu() is t  # already there: no copy
    torch.testing.assert_close(to_tpu_and_back(cpu), cpu)


def test_module_tpu():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU(), torch.nn.Linear(3, 2))
    model.load_state_dict(ref.state_dict())
    returned = model.tpu()
    assert returned is model
    for p in model.parameters():
        assert p.is_tpu
        assert p.device == TPU
    x = torch.randn(5, 4)
    torch.testing.assert_close(model(x.tpu()).cpu(), ref(x))


# ---- pinned memory ------------------------------------------------------------------------------------

def test_pin_memory():
    cpu = torch.arange(12.0).view(3, 4)
    assert not cpu.is_pinned()
    pinned = cpu.pin_memory()
    assert pinned.is_pinned()
    assert pinned.device.type == "cpu"
    torch.testing.assert_close(pinned, cpu)
    for non_blocking in (False, True):
        t = pinned.to("tpu", non_blocking=non_blocking)
        assert_on_tpu_equal(t, cpu)


def test_dataloader_pin_memory():
    features = torch.arange(40.0).view(10, 4)
    labels = torch.arange(10)
    loader = DataLoader(TensorDataset(features, labels), batch_size=3, pin_memory=True)
    seen = 0
    for xb, yb in loader:
        assert xb.is_pinned() and yb.is_pinned()
        x_tpu = xb.to("tpu", non_blocking=True)
        y_tpu = yb.to("tpu", non_blocking=True)
        assert_on_tpu_equal(x_tpu, features[seen:seen + len(xb)])
        assert_on_tpu_equal(y_tpu, labels[seen:seen + len(yb)])
        torch.testing.assert_close((x_tpu * 2 + y_tpu[:, None]).cpu(), xb * 2 + yb[:, None])
        seen += len(xb)
    assert seen == 10


# ---- several devices ----------------------------------------------------------------------------------

def test_two_devices_in_subprocess():
    result = run_python("""
        import torch, torchtpu
        assert torch.tpu.device_count() == 2, torch.tpu.device_count()
        assert torch.accelerator.device_count() == 2

        a = torch.arange(6.0, device="tpu:1").view(2, 3)
        assert a.device == torch.device("tpu", 1), a.device
        b = a * 2 + 1
        assert b.device == torch.device("tpu", 1), b.device
        torch.testing.assert_close(b.cpu(), torch.arange(6.0).view(2, 3) * 2 + 1)
        torch.testing.assert_close((a @ a.t()).cpu(), torch.arange(6.0).view(2, 3) @ torch.arange(6.0).view(2, 3).t())

        on0 = b.to("tpu:0")
        assert on0.device == torch.device("tpu", 0), on0.device
        torch.testing.assert_close(on0.cpu(), b.cpu())
        back = (on0 - 1).to("tpu:1")
        assert back.device == torch.device("tpu", 1), back.device
        torch.testing.assert_close(back.cpu(), torch.arange(6.0).view(2, 3) * 2)

        torch.tpu.set_device(1)
        assert torch.tpu.current_device() == 1
        assert torch.ones(1, device="tpu").device == torch.device("tpu", 1)
        with torch.tpu.device(0):
            assert torch.tpu.current_device() == 0
            assert torch.ones(1, device="tpu").device == torch.device("tpu", 0)
        assert torch.tpu.current_device() == 1
        torch.tpu.synchronize(1)

        x1 = torch.ones(250, device="tpu:1")
        torch.tpu.synchronize(1)
        assert torch.tpu.memory_allocated(1) >= 1000
        print("OK")
        """, TORCHTPU_NUM_DEVICES="2")
    assert_subprocess_ok(result)
    assert result.stdout.strip().endswith("OK")


def test_device_name_properties_and_capability():
    assert torch.tpu.get_device_name() == torch.tpu.get_device_name(0) != ""
    properties = torch.tpu.get_device_properties(0)
    assert properties.name == torch.tpu.get_device_name() and properties.total_memory > 0
    dtypes = torch.accelerator.get_device_capability()["supported_dtypes"]
    assert dtypes == torch.tpu.get_device_capability()["supported_dtypes"]
    assert {torch.float32, torch.bfloat16, torch.int64, torch.bool, torch.float8_e4m3fn} <= dtypes
    assert torch.float8_e8m0fnu not in dtypes


def test_accelerator_memory_functions_report_the_device():
    torch.accelerator.reset_peak_memory_stats()
    before = torch.accelerator.memory_allocated()
    x = torch.randn(1000, device="tpu") * 2
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated() >= before + 4000
    assert torch.accelerator.max_memory_allocated() >= torch.accelerator.memory_allocated()
    assert torch.accelerator.memory_stats()["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    torch.accelerator.empty_cache()
    del x


@pytest.mark.parametrize("call", [
    lambda: torch.tpu.memory_allocated(7), lambda: torch.tpu.memory_stats(7), lambda: torch.tpu.synchronize(7),
    lambda: torch.tpu.get_device_name(7), lambda: torch.accelerator.memory_allocated(7)])
def test_a_device_that_does_not_exist_is_an_error(call):
    with pytest.raises(RuntimeError, match="Invalid device index tpu:7"):
        call()


def test_stream_context_makes_its_device_current():
    result = run_python("""
        import torch, torchtpu
        stream = torch.tpu.Stream(device=1)
        with torch.tpu.stream(stream):
            assert torch.tpu.current_device() == 1 and torch.tpu.current_stream().device_index == 1
            assert torch.ones(2, device="tpu").device == torch.device("tpu", 1)
        assert torch.tpu.current_device() == 0
        torch.tpu.set_stream(stream)
        assert torch.tpu.current_device() == 1
        with torch.tpu.device(-1):
            assert torch.tpu.current_device() == 1
        print("ok")
        """, TORCHTPU_NUM_DEVICES="2")
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_a_stream_without_an_index_is_on_the_current_device():
    result = run_python("""
        import torch, torchtpu
        torch.tpu.set_device(1)
        stream = torch.Stream(device="tpu")
        assert stream.device_index == 1, stream
        assert stream.query()
        event = torch.Event(device="tpu")
        event.record(stream)
        event.synchronize()
        stream.synchronize()
        torch.tpu.set_stream(stream)
        with stream:
            assert torch.ones(2, device="tpu").device == torch.device("tpu", 1)
        print("ok")
        """, TORCHTPU_NUM_DEVICES="2")
    assert result.returncode == 0 and result.stdout.strip().endswith("ok"), result.stderr[-3000:]


def test_cuda_names_a_library_may_call():
    torch.tpu.set_device(-1)  # a negative index changes nothing, as on CUDA
    assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(torch.ones(1, device="tpu")):
        assert torch.tpu.current_device() == 0
    with torch.tpu.device_of(torch.ones(1)), torch.tpu.StreamContext(torch.tpu.current_stream()):
        assert torch.tpu.current_device() == 0
    generators = torch.tpu.default_generators
    assert len(generators) == torch.tpu.device_count() and generators[0].device == torch.device("tpu", 0)
    assert torch.tpu.get_per_process_memory_fraction() == 1.0
    torch.tpu.set_per_process_memory_fraction(0.5)
    try:
        assert torch.tpu.get_per_process_memory_fraction() == pytest.approx(0.5, abs=0.01)
    finally:
        torch.tpu.set_per_process_memory_fraction(1.0)
    nested = torch.tpu.memory_stats_as_nested_dict()
    assert nested["allocated_bytes"]["all"]["current"] == torch.tpu.memory_allocated()
    assert torch.tpu.OutOfMemoryError is torch.OutOfMemoryError


def test_is_set_to_compares_storage_and_geometry():
    t = torch.ones(3, device="tpu")
    assert t.is_set_to(t) and torch.empty(0, device="tpu").set_(t).is_set_to(t)
    assert not t.is_set_to(t.clone()) and not t[1:].is_set_to(t)


def test_dlpack_export_of_a_tpu_tensor_is_refused_and_a_raw_pointer_never_crashes():
    x = torch.arange(4.0, device="tpu")
    for export in (torch.utils.dlpack.to_dlpack, torch.to_dlpack, lambda t: t.__dlpack__()):
        with pytest.raises(BufferError, match="DLPack"):
            export(x)
    # Past the refusal (torch's own export), a tensor over a tpu data pointer raises at its first use.
    wrapped = torch.utils.dlpack.from_dlpack(torch._C._to_dlpack(x))
    with pytest.raises(RuntimeError, match="raw tpu data pointer"):
        wrapped + 1
    torch.testing.assert_close((x + 1).cpu(), torch.arange(4.0) + 1)
