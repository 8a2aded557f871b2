"""Fused eager mode: ops are recorded and run as one program at sync points. Results equal strict mode's
and CPU's; a repeated training step runs one cached program per step with nothing compiled after
warm-up; every flush is counted with its reason."""
import json
import os
import warnings

import pytest
import torch
from torch.testing import assert_close

import torchtpu
from helpers import fused_rounds_in_threads, run_python
from torchtpu.metrics import fallback_ops


def fused():
    return torchtpu.metrics()["fused"]


def test_mode_switches_and_restores():
    default = os.environ.get("TORCHTPU_EAGER_MODE", "strict")
    assert torchtpu.current_eager_mode() == default
    with torchtpu.eager_mode("fused"):
        assert torchtpu.current_eager_mode() == "fused"
        with torchtpu.eager_mode("debug"):
            assert torchtpu.current_eager_mode() == "debug"
        assert torchtpu.current_eager_mode() == "fused"
    assert torchtpu.current_eager_mode() == default
    with pytest.raises(ValueError, match="unknown eager mode"):
        torchtpu.eager_mode("lazy")


def test_ops_views_and_in_place_writes_match_cpu(metrics):
    a_cpu = torch.arange(12.0).reshape(3, 4)
    with torchtpu.eager_mode("fused"):
        a = a_cpu.to("tpu")
        x = a * 2 + 1
        y = x[1:3]
        y.mul_(-1)
        z = torch.softmax(x, dim=1).sum(0)
        w = a.clone()
        w[:, 0] = 7.0
        assert fused()["ops_recorded"] > 0 and fused()["programs_run"] == 0  # nothing ran yet
        results = [t.cpu() for t in (x, y, z, w)]
    x_cpu = a_cpu * 2 + 1
    x_cpu[1:3].mul_(-1)
    w_cpu = a_cpu.clone()
    w_cpu[:, 0] = 7.0
    expected = [x_cpu, x_cpu[1:3], torch.softmax(x_cpu, dim=1).sum(0), w_cpu]
    for got, want in zip(results, expected):
        assert_close(got, want)
    assert fused()["flushes"].get("buffer needed", 0) >= 1
    assert fallback_ops() == {}


def test_printing_item_and_synchronize_flush(metrics):
    with torchtpu.eager_mode("fused"):
        x = torch.ones(3, device="tpu") * 4
        assert "4." in str(x)
        assert (x.sum() + 1).item() == 13.0
        y = x - 1
        torch.tpu.synchronize()
        assert fused()["flushes"].get("synchronize", 0) == 1
        assert y.cpu().tolist() == [3.0, 3.0, 3.0]


def train(mode, steps):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Dropout(0.1),
                                torch.nn.Linear(32, 4)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    x, y = torch.randn(16, 8).to("tpu"), torch.randint(0, 4, (16,)).to("tpu")
    losses, per_step = [], []
    torch.tpu.manual_seed(1)
    with torchtpu.eager_mode(mode):
        for _ in range(steps):
            before = (fused()["compiles"], fused()["programs_run"],
                      sum(op["compiles"] for op in torchtpu.metrics()["ops"].values()), fused()["op_by_op_runs"])
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            losses.append(loss.detach())
            after = (fused()["compiles"], fused()["programs_run"],
                     sum(op["compiles"] for op in torchtpu.metrics()["ops"].values()), fused()["op_by_op_runs"])
            per_step.append(tuple(b - a for a, b in zip(before, after)))
    return [l.item() for l in losses], [p.detach().cpu() for p in model.parameters()], per_step


def test_a_training_loop_matches_strict_and_reaches_one_program_per_step(metrics):
    strict_losses, strict_params, _ = train("strict", 6)
    fused_losses, fused_params, per_step = train("fused", 6)
    assert_close(torch.tensor(fused_losses), torch.tensor(strict_losses), rtol=1e-5, atol=1e-6)
    for f, s in zip(fused_params, strict_params):
        assert_close(f, s, rtol=1e-5, atol=1e-6)
    # Steps 1 and 2 are new trace shapes (the optimizer's state starts at step 1) and run op by op; the
    # step's program compiles when its shape comes again (TORCHTPU_FUSE_AFTER=2), then one fused program
    # runs per step (flushed by the optimizer step) and nothing compiles.
    assert [(step[0], step[3]) for step in per_step[:3]] == [(0, 1), (0, 1), (1, 0)], per_step
    for fused_compiles, programs_run, op_compiles, op_by_op_runs in per_step[3:]:
        assert (fused_compiles, programs_run, op_compiles, op_by_op_runs) == (0, 1, 0, 0), per_step
    assert fused()["flushes"].get("optimizer step", 0) >= 6


