"""What "c" targets mean for gcc, the gcc invocation and the content-hashed build cache.

The grammar of target strings is refcomp.target's (spec/targets.md).  Here: `"c"` is gcc -O3
-march=native with OpenMP, GCC vector types and libmvec; `"c -std=c99"` is strict portable C99
(no OpenMP, no vector extensions or intrinsics) built with `-std=c99 -pedantic -Wall -Wextra
-Werror`.  Options: `-sanitize` (AddressSanitizer + UBSan),
`-O0`..`-O3`/`-Os`, `-g`, `-Werror` (warnings as errors in the native target too), `-no-openmp`.

The cache (`$REFCOMP_CACHE_DIR`, default `~/.cache/refcomp`) keys a shared object by the source,
the flags, the compiler's version and, for -march=native, the CPU's feature flags.  Entries are
written to a temporary name and moved into place with os.replace, so concurrent processes building
the same kernel both end with a complete file.  `CACHE_STATS` counts hits and misses; with
`REFCOMP_CACHE_DEBUG=1` each lookup is also printed to stderr.

The same cache keeps refcomp.build's checked and lowered form of a kernel (`read_build` /
`write_build`, `<key>.build` beside the libraries), keyed by `build_key`: the function's exact
structural hash and the build's settings, together with refcomp's version, the digest of its own
source files, the compiler and flags.  An entry carries its key, refcomp's version and the sha256
of its payload; one that does not match them (truncated, from another version) is removed and
the kernel built again.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from ..errors import BuildError
from ..target import Target, parse_target
from ..version import __version__
from . import mathlib
from .codegen import EmitOptions
from ..loops.intrin import cpu

CACHE_STATS = {"hits": 0, "misses": 0, "build_hits": 0, "build_misses": 0, "build_rejected": 0}
_BUILD_MAGIC = b"refcomp-build 1\n"
STRICT_WARNINGS = ("-std=c99", "-pedantic", "-Wall", "-Wextra", "-Werror")
_OPT_LEVELS = ("-O0", "-O1", "-O2", "-O3", "-Os")


@dataclasses.dataclass(frozen=True)
class COptions:
    """What a "c" target's options mean for gcc and the emitter (c_options(target) makes one)."""

    target: Target
    strict: bool = False
    sanitize: bool = False
    opt: str = "-O3"
    debug: bool = False
    werror: bool = False
    openmp: bool = True

    @property
    def vectors(self) -> bool:
        return not self.strict

    def emit_options(self) -> EmitOptions:
        mvec = frozenset() if self.strict else mvec_functions()
        return EmitOptions(vectors=not self.strict, openmp=self.openmp and not self.strict,
                           mvec_functions=mvec, label=str(self.target),
                           vector_bytes=0 if self.strict else native_vector_bytes())

    def compile_flags(self) -> list[str]:
        if self.strict:
            flags = list(STRICT_WARNINGS) + [self.opt if self.opt != "-O3" else "-O2"]
        else:
            # -Wno-psabi: gcc notes that 64-byte vector arguments change the ABI without
            # AVX-512; every such function here is static and always inlined.
            flags = ["-std=gnu11", self.opt, "-march=native", "-fno-math-errno", "-Wno-psabi"]
            if self.openmp:
                flags.append("-fopenmp")
            if self.werror:
                flags += ["-Wall", "-Wextra", "-Werror"]
        if self.debug:
            flags.append("-g")
        if self.sanitize:
            flags += ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
                      "-fno-omit-frame-pointer"]
        return flags + ["-fPIC", "-shared"]

    def link_flags(self) -> list[str]:
        libs = []
        if not self.strict and mvec_functions():
            libs.append("-lmvec")
        return libs + ["-lm"]


def c_options(target: Target | str) -> COptions:
    """The gcc and emitter settings of a "c" target (a Target or a target string)."""
    target = parse_target(target, kinds=("c",))
    return COptions(target=target, strict=target.has("-std=c99"), sanitize=target.has("-sanitize"),
                    opt=next((o for o in target.options if o in _OPT_LEVELS), "-O3"),
                    debug=target.has("-g"), werror=target.has("-Werror"),
                    openmp=not target.has("-no-openmp"))


def compiler() -> str:
    return os.environ.get("CC", "gcc")


@functools.lru_cache(maxsize=None)
def compiler_version(cc: str) -> str:
    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise BuildError(f"the C compiler {cc!r} cannot be run: {exc}",
                         hint="install gcc or set $CC to a C compiler") from exc
    return out.stdout.strip()


