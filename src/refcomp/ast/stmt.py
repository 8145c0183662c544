"""Statements of the loop-level IR in the TensorIR style: loops, blocks, stores."""
from __future__ import annotations

from typing import Any, Mapping

from .buffer import Buffer, BufferRegion
from .expr import IntImm, PrimExpr, Range, Var, convert
from .node import Node, freeze_mapping, node, set_field

FOR_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")
# A For annotated {NONTEMPORAL_STORE: True} (every buffer) or {NONTEMPORAL_STORE: "name"} (that
# buffer) writes its contiguous vector stores as streaming stores (spec/c_abi.md).
NONTEMPORAL_STORE = "nontemporal_store"
# A serial For annotated {STAGE_SHIFT: True} is software-pipelined across its iterations when it is
# lowered: its last stage runs one iteration late, inside an earlier stage's loop
# (refcomp.loops.passes.stage_shift, spec/schedule.md); a loop that fails the pass's preconditions
# is a ScheduleError.  {STAGE_SHIFT: STAGE_SHIFT_ADVISORY} (the mark default schedules set) asks for
# the same where the preconditions hold and leaves the loop unshifted where they do not.
STAGE_SHIFT = "stage_shift"
STAGE_SHIFT_ADVISORY = "advisory"
THREAD_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
               "vthread.x", "vthread.y", "vthread.z")
ITER_KINDS = ("spatial", "reduce", "opaque")


class Stmt(Node):
    """A statement."""

    __slots__ = ()


@node
class BufferStore(Stmt):
    """buffer[indices] = value."""

    buffer: Buffer
    value: PrimExpr
    indices: tuple[PrimExpr, ...]

    def __post_init__(self) -> None:
        set_field(self, "value", convert(self.value))
        set_field(self, "indices", tuple(convert(i) for i in self.indices))
        if len(self.indices) != len(self.buffer.shape):
            raise ValueError(
                f"store to {self.buffer.name} has {len(self.indices)} indices for a "
                f"{len(self.buffer.shape)}-d buffer"
            )
        for index in self.indices:
            if not index.dtype.element.is_integer:
                raise TypeError(f"index of {self.buffer.name} must be an integer, got {index.dtype}")
        if self.value.dtype.element != self.buffer.dtype:
            raise TypeError(
                f"store to {self.buffer.name} ({self.buffer.dtype}) of a {self.value.dtype} value; cast it first"
            )


@node
class Evaluate(Stmt):
    """Evaluate an expression for its effect (an intrinsic call)."""

    value: PrimExpr

    def __post_init__(self) -> None:
        set_field(self, "value", convert(self.value))


@node
class SeqStmt(Stmt):
    """Statements run in order."""

    stmts: tuple[Stmt, ...]

    def __post_init__(self) -> None:
        set_field(self, "stmts", tuple(self.stmts))
        for s in self.stmts:
            if not isinstance(s, Stmt):
                raise TypeError(f"SeqStmt element must be a Stmt, got {s!r}")


@node
class IfThenElse(Stmt):
    """if condition: then_case else: else_case (else_case may be None)."""

    condition: PrimExpr
    then_case: Stmt
    else_case: Stmt | None = None

    def __post_init__(self) -> None:
        set_field(self, "condition", convert(self.condition))
        if not self.condition.dtype.is_bool:
            raise TypeError(f"if condition must be bool, got {self.condition.dtype}")


@node
class For(Stmt):
    """for loop_var in [min, min + extent): body, run as `kind` says.

    kind "thread_binding" binds the loop to the GPU thread axis `thread_binding`.
    """

    loop_var: Var
    min: PrimExpr
    extent: PrimExpr
    kind: str
    body: Stmt
    thread_binding: str | None = None
    annotations: Mapping[str, Any] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        set_field(self, "min", convert(self.min))
        set_field(self, "extent", convert(self.extent))
        set_field(self, "annotations", freeze_mapping(self.annotations))
        if not isinstance(self.loop_var, Var):
            raise TypeError(f"For loop_var must be a Var, got {self.loop_var!r}")
        for part, label in ((self.min, "min"), (self.extent, "extent")):
            if not part.dtype.is_integer:
                raise TypeError(f"loop {self.loop_var.name}: {label} must be an integer, got {part.dtype}")
        if self.kind not in FOR_KINDS:
            raise ValueError(f"loop {self.loop_var.name}: kind must be one of {FOR_KINDS}, got {self.kind!r}")
        if (self.kind == "thread_binding") != (self.thread_binding is not None):
            raise ValueError(f"loop {self.loop_var.name}: thread_binding goes with kind 'thread_binding' only")
        if self.thread_binding is not None and self.thread_binding not in THREAD_TAGS:
            raise ValueError(f"loop {self.loop_var.name}: unknown thread axis {self.thread_binding!r}")
        if not isinstance(self.body, Stmt):
            raise TypeError(f"loop {self.loop_var.name}: body must be a Stmt, got {self.body!r}")


