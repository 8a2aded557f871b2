"""Compiles programs for a named TPU topology through libtpu's PJRT C API, on a host without a TPU.

The compiling happens in a child process, ``torchtpu_aot_compile`` (csrc/aot/aot_compile.cc): the TPU
compiler aborts the whole process on a few inputs, so a child that dies takes only itself down; the parent
marks the program it died on and starts a new child for the rest.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import queue
import subprocess
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Iterable, Sequence

from torchtpu.aot.recorder import Program

_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_REPO_BUILD_DIR = os.path.join(os.path.dirname(os.path.dirname(_PACKAGE_DIR)), "build")
_TOOL = "torchtpu_aot_compile"


class AotError(RuntimeError):
    """The compiler could not be set up: no libtpu, no tool, or a topology the plugin does not know."""


@dataclasses.dataclass
class Topology:
    """What the plugin reports for a topology name such as ``v5e:2x2``."""

    name: str
    platform: str
    platform_version: str
    device_kind: str
    num_devices: int
    api_version: tuple[int, int]


@dataclasses.dataclass
class Result:
    """What the TPU compiler said about one program. Memory figures are bytes of HBM."""

    program: Program
    topology: str
    accepted: bool
    error: str = ""
    compile_seconds: float = 0.0
    cost: dict = dataclasses.field(default_factory=dict)
    memory: dict = dataclasses.field(default_factory=dict)
    fingerprint: str = ""
    crashed: bool = False  # the compiler killed its process on this program (or hung past the timeout)

    @property
    def flops(self) -> float:
        return max(0.0, self.cost.get("flops", 0.0))

    @property
    def bytes_accessed(self) -> float:
        return max(0.0, self.cost.get("bytes accessed", 0.0))

    @property
    def peak_bytes(self) -> int:
        return int(self.memory.get("peak_bytes", 0))


def find_libtpu() -> str | None:
    """libtpu.so from ``TORCHTPU_LIBTPU`` or the installed ``libtpu`` wheel (``pip install torchtpu[tpu]``)."""
    env = os.environ.get("TORCHTPU_LIBTPU")
    if env:
        return env
    try:
        spec = importlib.util.find_spec("libtpu")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = os.path.join(list(spec.submodule_search_locations)[0], "libtpu.so")
    return path if os.path.exists(path) else None


def find_compiler() -> str:
    """The torchtpu_aot_compile tool: ``TORCHTPU_AOT_COMPILER``, else the newest of the copy installed
    beside the extension and the one in the source tree's build folder."""
    env = os.environ.get("TORCHTPU_AOT_COMPILER")
    if env:
        return env
    found = [p for p in (os.path.join(_PACKAGE_DIR, _TOOL), os.path.join(_REPO_BUILD_DIR, _TOOL)) if os.path.exists(p)]
    if not found:
        raise AotError(f"{_TOOL} is not built: it is a target of CMakeLists.txt (`pip install -e .` builds it)")
    return max(found, key=os.path.getmtime)


def _child_env() -> dict:
    env = dict(os.environ)
    # Without it libtpu spends minutes retrying the cloud metadata server this host does not have.
    env.setdefault("TPU_SKIP_MDS_QUERY", "1")
    # libtpu otherwise takes a lock file and refuses a second process (compiling two topologies at once).
    env.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")
    # XLA_FLAGS here are the CPU plugin's (torchtpu sets one itself); libtpu rejects flags it does not know.
    env.pop("XLA_FLAGS", None)
    return env


def _tail(path: str, limit: int = 2000) -> str:
    with open(path, errors="replace") as f:
        return f.read()[-limit:]


def _result(program: Program, topology: str, line: dict) -> Result:
    return Result(program, topology, bool(line.get("accepted")), line.get("error", ""),
                  float(line.get("compile_seconds", 0.0)), line.get("cost", {}), line.get("memory", {}),
                  line.get("fingerprint", ""))


