"""Device-side value checks (docs/value_checks.md): what CPU checks by value raises on tpu at the next sync
point, with CPU's message, and the process and other tensors stay usable."""
from __future__ import annotations

import os
import re
import threading
import time

import pytest
import torch
import torch.nn.functional as F

import torchtpu
from helpers import assert_usable, run_python


def _long(values, device):
    return torch.tensor(values, device=device)


# name -> the op with a bad value, made on `device` (what CPU raises for it is the expected message).
CASES = {
    "gather": lambda d: torch.gather(torch.zeros(3, 4, device=d), 0, _long([[9, 0, 0, 0]], d)),
    "gather_negative": lambda d: torch.gather(torch.zeros(3, 4, device=d), 1, _long([[-1]], d)),
    "scatter_value": lambda d: torch.zeros(3, 4, device=d).scatter_(0, _long([[9]], d), 1.0),
    "scatter_src": lambda d: torch.zeros(3, 4, device=d).scatter(0, _long([[3]], d), torch.ones(1, 1, device=d)),
    "scatter_add": lambda d: torch.zeros(3, 4, device=d).scatter_add(1, _long([[4]], d), torch.ones(1, 1, device=d)),
    "scatter_reduce": lambda d: torch.zeros(3, device=d).scatter_reduce(0, _long([7], d), torch.ones(1, device=d),
                                                                        "amax"),
    "index_select": lambda d: torch.index_select(torch.zeros(3, 4, device=d), 0, _long([1, 9], d)),
    "index_add": lambda d: torch.zeros(3, 4, device=d).index_add_(0, _long([9], d), torch.ones(1, 4, device=d)),
    "index_copy": lambda d: torch.zeros(3, 4, device=d).index_copy_(1, _long([-1], d), torch.ones(3, 1, device=d)),
    "index_fill": lambda d: torch.zeros(3, 4, device=d).index_fill_(0, _long([-4], d), 1.0),
    "index_reduce": lambda d: torch.zeros(3, 4, device=d).index_reduce_(0, _long([3], d), torch.ones(1, 4, device=d),
                                                                        "prod"),
    "index": lambda d: torch.zeros(3, 4, device=d)[:, _long([2, 4], d)],
    "index_put": lambda d: torch.zeros(3, 4, device=d).index_put_((_long([-4], d),), torch.tensor(1.0, device=d)),
    "take": lambda d: torch.take(torch.zeros(3, 4, device=d), _long([99], d)),
    "put": lambda d: torch.zeros(3, 4, device=d).put_(_long([-13], d), torch.ones(1, device=d), accumulate=True),
    "embedding": lambda d: F.embedding(_long([[1, 7]], d), torch.zeros(5, 3, device=d)),
    "embedding_bag": lambda d: F.embedding_bag(_long([5, 1], d), torch.zeros(5, 3, device=d), _long([0, 1], d)),
    "nll_loss": lambda d: F.nll_loss(torch.zeros(2, 3, device=d), _long([0, 3], d)),
    "cross_entropy": lambda d: F.cross_entropy(torch.zeros(2, 3, 4, device=d), _long([[0, 1, 2, -2], [0] * 4], d)),
    "nll_loss_backward": lambda d: torch.ops.aten.nll_loss_backward(
        torch.tensor(1.0, device=d), torch.zeros(2, 3, device=d), _long([0, 5], d), None, 1, -100,
        torch.tensor(2.0, device=d)),
    "nll_loss2d": lambda d: F.nll_loss(torch.zeros(1, 3, 2, 2, device=d), _long([[[0, 1], [3, 2]]], d),
                                       ignore_index=1),
    "nll_loss2d_backward": lambda d: torch.ops.aten.nll_loss2d_backward(
        torch.tensor(1.0, device=d), torch.zeros(1, 3, 2, 2, device=d), _long([[[0, -1], [0, 0]]], d), None, 1,
        -100, torch.tensor(4.0, device=d)),
    "multi_margin_loss": lambda d: F.multi_margin_loss(torch.zeros(2, 3, device=d), _long([0, 3], d)),
    "multilabel_margin_loss": lambda d: F.multilabel_margin_loss(torch.zeros(2, 3, device=d),
                                                                 _long([[0, -1, 7], [1, -1, 0]], d)),
    "multilabel_margin_loss_backward": lambda d: torch.ops.aten.multilabel_margin_loss_backward(
        torch.tensor(1.0, device=d), torch.zeros(2, 3, device=d), _long([[0, -2, -1], [1, -1, 0]], d), 1,
        torch.zeros(2, 3, device=d)),
    "bernoulli": lambda d: torch.bernoulli(torch.tensor([0.5, float("nan")], device=d)),
    "bernoulli_tensor": lambda d: torch.zeros(2, device=d).bernoulli_(torch.tensor([0.5, -0.5], device=d)),
    "one_hot_too_large": lambda d: F.one_hot(_long([0, 3], d), 3),
    "one_hot_negative": lambda d: F.one_hot(_long([[5, -1]], d), 3),
    "one_hot_inferred_classes": lambda d: F.one_hot(_long([2, -1], d)),
    "multinomial_probabilities": lambda d: torch.multinomial(torch.tensor([0.5, -0.1], device=d), 1),
    "multinomial_sum": lambda d: torch.multinomial(torch.tensor([[0.5, 0.5], [0.0, 0.0]], device=d), 1),
    "normal_std": lambda d: torch.normal(torch.zeros(3, device=d), torch.tensor([1.0, -1.0, 1.0], device=d)),
    "binary_cross_entropy_input": lambda d: F.binary_cross_entropy(torch.tensor([0.5, 1.5], device=d),
                                                                   torch.tensor([0.0, 1.0], device=d)),
    "binary_cross_entropy_target": lambda d: F.binary_cross_entropy(torch.tensor([0.5, 0.5], device=d),
                                                                    torch.tensor([0.0, float("nan")], device=d)),
    "masked_scatter": lambda d: torch.zeros(4, device=d).masked_scatter(
        torch.tensor([True, True, True, False], device=d), torch.ones(2, device=d)),
    "div_floor": lambda d: torch.div(_long([4, 5], d), _long([1, 0], d), rounding_mode="floor"),
    "floor_divide": lambda d: _long([4, 5], d) // 0,
    "remainder": lambda d: _long([4, 5], d) % _long([0, 1], d),
    "fmod": lambda d: torch.fmod(torch.tensor([4, 5], dtype=torch.int32, device=d), 0),
    "cholesky": lambda d: torch.cholesky(torch.tensor([[1.0, 2.0], [2.0, 1.0]], device=d)),
    "cholesky_batched": lambda d: torch.cholesky(torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 2.0], [2.0, 1.0]]],
                                                              device=d), upper=True),
}


