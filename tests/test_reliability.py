"""Reliability: out-of-memory, memory figures, fork, interpreter exit, threads, Ctrl-C, soak (docs/reliability.md)."""
from __future__ import annotations

import json
import pathlib
import signal
import threading
import time

import pytest
import torch

import torchtpu
from helpers import run_python, start_python

# What the CPU plugin prints on stderr when its client starts; anything else on stderr is a failure.
PLUGIN_LOG_LINES = ("All log messages before absl::InitializeLog()", "cpu_device_count set via create_options")


def unexpected_stderr(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.strip() and not any(s in line for s in PLUGIN_LOG_LINES)]


# ---- out of memory ------------------------------------------------------------------------------------

def test_device_oom_raises_out_of_memory_error_and_process_continues():
    with torchtpu.eager_mode("strict"):  # raised at the op; fused mode raises at the flush (below)
        survivor = torch.arange(6.0, device="tpu")
        before = torch.tpu.memory_stats()["num_ooms"]
        with pytest.raises(torch.OutOfMemoryError) as info:
            torch.zeros(2**40, device="tpu")  # 4 TiB: the plugin itself refuses (RESOURCE_EXHAUSTED)
        message = str(info.value)
        assert "tpu:0 out of memory. Tried to allocate 4.00 TiB" in message, message
        assert "live in tensors on the device, peak" in message, message
        assert "RESOURCE_EXHAUSTED" in message, message  # the PJRT status code is kept
        assert "aten::zero_" in message, message  # the op that asked
        assert isinstance(info.value, RuntimeError)  # what code written for CUDA catches
        assert torch.tpu.memory_stats()["num_ooms"] == before + 1
        torch.testing.assert_close((survivor * 2).cpu(), torch.arange(6.0) * 2)
        torch.testing.assert_close(torch.ones(4, device="tpu").sum().cpu(), torch.tensor(4.0))


def test_an_allocation_failing_inside_an_asynchronous_execution_is_out_of_memory_too():
    with torchtpu.eager_mode("strict"):  # raised at the op; fused mode raises at the flush (below)
        # The plugin reports these as INTERNAL "Out of memory allocating N bytes" when the program runs, at the
        # sync or the read that waits for it; code written for CUDA catches torch.OutOfMemoryError there.
        survivor = torch.arange(6.0, device="tpu")
        with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 3.64 TiB.*asynchronous execution"):
            failed = torch.randn(10**12, device="tpu")
            torch.tpu.synchronize()
        del failed
        with pytest.raises(torch.OutOfMemoryError, match=r"\(in copy to the host\)"):
            (torch.ones(10**6, 1, device="tpu") @ torch.ones(1, 10**6, device="tpu")).sum().item()
        with pytest.raises(torch.OutOfMemoryError):  # the failed product is reported at the next sync too
            torch.tpu.synchronize()
        torch.tpu.synchronize()
        torch.testing.assert_close((survivor * 2).cpu(), torch.arange(6.0) * 2)


def test_memory_limit_refuses_before_running_and_names_the_figures():
    with torchtpu.eager_mode("strict"):  # raised at the op; fused mode raises at the flush (below)
        torch.tpu.synchronize()
        live = torch.tpu.memory_allocated()
        total = torch.tpu.mem_get_info()[1]
        torch.tpu.set_per_process_memory_fraction((live + (1 << 20)) / total)  # about 1 MiB of headroom
        try:
            small = torch.ones(1 << 16, device="tpu")  # 256 KiB fits
            with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 4.00 MiB.*limit .*per-process"):
                torch.ones(1 << 20, device="tpu")
            with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 4.00 MiB.*\(in copy to tpu\)"):
                torch.ones(1 << 20).to("tpu")
            assert torch.tpu.memory_stats()["limit_bytes"] > 0
            torch.testing.assert_close((small + 1).sum().cpu(), torch.tensor(2.0 * (1 << 16)))
        finally:
            torch.tpu.set_per_process_memory_fraction(1.0)
        assert "limit_bytes" not in torch.tpu.memory_stats()
        big = torch.ones(1 << 20, device="tpu")
        assert torch.tpu.memory_allocated() >= live + big.nbytes