def compile_programs(programs: Sequence[Program], topology: str, *, options: dict | None = None,
                     replicas: int = 1, program_timeout: float = 600.0) -> tuple[Topology, list[Result]]:
    """Compiles each program for ``topology`` (e.g. ``"v5e:2x2"``); one Result per program, in order. An
    SPMD program is compiled for its partition count (``Program.partitions``), one child per count.
    ``options`` are the plugin's topology options (``num_slices``, ``chips_per_host_bounds``, ``wrap``).
    Raises AotError when the compiler cannot be set up; a rejected or fatal program is a Result."""
    libtpu = find_libtpu()
    if libtpu is None:
        raise AotError("libtpu is not installed: pip install 'torchtpu[tpu]' (or set TORCHTPU_LIBTPU)")
    base = [find_compiler(), "--plugin", libtpu, "--topology", topology, "--replicas", str(replicas)]
    for name, value in (options or {}).items():
        base += ["--option", f"{name}={value}"]
    results: list[Result | None] = [None] * len(programs)
    header = None
    with tempfile.TemporaryDirectory(prefix="torchtpu-aot-") as tmp:
        for i, program in enumerate(programs):
            with open(os.path.join(tmp, f"{i:06d}.mlir"), "w") as f:
                f.write(program.text)
        for partitions in sorted({p.partitions for p in programs}) or [1]:
            command = base + ["--partitions", str(partitions)]
            pending = [i for i, p in enumerate(programs) if p.partitions == partitions]
            while True:
                header, pending = _run_child(command, tmp, programs, pending, topology, results, program_timeout)
                if not pending:
                    break
    assert header is not None
    return header, [r for r in results if r is not None]


def _run_child(command, tmp, programs, pending, topology, results, timeout):
    """Runs one child over the pending programs; returns (topology header, programs still pending)."""
    list_path = os.path.join(tmp, "paths.txt")
    with open(list_path, "w") as f:
        f.writelines(os.path.join(tmp, f"{i:06d}.mlir") + "\n" for i in pending)
    err_path = os.path.join(tmp, "stderr.txt")
    with open(list_path) as stdin, open(err_path, "w") as stderr:
        child = subprocess.Popen(command, stdin=stdin, stdout=subprocess.PIPE, stderr=stderr, env=_child_env(),
                                 text=True)
    lines: queue.Queue = queue.Queue()

    def read() -> None:
        for line in child.stdout:
            lines.put(line)
        lines.put(None)

    threading.Thread(target=read, daemon=True).start()
    header = None
    remaining = list(pending)
    hung = False
    while True:
        try:
            line = lines.get(timeout=timeout)
        except queue.Empty:
            child.kill()  # a hang: the program at the head of the queue is charged with it
            hung = True
            while lines.get() is not None:
                pass
            break
        if line is None:
            break
        data = json.loads(line)
        if header is None:
            if "error" in data:
                child.wait()
                raise AotError(f"libtpu could not set up topology {topology!r}: {data['error']}")
            header = Topology(topology, data["platform"], data["platform_version"], data["device_kind"],
                              data["num_devices"], tuple(data["api_version"]))
            continue
        i = int(os.path.basename(data["path"]).split(".")[0])
        results[i] = _result(programs[i], topology, data)
        remaining.remove(i)
    code = child.wait()
    if header is None:
        raise AotError(f"{command[0]} exited with {code} before describing {topology!r}:\n{_tail(err_path)}")
    if remaining:
        # The child died (or hung) on the first program it had not answered.
        i = remaining.pop(0)
        why = f"the compiler hung for {timeout:.0f} s" if hung else f"the compiler aborted (exit status {code})"
        results[i] = Result(programs[i], topology, False, f"{why}:\n{_tail(err_path)}", crashed=True)
    return header, remaining


def compile_for_topologies(programs: Sequence[Program], topologies: Iterable[str], **kwargs
                           ) -> dict[str, tuple[Topology, list[Result]]]:
    """compile_programs for several topologies, each in its own child, two at a time."""
    names = list(topologies)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {name: pool.submit(compile_programs, programs, name, **kwargs) for name in names}
        return {name: futures[name].result() for name in names}
