"""Which instruction-set features the CPU running refcomp has (from /proc/cpuinfo)."""
from __future__ import annotations

import functools
import os

# Names as /proc/cpuinfo spells them.
AVX2 = ("avx2", "fma")
AVX512 = ("avx512f",)
AVX512_VNNI = ("avx512f", "avx512bw", "avx512_vnni")
AVX512_BF16 = ("avx512f", "avx512_bf16")
AMX_BF16 = ("amx_tile", "amx_bf16")
AMX_INT8 = ("amx_tile", "amx_int8")


@functools.lru_cache(maxsize=1)
def cpu_features() -> frozenset[str]:
    """The flags of the first CPU in /proc/cpuinfo (empty when it cannot be read).

    REFCOMP_CPU_FEATURES (comma separated) replaces the detected set, for building code for
    another machine.
    """
    override = os.environ.get("REFCOMP_CPU_FEATURES")
    if override is not None:
        return frozenset(f.strip() for f in override.split(",") if f.strip())
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as info:
            for line in info:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


@functools.lru_cache(maxsize=1)
def cache_sizes() -> tuple[int, int]:
    """(L1 data, L2) cache bytes of one core, read at run time (sysfs, else sysconf); 32 KiB and
    1 MiB where neither says.  REFCOMP_CACHE_SIZES="l1,l2" (bytes) replaces them, for tuning
    code for another machine."""
    override = os.environ.get("REFCOMP_CACHE_SIZES")
    if override:
        l1, l2 = (int(v) for v in override.split(","))
        return l1, l2
    found: dict[int, int] = {}
    for level, size in _sysfs_data_caches():
        found.setdefault(level, size)
    for level, name in ((1, "SC_LEVEL1_DCACHE_SIZE"), (2, "SC_LEVEL2_CACHE_SIZE")):
        if level not in found and name in os.sysconf_names:
            try:
                value = os.sysconf(name)
            except (OSError, ValueError):
                value = 0
            if value > 0:
                found[level] = value
    return found.get(1, 32 << 10), found.get(2, 1 << 20)


@functools.lru_cache(maxsize=1)
def last_level_cache_bytes() -> int | None:
    """Bytes of the largest data or unified cache cpu0 reports in sysfs (its last level, shared
    by several cores), else None.  REFCOMP_LLC_BYTES replaces it."""
    override = os.environ.get("REFCOMP_LLC_BYTES")
    if override:
        return int(override)
    caches = _sysfs_data_caches()
    return max(caches)[1] if caches else None


def _sysfs_data_caches() -> list[tuple[int, int]]:
    """(level, bytes) of each data or unified cache cpu0 reports in sysfs, in index order; the
    entries read before an unreadable one when sysfs is incomplete."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    caches: list[tuple[int, int]] = []
    try:
        for entry in sorted(os.listdir(base)):
            if not entry.startswith("index"):
                continue
            with open(f"{base}/{entry}/type", encoding="ascii") as kind, \
                    open(f"{base}/{entry}/level", encoding="ascii") as level, \
                    open(f"{base}/{entry}/size", encoding="ascii") as size:
                if kind.read().strip() in ("Data", "Unified"):
                    caches.append((int(level.read()), _bytes(size.read().strip())))
    except (OSError, ValueError):
        pass
    return caches


def _bytes(text: str) -> int:
    """'48K' -> 49152 (sysfs cache sizes)."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    if text and text[-1] in units:
        return int(text[:-1]) * units[text[-1]]
    return int(text)


def openmp_threads() -> int:
    """The threads a parallel loop of the compiled kernels runs on: OMP_NUM_THREADS when it is a
    positive integer (its first entry), else the CPUs this process may run on (libgomp's default)."""
    first = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if first.isdigit() and int(first) > 0:
        return int(first)
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def has(*features: str) -> bool:
    """True when the CPU has every one of features."""
    return set(features) <= cpu_features()


def vector_lanes(bits: int) -> int:
    """Elements of `bits` bits in the widest vector register the kernels use on this CPU (64 bytes
    with AVX-512, else 32: the native vectorized loop's width)."""
    return (512 if has("avx512f") else 256) // bits


_SHOWN = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile")


def describe() -> str:
    """One line for reports: the machine and the vector extensions refcomp's kernels can use on it."""
    import platform

    shown = " ".join(f.upper() for f in _SHOWN if f in cpu_features())
    return f"{platform.machine()} {shown or '(no x86 vector flags)'}"
