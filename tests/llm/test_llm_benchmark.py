"""benchmarks/llm.py runs end to end at tiny sizes and reports the fields the issue asks for."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest

from decoding_helpers import tiny_config, write_checkpoint
from refcomp.llm.reference import random_weights

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "benchmarks" / "llm.py"
pytestmark = pytest.mark.skipif(not SCRIPT.exists(), reason="benchmarks/llm.py is not in this checkout")


def run_benchmark(tmp_path, cases: str) -> tuple[list[str], dict]:
    config = tiny_config(vocab=256, hidden=32, layers=1, heads=4, kv_heads=2, inter=48, max_pos=512)
    write_checkpoint(tmp_path / "m", config, random_weights(config, seed=1))
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--model", str(tmp_path / "m"), "--reference", "--threads", "1",
         "--cases", cases, "--new-tokens", "6", "--budgets", "16,32", "--gammas", "1,3", "--json"],
        capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("ISA: ") and "reference model" in lines[1]
    return lines, json.loads(lines[-1])["cases"]


def test_magicdec_case(tmp_path):
    lines, cases = run_benchmark(tmp_path, "magicdec_b2_s96")
    magic = cases["magicdec_b2_s96"]
    assert magic["identical"] is True and magic["gamma"] in (0, 1, 3) and magic["K"] in (16, 32)  # 0: done while planning
    assert (magic["gamma"] == 0 or 0 <= magic["alpha_pilot"] <= 1) and magic["predicted"] > 0 and magic["ratio"] > 0
    assert set(magic["gammas_used"]) <= {1, 3} and magic["switches"] >= 0 and magic["plan_schedule"][0] == ["pilot", 1]
    assert sum(count for _, count in magic["plan_schedule"] + magic["schedule"]) == magic["rounds"] + magic["steps"]
    for label, mode in magic["modes"].items():
        assert mode["rows"] > 0 and mode["tokens"] >= mode["rows"] and mode["ms"] >= 0
        if label not in ("pilot", "0"):
            assert len(mode["alpha_by_position"]) == int(label) and 1 <= mode["omega"] <= int(label) + 1
    assert magic["kv_bytes_per_token"] == 2 * 1 * 2 * 8 * 4 and magic["unit"] == "ms/token"
    assert isinstance(magic["declined"], bool) and magic["refcomp"] * magic["ratio"] == pytest.approx(magic["baseline"])
    assert any(line.strip().startswith("plan (pilotx1 ") for line in lines)
    assert any(line.strip().startswith("schedule ") and "switches" in line for line in lines)
    assert any("bytes per token" in line and "peak resident memory" in line for line in lines)


@pytest.mark.slow
def test_decode_vs_torch_case(tmp_path):
    pytest.importorskip("transformers")
    _, cases = run_benchmark(tmp_path, "decode_b2_s48_vs_torch")
    decode = cases["decode_b2_s48_vs_torch"]
    assert decode["unit"] == "ms/token" and decode["ratio"] > 0 and decode["max_logit_diff"] < 1e-3
    assert decode["token_agreement"] == 1.0


def test_memory_case(tmp_path):
    lines, cases = run_benchmark(tmp_path, "memory_b2_s64")
    memory = cases["memory_b2_s64"]
    assert memory["kv_bytes_per_token"] == 2 * 1 * 2 * 8 * 4 and memory["peak_rss_mib"] > 0
    assert memory["refcomp"] > 0 and memory["decode_step_ms"] > 0 and memory["ratio"] == 1.0
    assert any("bytes per token" in line and "peak resident memory" in line for line in lines)


DENSE_SCRIPT = SCRIPT.parent / "llm_dense.py"


@pytest.mark.slow  # two builds of the dense functions: 30-40 s on a shared machine
@pytest.mark.skipif(not DENSE_SCRIPT.exists(), reason="benchmarks/llm_dense.py is not in this checkout")
def test_dense_benchmark_checks_then_reports_each_row_count(tmp_path):
    # shapes refcomp's GEMM recipe tiles (N a multiple of 32, K of 16) where the CPU has AVX-512
    config = tiny_config(vocab=64, hidden=64, layers=1, heads=4, kv_heads=2, inter=96, max_pos=64)
    write_checkpoint(tmp_path / "m", config, random_weights(config, seed=2, scale=0.3))
    result = subprocess.run([sys.executable, str(DENSE_SCRIPT), "--model", str(tmp_path / "m"), "--rows", "1,5",
                             "--passes", "2", "--json"], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("ISA: ") and any("logits agree" in line for line in lines)
    cases = json.loads(lines[-1])["cases"]
    assert set(cases) == {"dense_step_rows1", "dense_step_rows5"}
    assert all(case["unit"] == "ms" and case["ratio"] > 0 for case in cases.values())