def _ctc_loss(d, targets, good_lengths, bad_lengths):
    """ctc_loss's lengths are runtime operands: once a program ran with good lengths, bad ones of the same
    maxima reach it (a first call would be refused by the meta kernel, before any program)."""
    log_probs = torch.zeros(4, 2, 3, device=d).log_softmax(2)
    targets = _long(targets, d)
    torch.ops.aten._ctc_loss(log_probs, targets, good_lengths[0], good_lengths[1], 0, False)
    return torch.ops.aten._ctc_loss(log_probs, targets, bad_lengths[0], bad_lengths[1], 0, False)


CASES.update({
    "eig_non_finite": lambda d: torch.linalg.eig(torch.tensor([[1.0, float("nan")], [0.0, 1.0]], device=d)),
    "ctc_loss_input_length": lambda d: _ctc_loss(d, [[1, 2], [2, 1]], ([4, 2], [2, 1]), ([4, -1], [2, 1])),
    "ctc_loss_target_length": lambda d: _ctc_loss(d, [[1, 2], [2, 1]], ([4, 2], [2, 1]), ([4, 2], [2, -3])),
    "ctc_loss_targets_size": lambda d: _ctc_loss(d, [1, 2, 2], ([4, 2], [2, 1]), ([4, 2], [2, 2])),
    # min == max takes the data's range, which must be finite
    "histc_inf": lambda d: torch.histc(torch.tensor([1.0, float("inf"), 2.0], device=d), 4),
    "histc_minus_inf": lambda d: torch.histc(torch.tensor([float("-inf"), 0.5], device=d, dtype=torch.float64), 3),
    "histc_nan": lambda d: torch.histc(torch.tensor([1.0, float("nan")], device=d), 4, min=2, max=2),
    "histogram_inf": lambda d: torch.histogram(torch.tensor([float("inf"), 1.0, 2.0], device=d), bins=3),
    "histogramdd_nan": lambda d: torch.histogramdd(torch.tensor([[1.0, 0.0], [float("nan"), 1.0]], device=d),
                                                   bins=[2, 2]),
    "embedding_bag_first_offset": lambda d: F.embedding_bag(_long([1, 2, 3, 4], d), torch.ones(10, 2, device=d),
                                                            _long([1, 2], d)),
    "embedding_bag_last_offset": lambda d: F.embedding_bag(_long([1, 2, 3, 4], d), torch.ones(10, 2, device=d),
                                                           _long([0, 9], d)),
    "embedding_bag_offsets_order": lambda d: F.embedding_bag(_long([1, 2, 3, 4], d), torch.ones(10, 2, device=d),
                                                             _long([0, 3, 1], d)),
    "svd_non_finite": lambda d: torch.linalg.svd(torch.tensor([[1.0, float("nan")], [0.0, 1.0]], device=d)),
    "pinv_nan": lambda d: torch.linalg.pinv(torch.tensor([[1.0, float("nan")], [0.0, 1.0]], device=d)),
    "searchsorted_sorter": lambda d: torch.searchsorted(torch.tensor([3.0, 1.0, 2.0], device=d),
                                                        torch.tensor([2.5], device=d), sorter=_long([1, 2, 7], d)),
    "max_unpool1d": lambda d: F.max_unpool1d(torch.ones(1, 1, 2, device=d), _long([[[0, 99]]], d), 2),
    "max_unpool2d": lambda d: F.max_unpool2d(torch.ones(1, 1, 2, 2, device=d), _long([[[[0, 1], [2, 16]]]], d), 2),
    "max_unpool3d": lambda d: F.max_unpool3d(torch.ones(1, 2, 2, 2, device=d), _long([[[[0, 1], [2, 64]]] * 2], d), 2),
})


