"""Where a benchmark's results go: results/<name>.json and a bar-chart figure results/<name>.png."""
from __future__ import annotations

import json
import pathlib

RESULTS = pathlib.Path(__file__).resolve().parent / "results"


def write(name: str, results: dict, panels: list[tuple[str, str, dict[str, float]]], width: float = 4.5) -> None:
    """Writes the results and one bar panel per (title, y label, {bar label: value})."""
    import matplotlib

    matplotlib.use("Agg")  # headless: write a file, never open a window
    import matplotlib.pyplot as plt

    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps(results, indent=1))
    fig, axes = plt.subplots(1, len(panels), figsize=(width * len(panels), 3.4), squeeze=False)
    palette = ["#888", "#bbb", "#c84", "#4a4", "#2a6", "#c44"]
    for ax, (title, ylabel, bars) in zip(axes[0], panels):
        ax.bar(list(bars), list(bars.values()), color=palette[:len(bars)])
        ax.set_title(title)
        ax.set_ylabel(ylabel)
        ax.tick_params(axis="x", labelrotation=15, labelsize=8)
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=120)
    plt.close(fig)
    print(f"wrote {RESULTS / name}.json and .png")
