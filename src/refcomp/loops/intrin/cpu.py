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


def has(*features: str) -> bool:
    """True when the CPU has every one of features."""
    return set(features) <= cpu_features()


_SHOWN = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile")


def describe() -> str:
    """One line for reports: the machine and the vector extensions refcomp's kernels can use on it."""
    import platform

    shown = " ".join(f.upper() for f in _SHOWN if f in cpu_features())
    return f"{platform.machine()} {shown or '(no x86 vector flags)'}"
