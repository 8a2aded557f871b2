"""Applies a change to a third-party module right after the module first runs, or at once when it already
has, without importing it from ``import torchtpu`` (Hugging Face libraries are heavy to import)."""
from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from typing import Callable


class _AfterImport(importlib.abc.MetaPathFinder):
    """Finds ``name`` through the other finders and calls ``patch(module)`` once its module has run."""

    def __init__(self, name: str, patch: Callable):
        self.name = name
        self.patch = patch

    def find_spec(self, fullname, path, target=None):
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if isinstance(finder, _AfterImport) or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                break
        else:
            return None
        loader = spec.loader
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        exec_module = loader.exec_module
        patch = self.patch

        def exec_then_patch(module):
            exec_module(module)
            patch(module)

        loader.exec_module = exec_then_patch
        return spec


def after_import(name: str, patch: Callable) -> None:
    """``patch(module)`` now if module ``name`` is loaded, otherwise right after it first runs; nothing when its
    top-level package is not installed."""
    if name in sys.modules:
        patch(sys.modules[name])
    elif importlib.util.find_spec(name.split(".")[0]) is not None:
        sys.meta_path.insert(0, _AfterImport(name, patch))
