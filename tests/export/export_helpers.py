"""Small models for the export tests (a CNN and an MLP with a symbolic batch), their numpy
references, and the cross toolchains: installed with apt when missing (as root), else a skip that
names the package."""
from __future__ import annotations

import os
import shutil
import subprocess

import numpy as np
import pytest

from refcomp.ast import SizeVar
from refcomp.export.targets import AARCH64_LIBC_PACKAGE, NEWLIB_PACKAGE, PACKAGES
from refcomp.graph import BlockBuilder, Var, const, op, tensor


def small_cnn(rng, batch_bound: int = 2):
    """x (batch, 3, 12, 12) -> conv 3x3 (8) + bias -> relu -> max pool 2 -> flatten -> dense (10)."""
    batch = SizeVar("batch", "int64")
    w1 = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    b1 = rng.standard_normal(8).astype(np.float32)
    w2 = (rng.standard_normal((10, 200)) * 0.1).astype(np.float32)
    x = Var("x", tensor((batch, 3, 12, 12)))
    bb = BlockBuilder()
    with bb.function("main", [x], attrs={"tir_var_upper_bound": {"batch": batch_bound}}):
        with bb.dataflow():
            h = bb.emit(op.relu(op.add(op.conv2d(x, const(w1)), op.reshape(const(b1), (1, 8, 1, 1)))))
            h = bb.emit(op.max_pool2d(h, (2, 2), strides=(2, 2)))
            h = bb.emit(op.reshape(h, (batch, 200)))
            y = bb.emit_output(op.matmul(h, op.permute_dims(const(w2), (1, 0))))
        bb.emit_func_output(y)

    def reference(xv):
        n = xv.shape[0]
        conv = np.zeros((n, 8, 10, 10), np.float64)
        for i in range(3):
            for j in range(3):
                patch = xv[:, :, i:i + 10, j:j + 10].astype(np.float64)
                conv += np.einsum("nchw,oc->nohw", patch, w1[:, :, i, j].astype(np.float64))
        h = np.maximum(conv + b1.reshape(1, 8, 1, 1), 0)
        h = h.reshape(n, 8, 5, 2, 5, 2).max(axis=(3, 5)).reshape(n, 200)
        return h @ w2.T.astype(np.float64)

    return bb.get(), reference


def small_mlp(rng, batch_bound: int = 4, name: str = "x"):
    """x (batch, 16) -> dense (32) + bias -> tanh -> dense (8) + bias -> softmax."""
    batch = SizeVar("batch", "int64")
    w1 = (rng.standard_normal((32, 16)) * 0.3).astype(np.float32)
    b1 = rng.standard_normal(32).astype(np.float32)
    w2 = (rng.standard_normal((8, 32)) * 0.3).astype(np.float32)
    b2 = rng.standard_normal(8).astype(np.float32)
    x = Var(name, tensor((batch, 16)))
    bb = BlockBuilder()
    with bb.function("main", [x], attrs={"tir_var_upper_bound": {"batch": batch_bound}}):
        with bb.dataflow():
            h = bb.emit(op.tanh(op.linear(x, const(w1), const(b1))))
            y = bb.emit_output(op.softmax(op.linear(h, const(w2), const(b2)), axis=-1))
        bb.emit_func_output(y)

    def reference(xv):
        h = np.tanh(xv.astype(np.float64) @ w1.T + b1)
        z = h @ w2.T + b2
        e = np.exp(z - z.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)

    return bb.get(), reference


def _apt_install(packages: list[str]) -> bool:
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        return False
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", *packages]
    if subprocess.run(install, capture_output=True, env=env, timeout=900).returncode == 0:
        return True
    subprocess.run(["apt-get", "update", "-qq"], capture_output=True, env=env, timeout=900)
    return subprocess.run(install, capture_output=True, env=env, timeout=900).returncode == 0


def need_tools(*tools: str, extra_packages: tuple[str, ...] = ()) -> None:
    """Skip (naming the Debian packages) unless every tool is on PATH, installing them with apt first."""
    missing = [t for t in tools if not shutil.which(t)]
    if not missing:
        return
    packages = sorted({PACKAGES[t] for t in missing} | set(extra_packages))
    if _apt_install(packages) and all(shutil.which(t) for t in tools):
        return
    pytest.skip(f"needs {', '.join(missing)}: install the Debian package(s) {' '.join(packages)}")


def need_target(target: str) -> None:
    if target == "arm-none-eabi":
        need_tools("arm-none-eabi-gcc", "qemu-system-arm", extra_packages=(NEWLIB_PACKAGE,))
    elif target == "aarch64-linux-gnu":
        need_tools("aarch64-linux-gnu-gcc", "qemu-aarch64", extra_packages=(AARCH64_LIBC_PACKAGE,))


def make(out_dir, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["make", "-s", "-C", str(out_dir), *args], capture_output=True, text=True,
                          timeout=timeout)