def cpu_message(case: str) -> str:
    with pytest.raises((RuntimeError, IndexError)) as raised:
        CASES[case]("cpu")
    return str(raised.value).splitlines()[0]


def assert_cpu_error(error: BaseException, case: str) -> None:
    """A RuntimeError naming the op ("gather(): ...") and saying what CPU says; where CPU's message already
    names its API ("torch.linalg.eig: ..."), exactly CPU's message."""
    assert isinstance(error, RuntimeError), f"{type(error).__name__}: {error}"
    first, expected = str(error).splitlines()[0], cpu_message(case)
    if expected.startswith("torch."):
        assert first == expected, f"tpu: {first!r}\ncpu: {expected!r}"
    else:
        assert re.match(r"\w+\(\): ", first), first
        assert expected in first, f"tpu: {first!r}\ncpu: {expected!r}"


def assert_usable_and_clear(survivor) -> None:
    """Usable as after any error, and no failure is left over: a checked op with good values passes."""
    assert_usable(survivor)
    tpu, cpu = survivor
    good = torch.gather(tpu, 1, torch.tensor([[2, 0]], device="tpu"))
    torch.testing.assert_close(good.cpu(), torch.gather(cpu, 1, torch.tensor([[2, 0]])))
    torch.tpu.synchronize()


@pytest.mark.parametrize("case", sorted(CASES))
def test_raises_at_next_sync(case, survivor):
    result = CASES[case]("tpu")  # enqueued: nothing is read yet
    unrelated = survivor[0] + 1
    with pytest.raises(RuntimeError) as raised:
        unrelated.cpu()  # any sync point reports it, as CUDA's asynchronous errors
    assert_cpu_error(raised.value, case)
    assert "TORCHTPU_LAUNCH_BLOCKING=1" in str(raised.value)
    del result
    assert_usable_and_clear(survivor)


