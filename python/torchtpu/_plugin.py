"""Finds the PJRT plugin to load: libtpu on a TPU host, otherwise the xla-cpu-pjrt wheel.

``TORCHTPU_PJRT_PLUGIN=/path/to/plugin.so`` overrides both (read by the C++ runtime itself).
"""
from __future__ import annotations

import glob
import importlib.util
import os


def _package_dir(name: str) -> str | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return list(spec.submodule_search_locations)[0]


def _tpu_present() -> bool:
    return bool(glob.glob("/dev/accel*") or glob.glob("/dev/vfio/[0-9]*"))


def candidates() -> list[str]:
    """Plugin paths in the order they are tried."""
    paths = []
    libtpu = _package_dir("libtpu")
    if libtpu and _tpu_present():
        path = os.path.join(libtpu, "libtpu.so")
        if os.path.exists(path):
            paths.append(path)
    cpu = _package_dir("xla_plugins.xla_cpu_pjrt")
    if cpu:
        path = os.path.join(cpu, "xla_cpu_pjrt.so")
        if os.path.exists(path):
            paths.append(path)
    return paths
