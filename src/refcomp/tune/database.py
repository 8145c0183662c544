"""The tuning database: append-only JSON lines of measured candidates.

Each line is one `TuningRecord`: the workload's structural hash, the target string, the machine
that measured it, the trace (JSON, decisions included) and the measured run times in seconds.
A record is written as one line with a single `write` followed by flush and fsync, so a tuner
killed mid-write leaves at most one incomplete last line; loading skips any line that does not
parse (and says how many in `skipped`), so every committed record reloads.  The file holds no
paths or pointers, so it can be copied to another machine with the same target and used there.

A search ends with a final comparison (`refcomp.tune.final`): its few best candidates and the
default schedule re-timed side by side in one process.  The winner is written as a *final* record
(a `final` object on the line: when it was chosen, its time in the search's worker, the default's
time in the comparison); `best` and `schedule_for` prefer the newest final record of a workload
over the fastest search record, whose worker times need not carry over to the caller's process.
`records` and `query` hold the search records, `finals` the final ones.

Several tuning drivers (processes, machines sharing a file system) may append to one file:
every append holds an exclusive `flock` on the file, reads the records the others appended
since, and writes only a record whose key (workload, target, machine, trace) is new; readers
hold a shared lock.  So no record is torn by a concurrent append and none is stored twice;
loading also drops duplicates, should a file have been concatenated from others.
"""
from __future__ import annotations

import json
import os
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator

try:
    import fcntl
except ImportError:  # not POSIX: appends are not locked against other processes
    fcntl = None  # type: ignore[assignment]

from ..errors import RefcompError

RECORD_VERSION = 1


@dataclass(frozen=True)
class TuningRecord:
    """One measured candidate of one workload on one target, measured on `machine` (the runner's
    `machine_description()`; empty in records that do not say)."""

    workload: str
    target: str
    trace: dict
    run_times: tuple[float, ...]
    machine: str = ""
    final: dict | None = None  # set on the winner of a final comparison (refcomp.tune.final)

    @property
    def mean_time(self) -> float:
        """Mean of the run times (seconds)."""
        return sum(self.run_times) / len(self.run_times)

    @property
    def key(self) -> tuple[str, str, str, str]:
        """What makes two records the same measurement: workload, target, machine and trace."""
        trace = json.dumps(self.trace, sort_keys=True, separators=(",", ":"))
        if self.final is not None:  # each final comparison is its own record, even for the same trace
            trace += "|final" + json.dumps(self.final, sort_keys=True, separators=(",", ":"))
        return self.workload, self.target, self.machine, trace

    @property
    def chosen_at(self) -> float:
        """When a final record was chosen (seconds since the epoch; 0 for a search record)."""
        at = (self.final or {}).get("at", 0.0)
        return float(at) if isinstance(at, (int, float)) else 0.0

    def to_line(self) -> str:
        """The record as one JSON line (no newline inside)."""
        data = {"version": RECORD_VERSION, "workload": self.workload, "target": self.target}
        if self.machine:
            data["machine"] = self.machine
        data.update(trace=self.trace, run_times=list(self.run_times))
        if self.final is not None:
            data["final"] = self.final
        return json.dumps(data, separators=(",", ":"))

    @staticmethod
    def from_line(line: str) -> "TuningRecord":
        """Parse one line; raises ValueError (or KeyError, TypeError) when it is not a record."""
        data = json.loads(line)
        if not isinstance(data, dict) or data.get("version") != RECORD_VERSION:
            raise ValueError("not a tuning record of this version")
        times = tuple(float(t) for t in data["run_times"])
        if not times or not isinstance(data["trace"], dict):
            raise ValueError("a record needs a trace object and at least one run time")
        final = data.get("final")
        if final is not None and not isinstance(final, dict):
            raise ValueError("a record's final comparison must be an object")
        return TuningRecord(str(data["workload"]), str(data["target"]), data["trace"], times,
                            str(data.get("machine", "")), final)