def test_scalars_that_happen_to_be_equal_keep_the_program(metrics):
    # A cosine schedule reaching lr 0 once made AdamW's decay factor equal another scalar of the step; the
    # trace then shared one buffer for both, changed its wiring and compiled a new program mid-training.
    x = torch.randn(16)
    t = x.to("tpu")
    with torchtpu.eager_mode("fused"):
        for step, (low, high) in enumerate(((-0.5, 2.0), (-0.25, 3.0), (0.5, 0.5), (2.5, 2.5), (-1.5, 2.5))):
            scale = high + 1  # never 1, add's default (compiled in, a program of its own)
            got = torch.add(t.clamp(min=low, max=high), t, alpha=scale).sum().item()
            assert got == pytest.approx(torch.add(x.clamp(min=low, max=high), x, alpha=scale).sum().item(), rel=1e-5)
            if step == 1:  # the step's shape compiles at its second sighting
                compiled = (metrics()["fused"]["compiles"], metrics()["fused"]["op_by_op_runs"])
    assert (metrics()["fused"]["compiles"], metrics()["fused"]["op_by_op_runs"]) == compiled


@pytest.mark.parametrize("sighting", ["first (op by op)", "second (compiled)"])
def test_peak_memory_does_not_hold_dead_intermediates(sighting):
    # A chain of temporaries: only the last value is live at the flush, so only it is a program result; run
    # op by op, each temporary goes as soon as the next op has read it.
    rows = 256 if sighting.startswith("first") else 255  # a shape no other test has run

    def chain():
        x = torch.ones(rows, 256, device="tpu")
        torch.tpu.reset_peak_memory_stats()  # runs the ones first
        base, compiles = torch.tpu.memory_allocated(), fused()["compiles"]
        for _ in range(20):
            x = x * 1.01 + 0.5
        torch.tpu.synchronize()
        return x, torch.tpu.max_memory_allocated() - base, fused()["compiles"] - compiles

    with torchtpu.eager_mode("fused"):
        x, grown, compiled = chain()
        if sighting.startswith("second"):
            x, grown, compiled = chain()
        assert compiled == (1 if sighting.startswith("second") else 0)
    assert grown <= 2 * rows * 256 * 4  # the result (and at most one more buffer), not 20 of them
    expected = torch.ones(rows, 256)
    for _ in range(20):
        expected = expected * 1.01 + 0.5
    assert_close(x.cpu(), expected)


def test_in_place_updates_donate_their_buffer_in_fused_mode(metrics):
    x = torch.zeros(1 << 20, device="tpu")  # 4 MiB
    torch.tpu.synchronize()
    live = torch.tpu.memory_allocated()
    with torchtpu.eager_mode("fused"):
        for sighting in (1, 2):  # op by op, then compiled: each op, then the program, takes x's buffer over
            torch.tpu.reset_peak_memory_stats()
            runs, compiles = fused()["programs_run"], fused()["compiles"]
            for _ in range(5):
                x.add_(1.0)
                x.mul_(2.0)
            torch.tpu.synchronize()
            # x's old buffer becomes the result, so no second 4 MiB is ever live.
            assert torch.tpu.max_memory_allocated() - live < (1 << 20), sighting
            assert (fused()["programs_run"] - runs, fused()["compiles"] - compiles) == (1, sighting - 1)
    assert_close(x[:3].cpu(), torch.full((3,), 62.0 * 32 + 62.0))


def test_a_new_trace_shape_runs_op_by_op_until_it_repeats(metrics):
    """One-off work (a notebook cell, a test) pays no fused compile: a trace shape seen for the first time runs
    its ops' programs, which recording compiled already, and its fused program compiles at the second sight
    (TORCHTPU_FUSE_AFTER=2). Every sighting gives CPU's values."""
    x_cpu = torch.randn(8, 16)
    x = x_cpu.to("tpu")
    seen = []
    with torchtpu.eager_mode("fused"):
        for n in (4, 4, 4, 6, 6):  # two shapes
            y = torch.softmax(x[:n] * 2, dim=1).sum(0)
            x.mul_(1.0)
            assert_close(y.cpu(), torch.softmax(x_cpu[:n] * 2, dim=1).sum(0))
            seen.append((fused()["op_by_op_runs"], fused()["compiles"]))
    assert [(a - seen[0][0], c - seen[0][1]) for a, c in seen] == [(0, 0), (0, 1), (0, 1), (1, 1), (1, 2)], seen
    assert_close(x.cpu(), x_cpu)