@pytest.mark.parametrize("case", sorted(CASES))
def test_raises_in_fused_mode(case, survivor):
    with torchtpu.eager_mode("fused"):
        CASES[case]("tpu")
        with pytest.raises(RuntimeError) as raised:
            torch.tpu.synchronize()
        assert_cpu_error(raised.value, case)
        assert_usable_and_clear(survivor)


@pytest.mark.parametrize("case", sorted(CASES))
def test_debug_mode_raises_at_the_op(case, survivor):
    with torchtpu.eager_mode("debug"):
        with pytest.raises(RuntimeError) as raised:
            CASES[case]("tpu")
        assert_cpu_error(raised.value, case)
        assert "TORCHTPU_LAUNCH_BLOCKING" not in str(raised.value)
        assert_usable_and_clear(survivor)


@pytest.mark.parametrize("case", sorted(CASES))
def test_checks_off(case, survivor):
    with torchtpu.value_checks(False):
        assert not torchtpu.value_checks_enabled()
        CASES[case]("tpu")
        torch.tpu.synchronize()
        assert_usable_and_clear(survivor)
    assert torchtpu.value_checks_enabled()


@pytest.mark.parametrize("sync", ["item", "cpu", "print", "synchronize"])
def test_every_sync_point_reports(sync):
    x = torch.arange(4.0, device="tpu")
    CASES["gather"]("tpu")
    read = {"item": lambda: x.sum().item(), "cpu": x.cpu, "print": lambda: str(x),
            "synchronize": torch.tpu.synchronize}[sync]
    with pytest.raises(RuntimeError, match=r"gather\(\): index 9 is out of bounds for dimension 0 with size 3"):
        read()
    read()  # reported once


def test_first_failure_is_reported():
    CASES["take"]("tpu")
    CASES["nll_loss"]("tpu")
    with pytest.raises(RuntimeError, match=r"take\(\): out of range"):
        torch.tpu.synchronize()
    torch.tpu.synchronize()


ANOTHER_THREAD = "(an op of another thread failed; that thread gets this error at its next synchronization too)"


def join_to_the_end(thread: threading.Thread) -> None:
    """Joins `thread` and waits until the OS thread is gone: Python's join returns before a thread's C++
    thread-locals are destroyed, and that destruction is when torchtpu learns the thread ended."""
    thread.join()
    deadline = time.monotonic() + 30
    while os.path.exists(f"/proc/self/task/{thread.native_id}") and time.monotonic() < deadline:
        time.sleep(0.001)


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
def test_a_failure_reaches_its_thread_and_every_other_thread_once(mode):
    """Four threads run checked ops and sync; the one bad index among them is raised in its own thread at its
    sync, and at most once in each other thread (which may have read the failed op's result), saying so."""
    errors = []

    def work(k):
        weight = torch.randn(50, 8, device="tpu")
        for i in range(40):
            index = torch.randint(0, 50, (16,))
            if (k, i) == (2, 20):
                index[3] = 55
            try:
                F.embedding(index.to("tpu"), weight).sum().item()
            except RuntimeError as e:
                errors.append((k, i, str(e).splitlines()[0], ANOTHER_THREAD in str(e)))

    with torchtpu.eager_mode(mode):
        threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        torch.tpu.synchronize()
    message = "index_select(): index out of range in self (index 55, dimension 0 with size 50)"
    assert (2, 20, message, False) in errors
    others = [e for e in errors if e[0] != 2]
    assert len({k for k, *_ in others}) == len(others)
    assert all(e[2:] == (message, True) for e in others)


def sync_keeping_errors(table: torch.Tensor, errors: list) -> None:
    """Syncs by reading `table`'s sum; a RuntimeError's message joins `errors`."""
    try:
        table.sum().item()
    except RuntimeError as e:
        errors.append(str(e))


def start_failing_thread(table: torch.Tensor, then) -> threading.Thread:
    """Starts a thread that indexes `table` out of range (index 7), without a sync, then runs `then()`;
    returns it once the failing op is queued."""
    failed = threading.Event()

    def bad():
        table[torch.tensor([7], device="tpu")]
        failed.set()
        then()

    thread = threading.Thread(target=bad, daemon=True)  # a failed assertion must not leave it blocking exit
    thread.start()
    failed.wait()
    return thread


