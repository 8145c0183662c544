"""What "cuda" targets mean for nvcc, and the nvcc invocation with its content-hashed build cache.

The grammar of target strings is refcomp.target's (spec/targets.md).  Here: `"cuda"` builds for the
default architecture sm_90a, `-arch=sm_80` for another; `-O0`, `-g`, `-G` (device debug) and
`-lineinfo` pass through to nvcc.  Building needs only nvcc; *running* needs a GPU and driver
(refcomp.runtime's CudaLibrary says so when there is none).
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..emit_c import cache_dir
from ..errors import BuildError
from ..target import Target, parse_target

DEFAULT_ARCH = "sm_90a"


def nvcc_flags(target: Target | str) -> list[str]:
    """The nvcc flags of a "cuda" target."""
    target = parse_target(target, kinds=("cuda",))
    extra = [o for o in target.options if not o.startswith("-arch=")]
    optimise = [] if any(f in ("-O0", "-G") for f in extra) else ["-O3"]
    return [*optimise, "-std=c++17", f"-arch={target.value('-arch', DEFAULT_ARCH)}", "--shared",
            "-Xcompiler", "-fPIC", "-Xcompiler", "-Wall", *extra]


def nvcc() -> str:
    found = os.environ.get("NVCC") or shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if Path("/usr/local/cuda/bin/nvcc").exists() else None)
    if not found:
        raise BuildError("the CUDA target needs nvcc, which was not found",
                         hint="install the CUDA toolkit or set $NVCC")
    return found


def _nvcc_version(path: str) -> str:
    try:
        return subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"


def compile_cuda(source: str, target: Target | str, name: str = "kernel") -> Path:
    """The shared object built by nvcc from source, from the build cache when possible."""
    flags = nvcc_flags(target)
    compiler = nvcc()
    key = hashlib.sha256("\0".join([source, " ".join(flags), _nvcc_version(compiler)]).encode())
    key_text = key.hexdigest()[:32]
    folder = cache_dir() / "cuda" / key_text[:2]
    so_path = folder / f"{key_text}.so"
    if so_path.exists():
        return so_path
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="refcomp-cuda-") as work:
        cu_path = Path(work) / "kernel.cu"
        cu_path.write_text(source)
        tmp = folder / f".{key_text}.{os.getpid()}.{os.urandom(4).hex()}.so"
        command = [compiler, *flags, str(cu_path), "-o", str(tmp)]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"running nvcc failed: {exc}") from exc
        if result.returncode != 0:
            tmp.unlink(missing_ok=True)
            message = (result.stderr + result.stdout).replace(str(cu_path), "kernel.cu").strip()
            raise BuildError(f"nvcc failed to compile the kernel:\n{message[:4000]}")
        (folder / f"{key_text}.cu").write_text(source)
        os.replace(tmp, so_path)
    return so_path