def test_memory_figures_count_the_tensors_recorded_so_far(metrics):
    """A tensor the caller holds counts in memory_allocated at once, as on CUDA: the figures run the calling
    thread's recorded ops first, so its results hold their buffers."""
    with torchtpu.eager_mode("fused"):
        before = torch.tpu.memory_allocated()
        x = torch.randn(1000, device="tpu") * 2
        assert torch.tpu.memory_allocated() >= before + 4000
        assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()
        torch.tpu.reset_peak_memory_stats()
        y = x + 1  # recorded after the reset: its buffer is in the new peak
        assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated() >= before + 8000
        assert fused()["flushes"].get("memory statistics", 0) == 2  # an empty trace is no flush
    assert_close(y.cpu(), x.cpu() + 1)


def test_a_fused_program_that_fails_raises_and_the_process_goes_on():
    with torchtpu.eager_mode("fused"):
        a = torch.ones(4, device="tpu")
        b = (a * 3).sum()
        assert b.item() == 12.0
        with pytest.raises(RuntimeError):
            torch.ones(2, 3, device="tpu") @ torch.ones(2, 3, device="tpu")  # shapes checked when recorded
        assert (a + 1).cpu().tolist() == [2.0] * 4


def test_compile_log_names_new_trace_shapes_and_fused_compiles():
    done = run_python("""
        import torch, torchtpu
        torchtpu.eager_mode("fused")
        x = torch.arange(6.0, device="tpu")
        torch.tpu.synchronize()
        for _ in range(3):
            (x * 2).sum().item()
        """, TORCHTPU_LOG_COMPILES="1", TORCHTPU_DISK_CACHE="0")
    assert done.returncode == 0, done.stderr
    logged = [line for line in done.stderr.splitlines() if "fused trace of 2 ops" in line]  # not the arange's
    assert logged == [
        "[torchtpu] new fused trace of 2 ops (aten::mul.Tensor ... aten::sum): runs op by op until it comes again",
        "[torchtpu] compile fused trace of 2 ops (aten::mul.Tensor ... aten::sum)",
    ], done.stderr


def test_traces_run_op_by_op_on_request():
    # The fallback when a composed program does not compile, forced here: same results as CPU.
    done = run_python("""
        import json, torch, torchtpu
        with torchtpu.eager_mode("fused"):
            x = torch.arange(6.0, device="tpu").reshape(2, 3)
            x.mul_(2)
            y = torch.softmax(x, 1).sum(0) + x[0]
            print(json.dumps([y.cpu().tolist(), x.cpu().tolist()]))
        """, TORCHTPU_FUSED_OP_BY_OP="1")
    assert done.returncode == 0, done.stderr
    y_tpu, x_tpu = json.loads(done.stdout.strip().splitlines()[-1])
    x = torch.arange(6.0).reshape(2, 3) * 2
    assert_close(torch.tensor(x_tpu), x)
    assert_close(torch.tensor(y_tpu), torch.softmax(x, 1).sum(0) + x[0])


def thread_steps(rounds, steps):
    """Two threads, each training its own small model for `steps` steps per round in fused mode, at the same
    time; returns the fused compiles of each round, each thread's losses and the models."""
    losses, models = {0: [], 1: []}, []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1)).to("tpu")
        models.append((model, torch.optim.SGD(model.parameters(), lr=0.1), torch.randn(32, 8).to("tpu")))

    def work(i):
        model, opt, x = models[i]
        for _ in range(steps):
            opt.zero_grad()
            loss = model(x).square().mean()
            loss.backward()  # on autograd's device thread, recorded into this thread's trace
            opt.step()
            losses[i].append(loss.item())

    return fused_rounds_in_threads(work, rounds), losses, models