# The next three follow a failing op of another thread in strict mode, where it runs at once. In fused mode
# it waits in that thread's trace until that thread syncs (docs/modes.md), or, if it ends, until a sync here.
def test_another_threads_failure_is_raised_once_here_and_kept_for_that_thread():
    table = torch.randn(5, 3).to("tpu")
    read = threading.Event()
    errors = []
    with torchtpu.eager_mode("strict"):
        other = start_failing_thread(table, then=lambda: (read.wait(), sync_keeping_errors(table, errors)))
        try:
            with pytest.raises(RuntimeError, match=re.escape(ANOTHER_THREAD)):
                table.sum().item()
            torch.testing.assert_close(table[torch.tensor([4], device="tpu")].cpu(), table.cpu()[[4]])  # told once
        finally:
            read.set()
        other.join()
    assert len(errors) == 1 and "index 7 is out of bounds" in errors[0] and ANOTHER_THREAD not in errors[0]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_failure_of_a_thread_that_ended_is_raised_by_the_next_sync(mode, metrics):
    with torchtpu.eager_mode(mode):
        table = torch.randn(5, 3).to("tpu")
        other = threading.Thread(target=lambda: table[torch.tensor([7], device="tpu")])
        other.start()
        join_to_the_end(other)
        with pytest.raises(RuntimeError, match="index 7 is out of bounds"):
            table.sum().item()
        torch.testing.assert_close(table.sum().cpu(), table.cpu().sum())
    if mode == "fused":  # the ended thread's recorded ops ran at that sync
        assert torchtpu.metrics()["fused"]["flushes"].get("trace of an ended thread", 0) == 1


