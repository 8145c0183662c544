"""refcomp.build(func, target="cuda ..."): prepare, emit CUDA, compile with nvcc (cached), load.

Target strings: `"cuda"` (default architecture sm_90a), `"cuda -arch=sm_80"`, plus `-O0`/`-g`
(`-G` device debug) and `-lineinfo`.  Building needs only nvcc; *running* needs a GPU and driver:
without one, `lib(...)` raises RuntimeFailure saying so, while `lib.source` and `lib.path` (the
compiled shared object) are there to inspect.
"""
from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ..ast.function import PrimFunc
from ..emit_c.codegen import size_vars_of
from ..emit_c.toolchain import cache_dir
from ..errors import BuildError
from .codegen import emit_cuda
from .prepare import prepare

_ARCH = re.compile(r"sm_[0-9]+[a-z]?\Z")
DEFAULT_ARCH = "sm_90a"


@dataclass(frozen=True)
class CudaTarget:
    """A parsed CUDA target string."""

    text: str
    arch: str = DEFAULT_ARCH
    extra: tuple[str, ...] = ()

    def flags(self) -> list[str]:
        optimise = [] if any(f in ("-O0", "-G") for f in self.extra) else ["-O3"]
        return [*optimise, "-std=c++17", f"-arch={self.arch}", "--shared", "-Xcompiler", "-fPIC",
                "-Xcompiler", "-Wall", *self.extra]


def parse_cuda_target(text: str) -> CudaTarget:
    """`"cuda -arch=sm_90a -lineinfo"` -> CudaTarget; unknown options are an error."""
    words = shlex.split(text)
    if not words or words[0] != "cuda":
        raise BuildError(f"target {text!r} is not a CUDA target (it must start with 'cuda')")
    arch, extra = DEFAULT_ARCH, []
    for word in words[1:]:
        if word.startswith("-arch="):
            arch = word.split("=", 1)[1]
            if not _ARCH.match(arch):
                raise BuildError(f"target {text!r}: -arch must look like sm_90a or sm_80, got {arch!r}")
        elif word in ("-O0", "-g", "-G", "-lineinfo"):
            extra.append(word)
        else:
            raise BuildError(f"target {text!r}: unknown option {word!r}; known: -arch=sm_XX, -O0, -g, -G, -lineinfo")
    return CudaTarget(text, arch, tuple(extra))


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


def compile_cuda(source: str, target: CudaTarget) -> Path:
    """The shared object built by nvcc from source, from the build cache when possible."""
    compiler = nvcc()
    key = hashlib.sha256("\0".join([source, " ".join(target.flags()), _nvcc_version(compiler)]).encode())
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
        command = [compiler, *target.flags(), str(cu_path), "-o", str(tmp)]
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


def build_cuda(func: PrimFunc, target: str = "cuda", checked: PrimFunc | None = None):
    """Build a GPU-scheduled PrimFunc (bounds already handled by the driver into `checked`)."""
    from ..runtime.cuda_library import CudaLibrary

    parsed = parse_cuda_target(target)
    prepared = prepare(checked if checked is not None else func)
    module = emit_cuda(prepared, size_vars_of(func))
    path = compile_cuda(module.source, parsed)
    return CudaLibrary(module, path, func, prepared, parsed)
