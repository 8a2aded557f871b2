"""Process-wide switches that also work as ``with`` blocks (eager mode, value checks)."""
from __future__ import annotations

from typing import Any, Callable


class ProcessSetting:
    """Constructing it switches the setting for the rest of the process; as a ``with`` block, the previous
    value returns on exit."""

    def __init__(self, value: Any, get: Callable[[], Any], set_: Callable[[Any], None]) -> None:
        self._previous = get()
        self._set = set_
        set_(value)

    def __enter__(self) -> "ProcessSetting":
        return self

    def __exit__(self, *exc) -> None:
        self._set(self._previous)
