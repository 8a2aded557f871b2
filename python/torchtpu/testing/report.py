"""Renders OpInfo conformance results (see :mod:`torchtpu.testing.opinfo`) as JSON, markdown and a plot."""
from __future__ import annotations

import collections
import dataclasses
import datetime
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from torchtpu.testing.opinfo import CheckResult, DtypeResult, OpResult, Status

# Plot colours, and the order of the stacked segments and table columns.
STATUS_COLORS: dict[Status, str] = {
    Status.PASS: "#2e7d32",
    Status.FALLBACK: "#f9a825",
    Status.MISMATCH: "#c62828",
    Status.ERROR: "#6a1b9a",
    Status.SKIPPED: "#9e9e9e",
}
GRAD_COLUMN = "float32 grad"


@dataclass
class RunInfo:
    command: str
    torch_version: str
    dtypes: list[str]
    samples: int
    check_grad: bool
    seconds: float
    date: str = dataclasses.field(default_factory=lambda: datetime.datetime.now().isoformat(timespec="seconds"))


@dataclass
class ColumnTotals:
    """Counts of one column (a dtype's forward check, or the float32 gradient check) by status."""
    counts: dict[str, int]

    @property
    def attempted(self) -> int:
        return sum(n for status, n in self.counts.items() if status != Status.SKIPPED.value)

    @property
    def pass_rate(self) -> float:
        return self.counts[Status.PASS.value] / self.attempted if self.attempted else 0.0


@dataclass
class Summary:
    totals: dict[str, ColumnTotals]  # by column: each dtype, then GRAD_COLUMN when gradients were checked
    top_fallbacks: list[tuple[str, int, list[str]]]  # (aten op, OpInfos it blocks, a few of them)
    top_errors: list[tuple[str, int, list[str]]]  # (message, OpInfo runs it ended, a few of them)


def _columns(result: OpResult) -> dict[str, CheckResult]:
    """The checks of one op by column name."""
    columns = {dtype: r.forward for dtype, r in result.dtypes.items()}
    grads = [r.grad for r in result.dtypes.values() if r.grad is not None]
    if grads:
        columns[GRAD_COLUMN] = grads[0]
    return columns


def _ranked(occurrences: dict[str, list[str]], limit: int) -> list[tuple[str, int, list[str]]]:
    ranked = sorted(occurrences.items(), key=lambda item: (-len(item[1]), item[0]))[:limit]
    return [(key, len(ops), ops[:5]) for key, ops in ranked]


def _error_key(reason: str) -> str:
    """An error message with its numbers blanked, so that errors differing only in shapes group together."""
    return re.sub(r"\b\d+\b", "N", reason)


def summarize(results: Sequence[OpResult], dtypes: Sequence[str], top: int = 30) -> Summary:
    """Counts by column and status; the ``top`` aten ops that fell back, ranked by the OpInfos in which they
    did (in any column); and the ``top`` errors, ranked by the runs they ended."""
    columns = list(dtypes) + ([GRAD_COLUMN] if any(GRAD_COLUMN in _columns(r) for r in results) else [])
    counts = {column: collections.Counter() for column in columns}
    blocked_by: dict[str, list[str]] = collections.defaultdict(list)
    errors: dict[str, list[str]] = collections.defaultdict(list)
    for result in results:
        blocking: set[str] = set()
        for column, check in _columns(result).items():
            counts[column][check.status.value] += 1
            blocking.update(check.fallback_ops)
            if check.status is Status.ERROR:
                errors[_error_key(check.reason)].append(f"{result.name} ({column})")
        for aten_op in blocking:
            blocked_by[aten_op].append(result.name)
    totals = {column: ColumnTotals({s.value: counts[column][s.value] for s in Status}) for column in columns}
    return Summary(totals, _ranked(blocked_by, top), _ranked(errors, top))


def totals_text(summary: Summary) -> str:
    lines = []
    for column, totals in summary.totals.items():
        counts = ", ".join(f"{status} {n}" for status, n in totals.counts.items())
        lines.append(f"{column}: {totals.counts[Status.PASS.value]}/{totals.attempted} pass natively "
                     f"({totals.pass_rate:.1%} of attempted); {counts}")
    return "\n".join(lines)


def write_json(results: Sequence[OpResult], summary: Summary, info: RunInfo, path: str | Path) -> None:
    document = {"run": dataclasses.asdict(info), "summary": dataclasses.asdict(summary),
                "ops": [dataclasses.asdict(r) for r in results]}
    _prepare(path).write_text(json.dumps(document, indent=1) + "\n")


def read_json(path: str | Path) -> tuple[list[OpResult], RunInfo]:
    """The results and run description that write_json wrote."""
    document = json.loads(Path(path).read_text())

    def check(fields: dict | None) -> CheckResult | None:
        return None if fields is None else CheckResult(**{**fields, "status": Status(fields["status"])})

    results = [OpResult(op["name"], {dtype: DtypeResult(**{**fields, "forward": check(fields["forward"]),
                                                          "grad": check(fields["grad"])})
                                     for dtype, fields in op["dtypes"].items()})
               for op in document["ops"]]
    return results, RunInfo(**document["run"])