def test_an_allocation_failing_in_a_fused_program_is_out_of_memory_and_keeps_earlier_values():
    """Fused mode raises at the flush. The ops then run one by one, so the values recorded before the failing
    op are kept and the error names that op, as strict mode's would. The trace's first sight runs op by op
    anyway; its second compiles the fused program, whose launch fails."""
    fused = lambda: torchtpu.metrics()["fused"]
    with torchtpu.eager_mode("fused"):
        for sighting in (1, 2):
            survivor = torch.arange(6.0, device="tpu")
            survivor.sum().item()
            compiles, op_by_op = fused()["compiles"], fused()["op_by_op_runs"]
            earlier = survivor * 3  # recorded before the failing op, flushed with it
            with pytest.raises(torch.OutOfMemoryError, match=r"Tried to allocate 4.00 TiB.*\(in aten::zero_\)"):
                big = torch.zeros(2**40, device="tpu")  # live at the flush: the fused program must make it
                big[:2].cpu()
            assert (fused()["compiles"] - compiles, fused()["op_by_op_runs"] - op_by_op) == (sighting - 1, 2 - sighting)
            torch.testing.assert_close(earlier.cpu(), torch.arange(6.0) * 3)
            with pytest.raises(RuntimeError, match="the value of this tpu tensor was lost"):
                big[:2].cpu()
            del big
            torch.testing.assert_close((survivor * 2).cpu(), torch.arange(6.0) * 2)


def test_memory_figures_are_real():
    torch.tpu.synchronize()
    torch.tpu.reset_accumulated_memory_stats()
    torch.tpu.reset_peak_memory_stats()
    base = torch.tpu.memory_allocated()
    x = torch.ones(1000, device="tpu")
    y = x * 2
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == base + 8000
    assert stats["allocated_bytes.all.peak"] >= base + 8000
    assert stats["allocated_bytes.all.allocated"] >= 8000
    assert stats["allocation.all.allocated"] >= 2
    assert stats["reserved_bytes.all.current"] == torch.tpu.memory_reserved() == torch.tpu.memory_allocated()
    del x, y
    torch.tpu.empty_cache()
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == base
    assert stats["allocated_bytes.all.freed"] >= 8000
    assert torch.tpu.max_memory_allocated() >= base + 8000
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() == base
    assert "allocated_bytes.all.current" in torch.tpu.memory_summary()


# ---- fork and multiprocessing -------------------------------------------------------------------------

