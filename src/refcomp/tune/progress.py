"""What a person watching a tuning run sees: a progress bar and the tuning curve as a PNG.

`ProgressBar` is a `progress` callback for `tune` (trials, total, best GFLOP/s, seconds) that
draws one line: a bar, the trials, the best throughput so far and an estimate of the time left
(from the mean time per trial so far).  On a terminal the line is redrawn in place; elsewhere
(a log file, CI) each update is its own line.

`plot_curve` draws best GFLOP/s against trials and against wall time, side by side, with
matplotlib (an optional dependency: `pip install matplotlib`); without it, it raises a
RefcompError that says so, and `refcomp tune` prints that message instead of a plot.
"""
from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Sequence, TextIO

from ..errors import RefcompError


def format_seconds(seconds: float) -> str:
    """`42 s`, `3 min 05 s`, `1 h 02 min`."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


@dataclass
class ProgressBar:
    """A progress callback drawing `[#####.....] 32/64 trials  best 41.2 GFLOP/s  12 s, ETA 12 s`."""

    stream: TextIO = field(default_factory=lambda: sys.stderr)
    width: int = 24
    label: str = ""
    in_place: bool | None = None  # None: redraw in place when the stream is a terminal
    lines: list[str] = field(default_factory=list)

    def line(self, trials: int, total: int, gflops: float, seconds: float) -> str:
        """The text of one update."""
        done = min(1.0, trials / total) if total else 1.0
        filled = int(round(done * self.width))
        eta = seconds / trials * (total - trials) if trials else float("nan")
        eta_text = format_seconds(eta) if trials and trials < total else ("done" if trials >= total else "?")
        label = f"{self.label}  " if self.label else ""
        return (f"{label}[{'#' * filled}{'.' * (self.width - filled)}] {trials}/{total} trials  "
                f"best {gflops:.1f} GFLOP/s  {format_seconds(seconds)}, ETA {eta_text}")

    def __call__(self, trials: int, total: int, gflops: float, seconds: float) -> None:
        text = self.line(trials, total, gflops, seconds)
        self.lines.append(text)
        in_place = self.in_place if self.in_place is not None else bool(getattr(self.stream, "isatty", lambda: False)())
        if in_place:
            end = "\n" if trials >= total else ""
            self.stream.write("\r\x1b[2K" + text + end)
        else:
            self.stream.write(text + "\n")
        self.stream.flush()

    def note(self, text: str) -> None:
        """A line of its own under the bar (tune's `log`: which contestant the final comparison chose)."""
        self.lines.append(text)
        self.stream.write(text + "\n")
        self.stream.flush()


def matplotlib_available() -> bool:
    """Whether the optional matplotlib dependency imports."""
    try:
        import matplotlib  # noqa: F401
    except Exception:
        return False
    return True


def plot_curve(curve: Sequence[tuple[int, float, float]], flops: float, path: str, title: str = "") -> str:
    """Write a PNG of best GFLOP/s against trials and against wall time; returns the path.

    curve holds (trials, seconds, best time in seconds) points, as TuneResult.curve does; flops
    is the work of one call (TuneResult.flops)."""
    if not matplotlib_available():
        raise RefcompError("tune: the tuning-curve plot needs matplotlib, which is not installed "
                           "(pip install matplotlib)")
    if not curve:
        raise RefcompError("tune: no measured trials to plot")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    trials = [t for t, _, _ in curve]
    seconds = [s for _, s, _ in curve]
    gflops = [flops / best / 1e9 if best < float("inf") else 0.0 for _, _, best in curve]
    figure, (by_trials, by_time) = plt.subplots(1, 2, figsize=(10, 4), sharey=True)
    by_trials.step(trials, gflops, where="post")
    by_trials.set_xlabel("trials")
    by_trials.set_ylabel("best GFLOP/s")
    by_time.step(seconds, gflops, where="post")
    by_time.set_xlabel("wall time (s)")
    for axis in (by_trials, by_time):
        axis.grid(True, alpha=0.3)
    if title:
        figure.suptitle(title)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
