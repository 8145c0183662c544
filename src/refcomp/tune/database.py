"""The tuning database: append-only JSON lines of measured candidates.

Each line is one `TuningRecord`: the workload's structural hash, the target string, the trace
(JSON, decisions included) and the measured run times in seconds.  A record is written as one
line with a single `write` followed by flush and fsync, so a tuner killed mid-write leaves at
most one incomplete last line; loading skips any line that does not parse (and says how many in
`skipped`), so every committed record reloads.  The file holds no paths or pointers, so it can be
copied to another machine with the same target and used there.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

from ..errors import RefcompError

RECORD_VERSION = 1


@dataclass(frozen=True)
class TuningRecord:
    """One measured candidate of one workload on one target."""

    workload: str
    target: str
    trace: dict
    run_times: tuple[float, ...]

    @property
    def mean_time(self) -> float:
        """Mean of the run times (seconds)."""
        return sum(self.run_times) / len(self.run_times)

    def to_line(self) -> str:
        """The record as one JSON line (no newline inside)."""
        return json.dumps({"version": RECORD_VERSION, "workload": self.workload, "target": self.target,
                           "trace": self.trace, "run_times": list(self.run_times)}, separators=(",", ":"))

    @staticmethod
    def from_line(line: str) -> "TuningRecord":
        """Parse one line; raises ValueError (or KeyError, TypeError) when it is not a record."""
        data = json.loads(line)
        if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
            raise ValueError("not a tuning record of this version")
        times = tuple(float(t) for t in data["run_times"])
        if not times or not isinstance(data["trace"], dict):
            raise ValueError("a record needs a trace object and at least one run time")
        return TuningRecord(str(data["workload"]), str(data["target"]), data["trace"], times)


@dataclass
class Database:
    """Records in memory, mirrored to an append-only JSON-lines file when `path` is given."""

    path: Path | None = None
    records: list[TuningRecord] = field(default_factory=list)
    skipped: int = 0  # lines of the file that did not parse (a cut-off last line, foreign text)

    def __post_init__(self) -> None:
        if self.path is None:
            return
        self.path = Path(self.path)
        if self.path.exists():
            self._load()

    def _load(self) -> None:
        text = self.path.read_bytes().decode("utf-8", errors="replace")
        for line in text.split("\n"):
            if not line.strip():
                continue
            try:
                self.records.append(TuningRecord.from_line(line))
            except (ValueError, KeyError, TypeError):
                self.skipped += 1

    def commit(self, record: TuningRecord) -> None:
        """Add a record; with a file, it is on disk (flushed and fsynced) when this returns."""
        if not isinstance(record, TuningRecord):
            raise RefcompError(f"Database.commit: expected a TuningRecord, got {type(record).__name__}")
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as file:
                # A previous writer cut off mid-line would glue this record onto its fragment:
                # start on a fresh line whenever the file does not end with one.
                prefix = b""
                if file.tell() > 0:
                    with open(self.path, "rb") as check:
                        check.seek(-1, os.SEEK_END)
                        prefix = b"" if check.read(1) == b"\n" else b"\n"
                file.write(prefix + record.to_line().encode() + b"\n")
                file.flush()
                os.fsync(file.fileno())
        self.records.append(record)

    def __len__(self) -> int:
        return len(self.records)

    def __iter__(self) -> Iterator[TuningRecord]:
        return iter(self.records)

    def query(self, workload: str, target: str) -> list[TuningRecord]:
        """The records of one workload on one target, fastest first."""
        found = [r for r in self.records if r.workload == workload and r.target == target]
        return sorted(found, key=lambda r: r.mean_time)

    def best(self, workload: str, target: str) -> TuningRecord | None:
        """The fastest record of a workload on a target, or None."""
        found = self.query(workload, target)
        return found[0] if found else None

    def schedule_for(self, func, target: str):
        """func scheduled by its fastest record on target, or None when there is none (the
        method `refcomp.graph.build(..., tuning_database=db)` calls for each kernel)."""
        from .search import best_scheduled

        return best_scheduled(func, self, target)
