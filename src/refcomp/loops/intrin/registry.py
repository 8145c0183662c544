"""The tensor-intrinsic registry: named (description, implementation) pairs, plain data.

A description is a PrimFunc whose body is the loop nest of one block computing a small tile
(say C[6, 16] += A[6, K] * B[K, 16]); `tensorize` matches it against a block of the program.
The implementation is a PrimFunc with the same parameters whose body does the same work by other
means, usually `call_extern` of a C micro-kernel given in `c_helpers`.  Variables in the
description's buffer shapes and strides (K, leading dimensions) are bound by the match and passed
on to the implementation.  An optional `init_impl` is the implementation for a tile whose output
starts at zero: it writes C = A * B without reading C, so `tensorize` can fold a tile block's
init (zeroing its output) into the call (spec/tensorize.md, "Init folding").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from ...ast import Buffer, PrimFunc
from ...ast.intrinsics import ACCESS_KINDS
from ...errors import ScheduleError
from .cpu import cpu_features


@dataclass(frozen=True)
class TensorIntrin:
    """A registered tensor intrinsic: what it computes (desc), how (impl), and what it needs."""

    name: str
    desc: PrimFunc
    impl: PrimFunc
    c_helpers: tuple[str, ...] = ()
    c_includes: tuple[str, ...] = ()
    cpu_features: tuple[str, ...] = ()  # /proc/cpuinfo flags the impl needs to run
    func_attrs: Mapping[str, Any] = field(default_factory=dict)  # e.g. {"needs_amx": True}
    doc: str = ""
    init_impl: PrimFunc | None = None  # the same tile on an output that starts at zero (no read of it)
    # per buffer operand, in the desc's order: "read", "write" or "readwrite", what the impl's
    # call does through the address it is handed; () leaves every address a possible write
    operand_access: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"TensorIntrin name must be a non-empty str, got {self.name!r}")
        parts = [(self.desc, "desc"), (self.impl, "impl")]
        if self.init_impl is not None:
            parts.append((self.init_impl, "init_impl"))
        for part, label in parts:
            if not isinstance(part, PrimFunc):
                raise TypeError(f"TensorIntrin {self.name}: {label} must be a PrimFunc, got {part!r}")
        desc_buffers = [p for p in self.desc.params if isinstance(p, Buffer)]
        if self.operand_access and (len(self.operand_access) != len(desc_buffers)
                                    or any(a not in ACCESS_KINDS for a in self.operand_access)):
            raise TypeError(f"TensorIntrin {self.name}: operand_access must give one of {ACCESS_KINDS} per "
                            f"buffer operand ({len(desc_buffers)}), got {self.operand_access!r}")
        for impl, label in parts[1:]:
            impl_buffers = [p for p in impl.params if isinstance(p, Buffer)]
            if len(desc_buffers) != len(impl_buffers):
                raise TypeError(f"TensorIntrin {self.name}: desc has {len(desc_buffers)} buffer params, "
                                f"{label} has {len(impl_buffers)}")
            for d, i in zip(desc_buffers, impl_buffers):
                if d.ndim != i.ndim or d.dtype != i.dtype:
                    raise TypeError(f"TensorIntrin {self.name}: {label} buffer {i.name} ({i.dtype}, {i.ndim}-d) "
                                    f"does not correspond to desc buffer {d.name} ({d.dtype}, {d.ndim}-d)")

    def extern_access(self) -> dict:
        """{c_function: (access per call_extern argument after the name, "" for a non-address)}
        of the calls in impl and init_impl, from operand_access ({} when none is declared)."""
        from ...ast import BufferLoad, Call, collect

        out: dict = {}
        if not self.operand_access:
            return out
        for impl in (self.impl, self.init_impl):
            if impl is None:
                continue
            buffers = [p for p in impl.params if isinstance(p, Buffer)]
            for call in collect(impl.body, Call):
                if call.op != "call_extern" or not call.args or not hasattr(call.args[0], "value"):
                    continue
                accesses = []
                for arg in call.args[1:]:
                    load = arg.args[0] if isinstance(arg, Call) and arg.op == "address_of" and arg.args else None
                    owner = load.buffer if isinstance(load, BufferLoad) else None
                    accesses.append(self.operand_access[buffers.index(owner)] if owner in buffers else "")
                out[call.args[0].value] = tuple(accesses)
        return out

    def available(self) -> bool:
        """True when the CPU running refcomp has every feature the implementation needs."""
        return set(self.cpu_features) <= cpu_features()


_REGISTRY: dict[str, TensorIntrin] = {}


def register(intrin: TensorIntrin, *, override: bool = False) -> TensorIntrin:
    """Add an intrinsic to the registry under its name (override=True replaces an existing one)."""
    if not isinstance(intrin, TensorIntrin):
        raise TypeError(f"register: expected a TensorIntrin, got {intrin!r}")
    if intrin.name in _REGISTRY and not override:
        raise ValueError(f"tensor intrinsic {intrin.name!r} is already registered; pass override=True")
    _REGISTRY[intrin.name] = intrin
    return intrin


def unregister(name: str) -> None:
    """Remove an intrinsic (for tests and user code that registers temporary ones)."""
    _REGISTRY.pop(name, None)


def get(name: str) -> TensorIntrin:
    """The intrinsic registered under name; ScheduleError listing the known names otherwise."""
    _load_builtins()
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY)) or "none"
        raise ScheduleError(f"tensorize: no tensor intrinsic named {name!r}; registered: {known}") from None


def names(available_only: bool = False) -> list[str]:
    """Registered intrinsic names, sorted; with available_only, those this CPU can run."""
    _load_builtins()
    return sorted(n for n, i in _REGISTRY.items() if not available_only or i.available())


_builtins_loaded = False


def _load_builtins() -> None:
    # The built-in intrinsics (x86 tiles, CUDA tensor-core tiles) are registered on first lookup,
    # so importing the registry stays cheap and a user's own registrations never race with ours.
    global _builtins_loaded
    if not _builtins_loaded:
        _builtins_loaded = True
        from . import cuda_wmma, x86  # noqa: F401  (register on import)