def test_is_available_does_not_initialise_and_forked_child_gets_a_clear_error():
    result = run_python(
        """
        import os, sys, torch, torchtpu
        assert torch.tpu.is_available() and torch.accelerator.is_available()
        assert not torch.tpu.is_initialized(), "is_available() created the PJRT client"
        pid = os.fork()  # before first use: the child may use the device itself
        if pid == 0:
            ok = (torch.ones(2, device="tpu") + 1).sum().item() == 4.0 and not torch.tpu._is_in_bad_fork()
            os._exit(0 if ok else 3)
        assert os.waitpid(pid, 0)[1] == 0, "a child forked before first use could not use the device"

        x = torch.ones(3, device="tpu") * 2
        assert torch.tpu.is_initialized()
        pid = os.fork()
        if pid == 0:
            assert torch.tpu._is_in_bad_fork() and not torch.tpu.is_initialized()
            assert (torch.ones(2) * 2).sum().item() == 4.0  # CPU work is fine
            for attempt in range(2):  # every try fails the same way, none hangs
                try:
                    torch.ones(2, device="tpu")
                except RuntimeError as e:
                    assert "Cannot re-initialize the tpu device in a forked subprocess" in str(e), e
                    assert "spawn" in str(e)
                else:
                    raise AssertionError("the device worked in a bad fork")
            try:
                x.cpu()
            except RuntimeError as e:
                assert "forked subprocess" in str(e)
            del x  # the parent's buffers are left alone
            sys.exit(0)  # a full interpreter exit in the child: no crash, no hang
        _, status = os.waitpid(pid, 0)
        assert status == 0, status
        assert not torch.tpu._is_in_bad_fork()
        assert x.cpu().tolist() == [2.0, 2.0, 2.0]
        print("OK")
        """
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK"), result.stdout
    assert unexpected_stderr(result.stderr) == []


SPAWN_SCRIPT = """
import torch, torchtpu
import torch.multiprocessing as mp
from torch.utils.data import DataLoader, TensorDataset


def use_device(rank):
    x = torch.full((4,), float(rank), device="tpu")
    assert (x + 1).sum().item() == 4.0 * (rank + 1)


if __name__ == "__main__":
    model = torch.nn.Linear(4, 1).to("tpu")  # the device is initialised before any worker starts
    data = TensorDataset(torch.arange(32.0).view(8, 4), torch.arange(8.0))
    for context in ("fork", "spawn"):
        loader = DataLoader(data, batch_size=2, num_workers=2, multiprocessing_context=context)
        total = 0.0
        for inputs, targets in loader:
            assert model(inputs.to("tpu")).shape == (2, 1)
            total += targets.sum().item()
        assert total == 28.0, (context, total)
    mp.spawn(use_device, nprocs=2, join=True)  # each spawned worker uses the device itself
    print("OK")
"""


def test_dataloader_workers_and_spawned_device_workers(tmp_path):
    script = tmp_path / "workers.py"  # spawn pickles functions by module: they must live in a file
    script.write_text(SPAWN_SCRIPT)
    result = run_python(f"import runpy, sys; sys.argv = [{str(script)!r}]; "
                        f"runpy.run_path({str(script)!r}, run_name='__main__')")
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip().endswith("OK"), result.stdout


# ---- interpreter exit ---------------------------------------------------------------------------------

# Each child process runs one scenario and then leaves through a normal interpreter exit (atexit handlers,
# finalization, static destructors). The children fork from one parent that imported torch but never used
# the device, so 50 exits cost 50 device start-ups, not 50 torch imports.
EXIT_DRIVER = r"""
import os, sys, threading, time
import torch, torchtpu

def in_flight():
    x = torch.ones(128, 128, device="tpu")
    for _ in range(30):
        x = (x @ x) * 1e-3  # queued, never waited for

def daemon_threads():
    def work():
        x = torch.ones(32, 32, device="tpu")
        while True:
            x = (x @ x) * 0.01 + 1
    for _ in range(3):
        threading.Thread(target=work, daemon=True).start()
    time.sleep(0.05)

def daemon_threads_reading():
    def work():
        x = torch.ones(16, device="tpu")
        while True:
            x = x + 1
            x.sum().item()
            torch.tpu.synchronize()
    for _ in range(2):
        threading.Thread(target=work, daemon=True).start()
    time.sleep(0.05)

def globals_alive():
    global model, opt, cache
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(4, 8, device="tpu")).sum().backward()
    opt.step()
    cache = {i: torch.full((i + 1,), float(i), device="tpu") for i in range(8)}

def threads_joined():
    results = []
    def work(i):
        results.append((torch.ones(4, device="tpu") * i).sum().item())
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads: t.start()
    for t in threads: t.join()
    assert sorted(results) == [0.0, 4.0, 8.0, 12.0]

SCENARIOS = [in_flight, daemon_threads, daemon_threads_reading, globals_alive, threads_joined]
count, parallel = int(sys.argv[1]), int(sys.argv[2])
assert not torch.tpu.is_initialized()
running, failures = {}, []
for i in range(count):
    if len(running) >= parallel:
        pid, status = os.wait()
        failures.append((running.pop(pid), status))
    pid = os.fork()
    if pid == 0:
        out = os.open(f"{sys.argv[3]}/{i}.err", os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 2)
        SCENARIOS[i % len(SCENARIOS)]()
        sys.exit(0)
    running[pid] = i
while running:
    pid, status = os.wait()
    failures.append((running.pop(pid), status))
bad = [(i, status) for i, status in failures if status != 0]
print("statuses", bad)
"""


def test_fifty_short_processes_exit_cleanly(tmp_path):
    result = run_python(EXIT_DRIVER.replace("sys.argv[1]", "50").replace("sys.argv[2]", "4")
                        .replace("sys.argv[3]", repr(str(tmp_path))))
    assert result.returncode == 0, result.stderr[-3000:]
    assert "statuses []" in result.stdout, result.stdout  # every child exited 0 (134 = std::terminate)
    messages = {}
    for i in range(50):
        lines = unexpected_stderr((tmp_path / f"{i}.err").read_text())
        if lines:
            messages[i] = lines[:5]
    assert messages == {}


# ---- threads ------------------------------------------------------------------------------------------

def run_in_threads(work, count: int) -> None:
    """Runs ``work(rank)`` in ``count`` threads started together; fails on a hang or any thread's error."""
    errors = []
    start = threading.Barrier(count)

    def body(rank):
        try:
            start.wait()
            work(rank)
        except Exception as exc:  # noqa: BLE001
            errors.append((rank, repr(exc)))

    threads = [threading.Thread(target=body, args=(rank,)) for rank in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert errors == []
    torch.tpu.synchronize()


def test_eight_threads_dispatch_move_and_read_correctly():
    def work(rank):
        cpu = torch.arange(64.0).view(8, 8) + rank
        x = cpu.to("tpu")
        for step in range(20):
            x = x @ torch.eye(8, device="tpu") + 1
            cpu = cpu + 1
            if step % 5 == 0:
                torch.testing.assert_close(x.cpu(), cpu)
                assert x.sum().item() == cpu.sum().item()
        moved = x.to("cpu").to("tpu")
        torch.testing.assert_close(moved.cpu(), cpu)

    run_in_threads(work, 8)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_threads_recording_and_awaiting_events_while_others_synchronize(mode):
    """Events watch executions that another thread's synchronize() is awaiting (runtime/pending_work.cc). In
    fused mode Event.record (which torch calls holding the GIL) runs the thread's trace while synchronize() runs
    the others', which may need the GIL to drop a tensor: the trace lock lets go of the GIL (aten/fused.h)."""
    def work(rank):
        x = torch.randn(128, 128, device="tpu")
        for _ in range(30):
            x = torch.tanh(x @ x)
            if rank % 2 == 0:
                torch.tpu.synchronize()
            else:
                begin, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
                begin.record()
                x = x + 1
                end.record()
                end.synchronize()
                assert end.query() and begin.elapsed_time(end) >= 0

    with torchtpu.eager_mode(mode):
        run_in_threads(work, 6)


def test_racing_threads_compile_a_new_program_once():
    torchtpu.reset_metrics()
    shape = (37, 41)  # a shape no other test uses, so the program is new
    start = threading.Barrier(8)
    results = []

    def work():
        x = torch.ones(shape, device="tpu")
        start.wait()
        results.append(torch.nn.functional.hardtanh(x * 3, -2.0, 2.0).sum().item())

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [2.0 * 37 * 41] * 8
    ops = torchtpu.metrics()["ops"]
    assert ops["aten::hardtanh"]["compiles"] == 1, ops["aten::hardtanh"]
    assert ops["aten::hardtanh"]["executions"] == 8
    assert all(counters["fallbacks"] == 0 for counters in ops.values()), ops


@pytest.mark.parametrize("mode", ["strict", "debug", "fused", "compiled"])
def test_a_thread_reads_a_tensor_another_updates_in_place(mode):
    """Readers copy a storage's buffer while a writer gives that buffer to its in-place program (donation):
    each reader sees some value of the race, as on CUDA, never "buffer has been deleted or donated". In fused
    mode the readers' ops look at a value the writer's trace keeps pending while that trace runs."""
    steps = 6000
    x = torch.zeros(64, device="tpu")
    increment = torch.compile(lambda t: t.add_(1), backend="tpu") if mode == "compiled" else (lambda t: t.add_(1))
    seen = {1: [], 2: []}

    def work(rank):
        if rank == 0:
            for _ in range(steps):
                increment(x)
            return
        for step in range(steps):
            doubled = x * 2
            if step % 600 == 0:
                seen[rank].append(doubled.cpu())

    with torchtpu.eager_mode("strict" if mode == "compiled" else mode):
        run_in_threads(work, 3)
    assert x.cpu().eq(steps).all()
    for values in seen.values():
        firsts = [v[0].item() for v in values]
        assert all((v == v[0]).all() for v in values) and firsts == sorted(firsts), firsts
        assert 0 <= firsts[0] and firsts[-1] <= 2 * steps


# ---- Ctrl-C -------------------------------------------------------------------------------------------

# Python raises KeyboardInterrupt on SIGINT only if the signal was not ignored when it started, and a
# process started in the background by a non-interactive shell (CI, `cmd &`) inherits SIGINT ignored.
DEFAULT_SIGINT = "signal.signal(signal.SIGINT, signal.default_int_handler)"

# Fused mode records about 1200 ops, then .item() compiles them as one program, which takes seconds (at the
# trace's first sight: TORCHTPU_FUSE_AFTER=1).
LONG_COMPILE = f"""
    import signal, time, torch, torchtpu
    {DEFAULT_SIGINT}
    torchtpu.eager_mode("fused")
    x = torch.rand(32, 32, device="tpu")
    for _ in range(400):
        x = torch.softmax(x @ x.T, -1) + 0.5
    print("compiling", flush=True)
    try:
        x.sum().item()
        print("finished before the signal", flush=True)
        time.sleep(60)
    except KeyboardInterrupt:
        print("interrupted", torchtpu.metrics()["fused"]["compiles"], flush=True)
    torchtpu.eager_mode("strict")
    print("usable", (torch.ones(3, device="tpu") * 2).sum().item(), torch.allclose(x.sum().cpu(), x.cpu().sum()))
"""


def test_ctrl_c_during_a_long_compile_raises_keyboard_interrupt_and_the_process_goes_on():
    # The compile cannot be cut short (it runs in the plugin, without the GIL); the interrupt is raised
    # when the op returns, and the program it compiled is kept.
    child = start_python(LONG_COMPILE, TORCHTPU_DISK_CACHE="0", TORCHTPU_FUSE_AFTER="1")
    try:
        line = child.stdout.readline()
        if line.strip() == "compiling":
            time.sleep(0.5)
            child.send_signal(signal.SIGINT)
        out, err = child.communicate(timeout=300)
    finally:
        child.kill()
    assert line.strip() == "compiling", err[-3000:]
    assert child.returncode == 0, err[-3000:]
    assert out.split() == ["interrupted", "1", "usable", "6.0", "True"], out
    assert unexpected_stderr(err) == []


# A Ctrl-C while an op's output shapes are inferred: many meta kernels are Python, where the
# KeyboardInterrupt is raised. Before, the op took it for a shape the meta kernel cannot infer, ran on the
# CPU fallback ("aten::mul.Tensor is not lowered") and the interrupt was lost.
CTRL_C_IN_META_KERNEL = f"""
    import os, signal, warnings
    import torch, torchtpu
    {DEFAULT_SIGINT}
    from torch._decomp import global_decomposition_table
    meta_mul = global_decomposition_table["post_autograd"][torch.ops.aten.mul.Tensor]
    sent = []
    def meta_mul_interrupted(a, b):
        if not sent:
            sent.append(True)
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C arrives now
        return meta_mul(a, b)
    library = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        library.impl("mul.Tensor", meta_mul_interrupted, "Meta")
    x = torch.ones(5, 3, device="tpu")
    try:
        x * x
        print("not interrupted")
    except KeyboardInterrupt:
        print("interrupted")
    print("usable", (x * x).sum().item(), torchtpu.metrics()["ops"]["aten::mul.Tensor"]["fallbacks"])
"""


def test_ctrl_c_in_a_python_meta_kernel_raises_keyboard_interrupt_not_the_cpu_fallback():
    result = run_python(CTRL_C_IN_META_KERNEL)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split() == ["interrupted", "usable", "15.0", "0"], result.stdout
    assert "not lowered" not in result.stderr


# ---- soak ---------------------------------------------------------------------------------------------

def test_short_soak_keeps_memory_flat_and_compiles_nothing_after_warm_up(tmp_path):
    # bench/soak.py in each eager mode, each in a fresh process; --check fails on host memory growth, device
    # memory beyond the scalar-operand cache, or a compile after warm-up. The 10,000-step run is in
    # docs/reliability.md.
    soak = pathlib.Path(__file__).resolve().parent.parent / "bench" / "soak.py"
    result = run_python(f"""
        import runpy, sys
        sys.argv = [{str(soak)!r}, "--steps", "120", "--every", "10", "--warmup", "60", "--out", {str(tmp_path)!r},
                    "--check"]
        runpy.run_path(sys.argv[0], run_name="__main__")
    """)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    summaries = json.loads((tmp_path / "soak.json").read_text())["modes"]
    assert set(summaries) == {"strict", "fused"}
    for mode, run in summaries.items():
        assert run["summary"]["compiles_after_warmup"] == 0, (mode, run["summary"])