@node
class While(Stmt):
    """while condition: body."""

    condition: PrimExpr
    body: Stmt


@node
class LetStmt(Stmt):
    """body with var bound to value."""

    var: Var
    value: PrimExpr
    body: Stmt

    def __post_init__(self) -> None:
        set_field(self, "value", convert(self.value))
        if self.var.dtype != self.value.dtype:
            raise TypeError(f"let {self.var.name}: value dtype {self.value.dtype} != var dtype {self.var.dtype}")


@node
class Allocate(Stmt):
    """Storage for buffer, live within body (lowered form of a block's alloc_buffers)."""

    buffer: Buffer
    body: Stmt


@node
class AssertStmt(Stmt):
    """Check condition at run time; on failure the kernel returns an error code with message."""

    condition: PrimExpr
    message: str
    body: Stmt


@node
class IterVar(Node):
    """A block iteration variable over dom, of kind spatial, reduce or opaque."""

    var: Var
    dom: Range
    kind: str = "spatial"

    def __post_init__(self) -> None:
        if isinstance(self.dom, (int, PrimExpr)):
            set_field(self, "dom", Range.from_extent(self.dom))
        if self.kind not in ITER_KINDS:
            raise ValueError(f"iter var {self.var.name}: kind must be one of {ITER_KINDS}, got {self.kind!r}")


@node
class MatchBufferRegion(Node):
    """Inside a block, `buffer` is a view of the region `source` (used by tensor intrinsics)."""

    buffer: Buffer
    source: BufferRegion


@node
class Block(Stmt):
    """A unit of computation with its own iteration domain and declared buffer accesses.

    `init`, when present, runs before the first iteration of the reduction iter vars.
    """

    name: str
    iter_vars: tuple[IterVar, ...]
    reads: tuple[BufferRegion, ...]
    writes: tuple[BufferRegion, ...]
    body: Stmt
    init: Stmt | None = None
    alloc_buffers: tuple[Buffer, ...] = ()
    match_buffers: tuple[MatchBufferRegion, ...] = ()
    annotations: Mapping[str, Any] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        for field in ("iter_vars", "reads", "writes", "alloc_buffers", "match_buffers"):
            set_field(self, field, tuple(getattr(self, field)))
        set_field(self, "annotations", freeze_mapping(self.annotations))
        if not isinstance(self.name, str) or not self.name:
            raise TypeError(f"Block name must be a non-empty str, got {self.name!r}")
        if not isinstance(self.body, Stmt):
            raise TypeError(f"block {self.name}: body must be a Stmt, got {self.body!r}")


@node
class BlockRealize(Stmt):
    """An instance of block with its iter vars bound to iter_values, executed when predicate holds."""

    iter_values: tuple[PrimExpr, ...]
    predicate: PrimExpr
    block: Block

    def __post_init__(self) -> None:
        set_field(self, "iter_values", tuple(convert(v) for v in self.iter_values))
        set_field(self, "predicate", convert(self.predicate))
        if len(self.iter_values) != len(self.block.iter_vars):
            raise ValueError(
                f"block {self.block.name}: {len(self.iter_values)} bindings for "
                f"{len(self.block.iter_vars)} iter vars"
            )
        if not self.predicate.dtype.is_bool:
            raise TypeError(f"block {self.block.name}: predicate must be bool, got {self.predicate.dtype}")


def seq(*stmts: Stmt) -> Stmt:
    """A sequence, flattened; a single statement stays itself."""
    flat: list[Stmt] = []
    for s in stmts:
        if isinstance(s, SeqStmt):
            flat.extend(s.stmts)
        elif s is not None:
            flat.append(s)
    return flat[0] if len(flat) == 1 else SeqStmt(tuple(flat))


def true() -> PrimExpr:
    return IntImm(1, "bool")