def _cell(text: str) -> str:
    """Text safe inside a markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _details(result: OpResult) -> str:
    """Why each column did not pass (columns with the same story share it), then the notes."""
    stories: dict[str, list[str]] = collections.defaultdict(list)
    for column, check in _columns(result).items():
        story = " ".join(part for part in (check.reason, _fallback_text(check.fallback_ops)) if part)
        if story:
            stories[story].append(column)
    notes = sorted({note for r in result.dtypes.values() for note in r.notes})
    return _cell("; ".join([f"{', '.join(columns)}: {story}" for story, columns in stories.items()] + notes))


def _fallback_text(fallback_ops: Sequence[str]) -> str:
    return f"[fallback: {', '.join(fallback_ops)}]" if fallback_ops else ""


def write_markdown(results: Sequence[OpResult], summary: Summary, info: RunInfo, path: str | Path) -> None:
    columns = list(summary.totals)
    checked = "outputs and float32 input gradients" if info.check_grad else "outputs"
    lines = [
        "# OpInfo conformance of the tpu device",
        "",
        f"Produced by `{info.command}` on {info.date} (torch {info.torch_version}, {info.seconds:g} s).",
        "",
        (f"Every OpInfo of PyTorch's `op_db` runs its first {info.samples} sample inputs on `tpu` and on CPU; "
        f"{checked} are compared. **pass**: values match and no op ran through the CPU fallback; **fallback**: "
        "values match but the listed aten ops fell back; **mismatch**: values, dtype, shape or device differ; "
        "**error**: the tpu side raised; **skipped**: nothing comparable (reason given). Pass rates count native "
        "passes over attempted (not skipped) runs. Tolerances and rules: `python/torchtpu/testing/opinfo.py`."),
        "",
        "## Totals",
        "",
        "| | " + " | ".join(s.value for s in Status) + " | pass rate |",
        "|---|" + "---:|" * (len(Status) + 1),
    ]
    for column, totals in summary.totals.items():
        counts = " | ".join(str(totals.counts[s.value]) for s in Status)
        lines.append(f"| {column} | {counts} | {totals.counts[Status.PASS.value]}/{totals.attempted} "
                     f"({totals.pass_rate:.1%}) |")
    lines += ["", "## Aten ops falling back (forward or gradient), by OpInfos affected", "", "| aten op | OpInfos | e.g. |", "|---|---:|---|"]
    lines += [f"| `{op}` | {n} | {_cell(', '.join(examples))} |" for op, n, examples in summary.top_fallbacks]
    lines += ["", "## Most common errors", "", "| error | runs | e.g. |", "|---|---:|---|"]
    lines += [f"| {_cell(message)} | {n} | {_cell(', '.join(examples))} |" for message, n, examples in summary.top_errors]
    lines += ["", "## Per op", "", "| op | " + " | ".join(columns) + " | details |", "|---|" + "---|" * (len(columns) + 1)]
    for result in sorted(results, key=lambda r: r.name):
        checks = _columns(result)
        cells = " | ".join(checks[c].status.value if c in checks else "" for c in columns)
        lines.append(f"| `{result.name}` | {cells} | {_details(result)} |")
    _prepare(path).write_text("\n".join(lines) + "\n")


def write_plot(summary: Summary, path: str | Path) -> None:
    """Stacked bars, one per column, of the counts by status."""
    import matplotlib
    matplotlib.use("Agg")  # no display: render to a file only
    from matplotlib import pyplot

    columns = list(summary.totals)
    figure, axes = pyplot.subplots(figsize=(2.2 * len(columns) + 3, 5))
    bottoms = [0] * len(columns)
    # Segments thinner than a label would hide each other's numbers; the markdown report has every count.
    min_labelled = 0.03 * max(sum(summary.totals[c].counts.values()) for c in columns)
    for status, color in STATUS_COLORS.items():
        heights = [summary.totals[c].counts[status.value] for c in columns]
        bars = axes.bar(columns, heights, bottom=bottoms, color=color, label=status.value, width=0.6)
        axes.bar_label(bars, labels=[str(h) if h >= min_labelled else "" for h in heights], label_type="center",
                       color="white", fontsize=9)
        bottoms = [b + h for b, h in zip(bottoms, heights)]
    for index, column in enumerate(columns):
        axes.annotate(f"{summary.totals[column].pass_rate:.0%} of attempted pass", (index, bottoms[index]),
                      ha="center", va="bottom", fontsize=9)
    axes.set_ylim(0, max(bottoms) * 1.08)  # room for the pass-rate labels
    axes.set_ylabel("OpInfos")
    axes.set_title("OpInfo conformance of tpu against CPU")
    axes.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    figure.tight_layout()
    figure.savefig(_prepare(path), dpi=110)
    pyplot.close(figure)


def _prepare(path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    return path
