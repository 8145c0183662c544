"""The tuning database: JSON lines that survive a writer killed mid-line; structural workload hashes."""
import json
import os

import pytest

from refcomp import te, workloads
from refcomp.errors import RefcompError
from refcomp.tune import Database, TuningRecord, structural_hash


def _record(number: int, workload: str = "w0", target: str = "c") -> TuningRecord:
    trace = {"version": 1, "instructions": [{"kind": "get_block", "args": {"name": f"B{number}"},
                                             "outputs": "b0", "multi": False}]}
    return TuningRecord(workload, target, trace, (0.001 * (number + 1), 0.0011 * (number + 1)))


def test_records_round_trip_through_the_file(tmp_path):
    path = tmp_path / "db.jsonl"
    db = Database(path)
    for number in range(3):
        db.commit(_record(number))
    again = Database(path)
    assert again.records == db.records
    assert again.skipped == 0
    assert again.best("w0", "c") == _record(0)
    assert [r.mean_time for r in again.query("w0", "c")] == sorted(r.mean_time for r in db.records)
    assert again.query("w0", "cuda") == [] and again.best("other", "c") is None


@pytest.mark.parametrize("cut", [1, 7, 20, -1])
def test_a_file_cut_off_mid_line_reloads_every_complete_record(tmp_path, cut):
    path = tmp_path / "db.jsonl"
    db = Database(path)
    for number in range(4):
        db.commit(_record(number))
    data = path.read_bytes()
    last_start = data.rstrip(b"\n").rfind(b"\n") + 1
    end = len(data) - 1 if cut == -1 else last_start + cut  # -1: everything but the final newline
    path.write_bytes(data[:end])
    reloaded = Database(path)
    complete = 4 if cut == -1 else 3
    assert reloaded.records == db.records[:complete]
    assert reloaded.skipped == 4 - complete
    # A tuner that starts again appends on a fresh line: the fragment never swallows a new record.
    reloaded.commit(_record(9))
    final = Database(path)
    assert final.records == db.records[:complete] + [_record(9)]


def test_lines_that_are_not_records_are_skipped(tmp_path):
    path = tmp_path / "db.jsonl"
    path.write_text("not json\n" + json.dumps({"version": 99}) + "\n" + _record(1).to_line() + "\n\n")
    db = Database(path)
    assert db.records == [_record(1)] and db.skipped == 2


def test_commit_rejects_other_objects(tmp_path):
    with pytest.raises(RefcompError, match="expected a TuningRecord"):
        Database(tmp_path / "db.jsonl").commit({"workload": "w"})


def test_the_file_is_synced_on_every_commit(tmp_path, monkeypatch):
    synced = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (synced.append(fd), real(fd)))
    db = Database(tmp_path / "db.jsonl")
    db.commit(_record(0))
    db.commit(_record(1))
    assert len(synced) == 2


def test_structural_hash_ignores_names_and_identity():
    assert structural_hash(workloads.matmul(32, 16, 8)) == structural_hash(workloads.matmul(32, 16, 8))
    A = te.placeholder((32, 8), "float32", name="X")
    B = te.placeholder((8, 16), "float32", name="Y")
    k = te.reduce_axis((0, 8), name="r")
    C = te.compute((32, 16), lambda p, q: te.sum(A[p, k] * B[k, q], axis=k), name="C")
    assert structural_hash(te.create_prim_func([A, B, C])) == structural_hash(workloads.matmul(32, 16, 8))


def test_structural_hash_tells_different_workloads_apart():
    hashes = {structural_hash(workloads.matmul(32, 16, 8)), structural_hash(workloads.matmul(32, 16, 16)),
              structural_hash(workloads.matmul(32, 16, 8, "float64")), structural_hash(workloads.exp_scale(64))}
    assert len(hashes) == 4