@functools.lru_cache(maxsize=None)
def _cpu_signature() -> str:
    """The CPU's feature flags: -march=native builds are only valid on a CPU like this one."""
    try:
        with open("/proc/cpuinfo") as handle:
            for line in handle:
                if line.startswith("flags"):
                    return hashlib.sha256(line.encode()).hexdigest()[:16]
    except OSError:
        pass
    import platform

    return platform.machine() + platform.processor()


@functools.lru_cache(maxsize=None)
def native_vector_bytes() -> int:
    """The vector register width -march=native gives on this CPU (64 AVX-512, 32 AVX, else 16).

    It follows `refcomp.loops.intrin.cpu.cpu_features`, so REFCOMP_CPU_FEATURES applies here too.
    """
    if cpu.has("avx512f"):
        return 64
    if cpu.has("avx"):
        return 32
    return 16


@functools.lru_cache(maxsize=None)
def mvec_functions() -> frozenset:
    """The libmvec functions this system's glibc has (empty when libmvec is missing)."""
    if os.environ.get("REFCOMP_NO_MVEC"):
        return frozenset()
    try:
        out = subprocess.run([compiler(), "-print-file-name=libmvec.so"], capture_output=True,
                             text=True, timeout=60)
        path = out.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return frozenset()
    if not path or not os.path.isabs(path) or not os.path.exists(path):
        return frozenset()
    try:
        version = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        version = ""
    match = re.search(r"(\d+)\.(\d+)", version)
    if not match:
        return frozenset()
    release = (int(match.group(1)), int(match.group(2)))
    if release >= (2, 35):
        return mathlib.MVEC_2_35
    if release >= (2, 22):
        return mathlib.MVEC_2_22
    return frozenset()