def test_a_failure_already_raised_here_is_dropped_once_its_thread_ends():
    table = torch.randn(5, 3).to("tpu")
    told = threading.Event()
    errors = []
    with torchtpu.eager_mode("strict"):
        other = start_failing_thread(table, then=told.wait)  # it ends without a sync
        try:
            with pytest.raises(RuntimeError, match=re.escape(ANOTHER_THREAD)):
                table.sum().item()
        finally:
            told.set()
        join_to_the_end(other)
        table.sum().item()  # the owner is gone and this thread was told: nothing more is owed
        later = threading.Thread(target=sync_keeping_errors, args=(table, errors))
        later.start()
        later.join()
    assert errors == []


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_threads_that_ended_leave_no_error_state_behind(mode):
    """A server may start a thread per request: each thread's error state (a device buffer) is freed at a sync
    once its thread has ended and nothing in it is left to read or raise."""
    table = torch.randn(50, 8).to("tpu")

    def request():
        F.embedding(torch.randint(0, 50, (4,), device="tpu"), table).sum().item()

    with torchtpu.eager_mode(mode):
        request()  # this thread's own state exists from here on
        before = torch.tpu.memory_allocated()
        for _ in range(3):
            all_started = threading.Barrier(8)  # alive at once, so no thread reuses an ended one's id
            threads = [threading.Thread(target=lambda: (request(), all_started.wait())) for _ in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                join_to_the_end(thread)
            table.sum().item()
            assert torch.tpu.memory_allocated() == before


def test_valid_values_pass_in_every_mode():
    x = torch.randn(4, 5)
    index = torch.tensor([[0, 3, 1, 2, 3]])
    target = torch.tensor([0, 4, -100, 2])
    for mode in ("strict", "fused", "debug"):
        with torchtpu.eager_mode(mode):
            xt = x.to("tpu")
            torch.testing.assert_close(torch.gather(xt, 0, index.to("tpu")).cpu(), torch.gather(x, 0, index))
            loss = F.cross_entropy(xt, target.to("tpu"))
            torch.testing.assert_close(loss.cpu(), F.cross_entropy(x, target))
            torch.tpu.synchronize()


# Good values for the ops checked above whose results CPU fixes (bernoulli's p of 0 and 1 draw nothing
# random); ignored targets outside the classes are no failure.
VALID = {
    "nll_loss2d_ignore_index": lambda d: F.nll_loss(
        torch.arange(24.0, device=d).reshape(2, 3, 2, 2), _long([[[0, 7], [2, 1]], [[7, 7], [1, 0]]], d),
        ignore_index=7),
    "nll_loss_backward_ignore_index": lambda d: torch.ops.aten.nll_loss_backward(
        torch.tensor(1.0, device=d), torch.zeros(3, 4, device=d), _long([3, 9, 0], d), None, 1, 9,
        torch.tensor(2.0, device=d)),
    "nll_loss2d_backward": lambda d: torch.ops.aten.nll_loss2d_backward(
        torch.ones(1, 2, 2, device=d), torch.zeros(1, 3, 2, 2, device=d), _long([[[0, 2], [-100, 1]]], d), None,
        0, -100, torch.tensor(0.0, device=d)),
    "multi_margin_loss": lambda d: F.multi_margin_loss(torch.arange(6.0, device=d).reshape(2, 3), _long([0, 2], d)),
    "multilabel_margin_loss": lambda d: F.multilabel_margin_loss(torch.arange(6.0, device=d).reshape(2, 3),
                                                                 _long([[0, -1, 2], [2, 1, -1]], d)),
    "bernoulli": lambda d: torch.bernoulli(torch.tensor([0.0, 1.0, 1.0, 0.0], device=d)),
    "bernoulli_tensor": lambda d: torch.zeros(2, 2, device=d).bernoulli_(torch.tensor([1.0, 0.0], device=d)),
    "one_hot": lambda d: F.one_hot(_long([[0, 2], [1, 1]], d), 4),
    "one_hot_inferred_classes": lambda d: F.one_hot(_long([0, 2, 1], d)),
    "histc_explicit_range_ignores_inf_and_nan": lambda d: torch.histc(
        torch.tensor([1.0, float("inf"), float("nan"), 2.0, -float("inf")], device=d), 4, 0, 3),
    "histc_data_range": lambda d: torch.histc(torch.tensor([1.0, 2.5, 3.0, 3.0], device=d), 5),
}


@pytest.mark.parametrize("case", sorted(VALID))
def test_valid_values_give_cpu_results_in_every_mode(case):
    expected = VALID[case]("cpu")
    for mode in ("strict", "fused", "debug"):
        with torchtpu.eager_mode(mode):
            torch.testing.assert_close(VALID[case]("tpu").cpu(), expected)
            torch.tpu.synchronize()


def test_launch_blocking_and_checks_off_from_the_environment():
    code = """
        import torch, torchtpu
        x = torch.zeros(3, device="tpu")
        try:
            torch.gather(x, 0, torch.tensor([5], device="tpu"))
            print("no error at the op")
        except RuntimeError as e:
            print("raised at the op:", str(e).splitlines()[0])
        torch.tpu.synchronize()
        print("OK")
    """
    # The switch the error message names wins over an environment that picks a mode.
    for mode in ("strict", "fused"):
        blocking = run_python(code, TORCHTPU_LAUNCH_BLOCKING="1", TORCHTPU_EAGER_MODE=mode)
        assert "raised at the op: gather(): index 5 is out of bounds for dimension 0 with size 3" in \
            blocking.stdout, blocking.stderr
        assert blocking.stdout.strip().endswith("OK")
    off = run_python(code, TORCHTPU_VALUE_CHECKS="0")
    assert "no error at the op" in off.stdout and off.stdout.strip().endswith("OK"), off.stderr


def test_ctc_input_lengths_past_the_time_steps_raise_on_every_call():
    log_probs = torch.randn(6, 1, 4).log_softmax(2).to("tpu")
    targets = torch.tensor([[1, 2]], device="tpu")
    F.ctc_loss(log_probs, targets, torch.tensor([6]), torch.tensor([2])).item()
    with pytest.raises(RuntimeError, match="input_lengths to have value at most 6, but got value 8"):
        F.ctc_loss(log_probs, targets, torch.tensor([8]), torch.tensor([2])).item()
    torch.tpu.synchronize()
