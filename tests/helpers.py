"""Helpers shared by the test files."""
import os
import subprocess
import sys
import textwrap

import torch

import torchtpu


def _child_env(env: dict) -> dict:
    full_env = dict(os.environ)
    python_dir = os.path.dirname(os.path.dirname(os.path.abspath(torchtpu.__file__)))
    full_env["PYTHONPATH"] = os.pathsep.join(p for p in (python_dir, full_env.get("PYTHONPATH")) if p)
    full_env.update(env)
    return full_env


def run_python(code: str, timeout: float = 600, **env: str) -> subprocess.CompletedProcess:
    """Runs ``code`` in a fresh interpreter that can import torchtpu, with extra environment variables; a child
    still running after `timeout` seconds is killed (subprocess.TimeoutExpired)."""
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=_child_env(env), capture_output=True,
                          text=True, timeout=timeout)


def start_python(code: str, **env: str) -> subprocess.Popen:
    """Like run_python, but returns at once: the caller reads the child's output as it comes (text pipes)."""
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=_child_env(env),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def assert_usable(survivor) -> None:
    """The tensor made before the error still has its values, and new ops (compiled or cached) work."""
    tpu, cpu = survivor
    assert tpu.device == torch.device("tpu", 0)
    torch.testing.assert_close(tpu.cpu(), cpu)
    torch.testing.assert_close((tpu * 2 + 1).cpu(), cpu * 2 + 1)
    torch.testing.assert_close((tpu @ tpu.t()).cpu(), cpu @ cpu.t())
    fresh = torch.full((4,), 3.0, device="tpu")
    torch.testing.assert_close(fresh.sum().cpu(), torch.tensor(12.0))
    torch.tpu.synchronize()


def fused_rounds_in_threads(work, rounds: int, threads: int = 2) -> list:
    """Runs `work(i)` in `threads` threads started together, `rounds` times, in fused mode; returns for each
    round the fused programs compiled plus the traces run op by op (new shapes): 0 once every trace the
    threads record has its program."""
    import threading

    def unsettled():
        fused = torchtpu.metrics()["fused"]
        return fused["compiles"] + fused["op_by_op_runs"]

    compiles = []
    with torchtpu.eager_mode("fused"):
        for _ in range(rounds):
            before = unsettled()
            start = threading.Barrier(threads)

            def run(i):
                start.wait()
                work(i)

            started = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
            for t in started:
                t.start()
            for t in started:
                t.join()
            compiles.append(unsettled() - before)
    return compiles