def cache_dir() -> Path:
    root = os.environ.get("REFCOMP_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "refcomp"


def cache_key(source: str, target: Target | COptions) -> str:
    parts = [source, *toolchain_parts(target)]
    digest = hashlib.sha256("\0".join(parts).encode())
    return digest.hexdigest()[:32]


def toolchain_parts(target: Target | COptions) -> list[str]:
    """Everything besides the source that decides what gcc makes of a kernel for target."""
    target = target if isinstance(target, COptions) else c_options(target)
    cc = compiler()
    parts = [" ".join(target.compile_flags()), " ".join(target.link_flags()), cc, compiler_version(cc)]
    if not target.strict:
        parts.append(_cpu_signature())
    return parts


@functools.lru_cache(maxsize=None)
def refcomp_source_digest() -> str:
    """The sha256 of refcomp's own Python files: a build entry made by other code is never reused."""
    package = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256(__version__.encode())
    for path in sorted(package.rglob("*.py")):
        digest.update(b"\0" + str(path.relative_to(package)).encode() + b"\0")
        try:
            digest.update(path.read_bytes())
        except OSError:
            digest.update(b"unreadable")
    return digest.hexdigest()


def build_key(parts: list[str], target: Target | COptions) -> str:
    """The key of a checked, lowered and emitted kernel: what the caller says decides it (the
    function's exact structural hash, the bounds mode, the settings the passes read), refcomp's
    version and source digest, and the emitter's and gcc's settings for target."""
    options = target if isinstance(target, COptions) else c_options(target)
    emitted = options.emit_options()
    emit_settings = [f"{f.name}={sorted(v) if isinstance(v, frozenset) else v!r}"
                     for f in dataclasses.fields(emitted) for v in [getattr(emitted, f.name)]]
    # the CPU features refcomp uses (REFCOMP_CPU_FEATURES can replace the detected ones)
    features = "cpu=" + ",".join(sorted(cpu.cpu_features()))
    settings = [f"build {__version__}", refcomp_source_digest(), str(options.target), *emit_settings, features,
                *toolchain_parts(options), *parts]
    return hashlib.sha256("\0".join(settings).encode()).hexdigest()[:32]


def _build_path(key: str) -> Path:
    return cache_dir() / key[:2] / f"{key}.build"


def read_build(key: str) -> bytes | None:
    """The payload stored under key by write_build, or None: absent, or rejected (then removed)
    because its header does not name this key and this refcomp version or its bytes do not match
    the sha256 it was written with."""
    try:
        data = _build_path(key).read_bytes()
    except OSError:
        _count("build_misses", f"build entry miss {key}")
        return None
    payload = _checked_payload(data, key)
    if payload is None:
        reject_build(key, "damaged or from another version")
        return None
    _count("build_hits", f"build entry hit {key}")
    return payload


def _count(stat: str, event: str) -> None:
    """Count a cache lookup's outcome in CACHE_STATS; with REFCOMP_CACHE_DEBUG set, print it."""
    CACHE_STATS[stat] += 1
    if os.environ.get("REFCOMP_CACHE_DEBUG"):
        print(f"refcomp {event}", file=sys.stderr)


def _checked_payload(data: bytes, key: str) -> bytes | None:
    if not data.startswith(_BUILD_MAGIC):
        return None
    header, sep, payload = data[len(_BUILD_MAGIC):].partition(b"\n")
    fields = header.decode("utf-8", "replace").split(" ")
    if not sep or len(fields) != 4:
        return None
    stored_key, version, length, checksum = fields
    if stored_key != key or version != __version__ or length != str(len(payload)):
        return None
    if hashlib.sha256(payload).hexdigest() != checksum:
        return None
    return payload


def write_build(key: str, payload: bytes) -> None:
    """Store payload under key (a temporary file moved into place); a cache that cannot be
    written is skipped: the entry only saves time."""
    path = _build_path(key)
    header = f"{key} {__version__} {len(payload)} {hashlib.sha256(payload).hexdigest()}\n".encode()
    tmp = path.with_name(f".{key}.{os.getpid()}.{os.urandom(4).hex()}.build")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(_BUILD_MAGIC + header + payload)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def reject_build(key: str, why: str) -> None:
    """Count and remove the entry stored under key, one that could not be used (the kernel is
    built again)."""
    _count("build_rejected", f"build entry rejected {key}: {why}")
    try:
        _build_path(key).unlink(missing_ok=True)
    except OSError:
        pass


def compile_shared(source: str, target: Target | COptions | str, name: str = "kernel") -> Path:
    """The path of a shared object built from source for target, from the cache when possible."""
    target = target if isinstance(target, COptions) else c_options(target)
    key = cache_key(source, target)
    root = cache_dir()
    folder = root / key[:2]
    so_path = folder / f"{key}.so"
    if so_path.exists():
        _count("hits", f"cache hit {key} ({name})")
        return so_path
    _count("misses", f"cache miss {key} ({name})")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BuildError(f"cannot create the build cache {folder}: {exc}",
                         hint="set $REFCOMP_CACHE_DIR to a writable folder") from exc
    with tempfile.TemporaryDirectory(prefix="refcomp-build-") as work:
        c_path = Path(work) / "kernel.c"
        c_path.write_text(source)
        tmp_so = folder / f".{key}.{os.getpid()}.{os.urandom(4).hex()}.so"
        command = [compiler(), *target.compile_flags(), str(c_path), "-o", str(tmp_so), *target.link_flags()]
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=600)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise BuildError(f"running the C compiler failed: {exc}",
                             hint="install gcc or set $CC to a C compiler") from exc
        if result.returncode != 0:
            tmp_so.unlink(missing_ok=True)
            crashed = "internal compiler error" in result.stderr
            hint = ("the compiler itself crashed on this kernel (a compiler bug, not an error in the "
                    "program); the target 'c -std=c99' builds it without vector code") if crashed else None
            raise BuildError(_compiler_failure(command, result.stderr, source, str(c_path)), hint=hint)
        try:
            (folder / f"{key}.c").write_text(source)
        except OSError:
            pass  # the source beside the library is for humans only
        os.replace(tmp_so, so_path)
    return so_path


def _compiler_failure(command: list[str], stderr: str, source: str, c_path: str) -> str:
    """gcc's message, with the source lines around the first error."""
    lines = source.splitlines()
    message = stderr.replace(c_path, "kernel.c").strip()
    match = re.search(r"kernel\.c:(\d+):(?:\d+:)? (?:fatal )?error", message) or \
        re.search(r"kernel\.c:(\d+):", message)
    context = ""
    if match:
        line_no = int(match.group(1))
        low, high = max(1, line_no - 3), min(len(lines), line_no + 3)
        context = "\n".join(f"{'>' if i == line_no else ' '}{i:5d} | {lines[i - 1]}" for i in range(low, high + 1))
    flags = " ".join(shlex.quote(c) for c in command[1:] if not c.endswith(".c") and "-o" != c)
    what = "crashed (internal compiler error) compiling" if "internal compiler error" in stderr else "failed to compile"
    parts = [f"gcc {what} the kernel (flags: {flags})", message[:4000]]
    if context:
        parts.append("source around the error:\n" + context)
    return "\n".join(parts)
