"""The exported C under ASan + UBSan and valgrind on the host, and cross-compiled for Cortex-M4
(qemu-system-arm -M mps2-an386, semihosting) and aarch64 Linux (qemu-aarch64): a small CNN and a
small MLP produce the recorded outputs, which equal numpy's, and bad input is refused untouched."""
from __future__ import annotations

import numpy as np
import pytest

from export_helpers import make, need_target, need_tools, small_cnn, small_mlp
from refcomp.export import export_c


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Both models exported once (fresh random weights and inputs), checked against numpy."""
    import os

    rng = np.random.default_rng(int.from_bytes(os.urandom(4), "little"))
    out = {}
    for name, build in (("cnn", small_cnn), ("mlp", small_mlp)):
        mod, reference = build(rng)
        directory = tmp_path_factory.mktemp(name)
        result = export_c(mod, directory, seed=int(rng.integers(1 << 30)))
        np.testing.assert_allclose(result.outputs[0], reference(result.inputs[0]), rtol=1e-4, atol=1e-4)
        out[name] = directory
    return out


def _passed(done) -> None:
    assert done.returncode == 0, done.stdout + done.stderr
    assert "PASS" in done.stdout and "code 3 (expected 3)" in done.stdout


def test_sanitizers_asan_and_ubsan(exported):
    _passed(make(exported["cnn"], "test", "SANITIZE=1", "BUILD=build/sanitize"))


def test_valgrind(exported):
    need_tools("valgrind")
    _passed(make(exported["mlp"], "valgrind"))


@pytest.mark.parametrize("model", ["mlp", "cnn"])
@pytest.mark.parametrize("target", ["arm-none-eabi", "aarch64-linux-gnu"])
def test_emulated_targets(exported, target, model):
    need_target(target)
    _passed(make(exported[model], "test", f"TARGET={target}"))