def test_threads_record_their_own_traces_and_settle(metrics):
    # Each thread records its own trace (a backward pass into the trace of the thread that started it), so
    # threads working at once repeat their steps' programs instead of interleaving into new ones.
    compiles, losses, models = thread_steps(rounds=3, steps=6)
    assert compiles[1:] == [0, 0], compiles
    for i, (_, _, x) in enumerate(models):
        torch.manual_seed(i)
        reference = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
        opt = torch.optim.SGD(reference.parameters(), lr=0.1)
        expected = []
        for _ in range(18):
            opt.zero_grad()
            loss = reference(x.cpu()).square().mean()
            loss.backward()
            opt.step()
            expected.append(loss.item())
        assert losses[i] == pytest.approx(expected, rel=1e-5)
    # No thread needed a value of another's trace.
    assert fused()["flushes"].get("value of another thread's trace", 0) == 0


def test_a_value_pending_in_another_threads_trace_is_computed_first(metrics):
    import threading
    x_cpu = torch.arange(6.0)
    with torchtpu.eager_mode("fused"):
        x = x_cpu.to("tpu")
        y = x * 3  # pending in this thread's trace
        x.add_(1)  # so is the new value of x
        got = {}

        def read():
            got["y"] = (y + 1).cpu()  # recorded in this thread's trace, reading the main thread's values
            got["x"] = x.clone()
            x.mul_(2)  # rewrites a storage whose last value was pending in the main thread's trace

        other = threading.Thread(target=read)
        other.start()
        other.join()
        assert_close(got["y"], x_cpu * 3 + 1)
        assert_close(x.cpu(), (x_cpu + 1) * 2)
        assert_close(got["x"].cpu(), x_cpu + 1)
        assert_close(y.cpu(), x_cpu * 3)
    assert fused()["flushes"].get("value of another thread's trace", 0) >= 1


def test_a_value_check_failing_in_another_thread_raises_at_its_sync(metrics):
    import threading
    table = torch.randn(5, 3).to("tpu")
    errors = []

    def bad():
        try:
            table[torch.tensor([7], device="tpu")]  # out of range: recorded, checked on the device
            torch.tpu.synchronize()
        except RuntimeError as e:
            errors.append(str(e))

    with torchtpu.eager_mode("fused"):
        other = threading.Thread(target=bad)
        other.start()
        other.join()
        assert len(errors) == 1 and "out of bounds" in errors[0], errors
        assert_close(table[torch.tensor([4], device="tpu")].cpu(), table.cpu()[[4]])  # usable after


def test_threads_switching_modes_and_running_compiled_graphs_do_not_deadlock():
    # A thread running a trace under the trace lock may drop the last reference to a tensor whose Python object
    # then needs the GIL (here the CPU scalars the traces hold); a thread must not hold the GIL while it waits
    # for that lock (mode changes, compiled graphs). The build before this test hung here within a second.
    result = run_python("""
        import threading, time, torch, torchtpu
        stop = time.time() + 3

        def record():
            while time.time() < stop:
                with torchtpu.eager_mode("fused"):
                    for _ in range(20):
                        a = torch.ones(8, device="tpu")
                        s = torch.tensor(2.0)
                        b = a * s
                        del a, b, s  # only the trace holds them now

        def switch_modes():
            while time.time() < stop:
                torchtpu.eager_mode("fused")
                torchtpu.eager_mode("strict")

        @torch.compile(backend="tpu", dynamic=False)
        def scaled(x, s):
            return x * s + 1

        def run_compiled():
            x = torch.ones(8, device="tpu")
            while time.time() < stop:
                scaled(x, torch.tensor(3.0))

        work = [record] * 3 + [switch_modes] * 2 + [run_compiled]
        threads = [threading.Thread(target=f) for f in work]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        print("done")
    """, timeout=120)
    assert result.returncode == 0 and result.stdout.strip().endswith("done"), result.stderr[-2000:]


def test_a_write_of_zero_elements_fuses_with_its_neighbours():
    # Its op program has no results, and the fused program once called it as "%r = call" (an MLIR parse
    # error): the whole trace then fell back to running op by op, with a warning.
    with torchtpu.eager_mode("fused"), warnings.catch_warnings():
        warnings.simplefilter("error")
        t = torch.zeros(0, device="tpu")
        y = torch.ones(3, device="tpu") * 2
        t[torch.zeros(0, dtype=torch.bool, device="tpu")] = torch.zeros(0, device="tpu")
        assert (y + 1).cpu().tolist() == [3.0] * 3 and t.cpu().shape == (0,)
