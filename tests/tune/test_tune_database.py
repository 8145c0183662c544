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


def test_duplicates_are_dropped_on_load_and_not_written_again(tmp_path):
    path = tmp_path / "db.jsonl"
    lines = [_record(0).to_line(), _record(1).to_line(), _record(0).to_line()]
    path.write_text("\n".join(lines) + "\n")
    db = Database(path)
    assert db.records == [_record(0), _record(1)] and db.skipped == 0
    slower = TuningRecord("w0", "c", _record(1).trace, (1.0,))  # the same measurement key, another time
    assert db.commit(slower) is False and db.commit(_record(2)) is True
    assert path.read_text().count("\n") == 4
    assert Database(path).records == [_record(0), _record(1), _record(2)]


def test_records_name_their_machine_and_queries_can_ask_for_one(tmp_path):
    path = tmp_path / "db.jsonl"
    db = Database(path)
    here = TuningRecord("w0", "c", _record(0).trace, (0.002,), machine="x86_64 AVX2 FMA")
    there = TuningRecord("w0", "c", _record(0).trace, (0.001,), machine="aarch64 (no x86 vector flags)")
    db.commit(here)
    db.commit(there)
    db.commit(_record(1))  # a record that does not say where it was measured
    again = Database(path)
    assert again.records == [here, there, _record(1)]
    assert again.best("w0", "c", "x86_64 AVX2 FMA") == here
    assert again.query("w0", "c", "aarch64 (no x86 vector flags)") == [there]
    assert again.best("w0", "c") == there and len(again.query("w0", "c")) == 3
    assert '"machine"' not in _record(1).to_line()


def test_refresh_reads_what_another_writer_appended(tmp_path):
    path = tmp_path / "db.jsonl"
    mine, theirs = Database(path), Database(path)
    mine.commit(_record(0))
    theirs.commit(_record(1))
    assert theirs.records == [_record(0), _record(1)]  # it read the other writer's record before appending
    assert mine.refresh() == 1 and mine.records == [_record(0), _record(1)]
    assert theirs.commit(_record(0)) is False  # already in the file, from the other writer


def _append_records(path: str, first: int, count: int) -> None:
    db = Database(path)
    for number in range(first, first + count):
        db.commit(_record(number))


def test_concurrent_drivers_leave_no_torn_or_duplicate_record(tmp_path):
    import multiprocessing

    path = tmp_path / "shared.jsonl"
    ctx = multiprocessing.get_context("forkserver")
    writers = [ctx.Process(target=_append_records, args=(str(path), 10 * index, 30)) for index in range(4)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join(300)
        assert writer.exitcode == 0
    lines = path.read_text().split("\n")
    assert lines[-1] == ""
    records = [TuningRecord.from_line(line) for line in lines[:-1]]  # every line parses
    assert len(records) == len({r.key for r in records}) == 60
    assert {r.key for r in records} == {_record(n).key for n in range(60)}
    assert Database(path).skipped == 0


def _final(number: int, at: float) -> TuningRecord:
    plain = _record(number)
    return TuningRecord(plain.workload, plain.target, plain.trace, (0.005,), final={"at": at, "worker_time": 0.001})


def test_the_newest_final_record_is_the_best_and_survives_a_cut_off_line(tmp_path):
    path = tmp_path / "db.jsonl"
    db = Database(path)
    for number in range(3):
        db.commit(_record(number))
    assert db.commit(_final(2, at=100.0)) and db.commit(_final(1, at=200.0))
    assert db.commit(_final(2, at=300.0))  # the same trace chosen again later: a record of its own
    assert not db.commit(_final(2, at=300.0))  # the very same record is stored once
    with open(path, "ab") as file:
        file.write(_final(0, at=400.0).to_line().encode()[:-5])  # a writer killed mid-line
    again = Database(path)
    assert again.skipped == 1 and again.records == db.records and len(again) == 3
    assert again.finals == db.finals and [f.chosen_at for f in again.finals] == [100.0, 200.0, 300.0]
    # a final record is preferred to any search record, however fast; the newest one wins
    assert again.best("w0", "c") == _final(2, at=300.0) and again.best("w0", "c").mean_time > 0.001
    assert again.query("w0", "c")[0] == _record(0)  # the search's records alone, fastest first
    assert again.final_choice("w0", "c", "another machine") is None
    bad = json.loads(_final(0, at=1.0).to_line())
    bad["final"] = [1]
    with pytest.raises(ValueError, match="final"):
        TuningRecord.from_line(json.dumps(bad))