@contextmanager
def _locked(file: IO[bytes], exclusive: bool) -> Iterator[None]:
    if fcntl is None:
        yield
        return
    fcntl.flock(file.fileno(), fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
    try:
        yield
    finally:
        fcntl.flock(file.fileno(), fcntl.LOCK_UN)


@dataclass
class Database:
    """Records in memory, mirrored to an append-only JSON-lines file when `path` is given: the
    search's records in `records`, the winners of final comparisons in `finals`."""

    path: Path | None = None
    records: list[TuningRecord] = field(default_factory=list)
    finals: list[TuningRecord] = field(default_factory=list)
    skipped: int = 0  # lines of the file that did not parse (a cut-off last line, foreign text)
    _keys: set = field(default_factory=set, init=False, repr=False, compare=False)
    _offset: int = field(default=0, init=False, repr=False, compare=False)  # bytes of the file read so far

    def __post_init__(self) -> None:
        self._keys = {r.key for r in self.records + self.finals}
        if self.path is None:
            return
        self.path = Path(self.path)
        if self.path.exists():
            self.refresh()

    def refresh(self) -> int:
        """Read the records other writers appended to the file since; returns how many were new."""
        if self.path is None or not self.path.exists():
            return 0
        with open(self.path, "rb") as file, _locked(file, exclusive=False):
            return self._read_new(file)

    def _read_new(self, file: IO[bytes]) -> int:
        file.seek(self._offset)
        data = file.read()
        self._offset += len(data)
        added = 0
        # Under the lock every line is complete except a writer's that died mid-line: its
        # fragment is skipped (the next append starts on a fresh line).
        for line in data.decode("utf-8", errors="replace").split("\n"):
            if not line.strip():
                continue
            try:
                record = TuningRecord.from_line(line)
            except (ValueError, KeyError, TypeError):
                self.skipped += 1
                continue
            added += self._remember(record)
        return added

    def _remember(self, record: TuningRecord) -> bool:
        if record.key in self._keys:
            return False
        self._keys.add(record.key)
        (self.records if record.final is None else self.finals).append(record)
        return True

    def commit(self, record: TuningRecord) -> bool:
        """Add a record; with a file, it is on disk (flushed and fsynced) when this returns.

        False when the database already holds a record with the same key (this writer's or
        another's): the earlier measurement is kept and nothing is written."""
        if not isinstance(record, TuningRecord):
            raise RefcompError(f"Database.commit: expected a TuningRecord, got {type(record).__name__}")
        if self.path is None:
            return self._remember(record)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "a+b") as file, _locked(file, exclusive=True):
            self._read_new(file)
            if record.key in self._keys:
                return False
            file.seek(0, os.SEEK_END)
            end = file.tell()
            # A previous writer cut off mid-line would glue this record onto its fragment:
            # start on a fresh line whenever the file does not end with one.
            prefix = b""
            if end > 0:
                file.seek(end - 1)
                prefix = b"" if file.read(1) == b"\n" else b"\n"
            line = prefix + record.to_line().encode() + b"\n"
            file.write(line)
            file.flush()
            os.fsync(file.fileno())
            self._offset = end + len(line)
        return self._remember(record)

    def final_choice(self, workload: str, target: str, machine: str | None = None) -> TuningRecord | None:
        """The newest final record of a workload on a target (and machine, when given), or None."""
        found = [r for r in self.finals if r.workload == workload and r.target == target
                 and (machine is None or r.machine == machine)]
        return max(reversed(found), key=lambda r: r.chosen_at) if found else None

    def __len__(self) -> int:
        """The number of search records (final records not counted)."""
        return len(self.records)

    def __iter__(self) -> Iterator[TuningRecord]:
        return iter(self.records)

    def query(self, workload: str, target: str, machine: str | None = None) -> list[TuningRecord]:
        """The records of one workload on one target, fastest first; with `machine`, only those
        measured on that machine."""
        found = [r for r in self.records if r.workload == workload and r.target == target
                 and (machine is None or r.machine == machine)]
        return sorted(found, key=lambda r: r.mean_time)

    def best(self, workload: str, target: str, machine: str | None = None) -> TuningRecord | None:
        """The record to use for a workload on a target (and machine, when given): its newest final
        record, else its fastest search record, else None."""
        final = self.final_choice(workload, target, machine)
        if final is not None:
            return final
        found = self.query(workload, target, machine)
        return found[0] if found else None

    def schedule_for(self, func, target: str):
        """func scheduled by its fastest record on target measured on this machine, else by its
        fastest record from any machine, or None when there is none (the method
        `refcomp.graph.build(..., tuning_database=db)` calls for each kernel)."""
        from .runner import machine_description
        from .search import best_scheduled

        scheduled = best_scheduled(func, self, target, machine_description(target))
        return scheduled if scheduled is not None else best_scheduled(func, self, target)
