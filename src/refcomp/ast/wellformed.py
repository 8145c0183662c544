"""Well-formedness of loop-level IR: the structural rules every PrimFunc must satisfy.

`verify_well_formed(func_or_module)` raises an `IRError` for the first violation, naming the rule
and marking the offending spot in the printed function.  The rules:

- unique block names: no two blocks of a function share a name;
- defined before use: every variable is a scalar parameter, a size variable of a parameter
  buffer's shape/strides/offset, or bound by an enclosing loop, let or block (iter vars are visible
  in their block's body, init and regions, not in its bindings); a match_buffer may introduce the
  variables of its view's shape;
- single binding: no variable is bound twice (loops, lets, iter vars, parameters);
- loop types: a loop's min and extent have the loop variable's dtype;
- iteration domain: loop and iter var extents are integers and not negative constants;
- block bindings: one binding per iter var, each of the iter var's dtype, predicate bool;
- blocks use iter vars: inside a block with iter vars (its regions, init and body), loop
  variables of loops outside the block do not appear (they enter through the bindings), as
  TVM requires; blocks without iter vars (opaque, root) are exempt;
- region shape: a read/write/match region has one range per buffer dimension;
- buffer declared: a buffer used is a parameter, an alloc_buffer or match_buffer of an enclosing
  block, or allocated by an enclosing Allocate;
- init needs reduction: only a block with a reduce iter var has an init;
- stores inside declared writes: in a block that declares regions, a store goes to a buffer of
  its writes (or one the block allocates or matches), as TVM requires.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from ..errors import IRError
from . import expr as E
from .buffer import Buffer, BufferRegion
from .function import IRModule, PrimFunc
from .stmt import (
    Allocate, AssertStmt, Block, BlockRealize, BufferStore, Evaluate, For, IfThenElse, LetStmt,
    SeqStmt, Stmt, While,
)


def verify_well_formed(func_or_mod: Any) -> None:
    """Raise IRError at the first rule a PrimFunc (or each PrimFunc of a module) breaks."""
    if isinstance(func_or_mod, IRModule):
        for _, func in sorted(func_or_mod.functions.items()):
            if isinstance(func, PrimFunc):
                verify_well_formed(func)
        return
    if not isinstance(func_or_mod, PrimFunc):
        raise TypeError(f"verify_well_formed expects a PrimFunc or IRModule, got {type(func_or_mod).__name__}")
    _Checker(func_or_mod).run()


def is_well_formed(func_or_mod: Any) -> bool:
    """True when verify_well_formed finds nothing."""
    try:
        verify_well_formed(func_or_mod)
    except IRError:
        return False
    return True


@dataclasses.dataclass
class _BlockFrame:
    """What the innermost enclosing block lets its stores write."""

    block: Block
    writable: set

    @property
    def declares_regions(self) -> bool:
        return bool(self.block.reads or self.block.writes)


class _Checker:
    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.defined: set[E.Var] = set()
        self.ever_bound: set[E.Var] = set()
        self.buffers: dict[Buffer, int] = {}
        self.block_names: dict[str, Block] = {}
        self.blocks: list[_BlockFrame] = []
        self.where: Any = func  # the statement being checked, marked in errors
        self.loop_vars: set[E.Var] = set()  # loop variables in scope
        self.hidden: set[E.Var] = set()  # loop variables the current block may not use

    def fail(self, rule: str, message: str, spot: Any = None) -> IRError:
        name = self.func.name
        return IRError(f"ill-formed IR in {name} ({rule}): {message}", ir=self.func,
                       spot=spot if spot is not None else self.where)

    # ------------------------------------------------------------------ scopes
    def bind(self, var: E.Var, spot: Any) -> None:
        if var in self.ever_bound:
            raise self.fail("single binding", f"variable {var.name} is bound twice", spot)
        self.ever_bound.add(var)
        self.defined.add(var)

    def unbind(self, var: E.Var) -> None:
        self.defined.discard(var)

    def declare(self, buffer: Buffer) -> None:
        self.buffers[buffer] = self.buffers.get(buffer, 0) + 1

    def undeclare(self, buffer: Buffer) -> None:
        count = self.buffers.get(buffer, 0) - 1
        if count <= 0:
            self.buffers.pop(buffer, None)
        else:
            self.buffers[buffer] = count

    # ------------------------------------------------------------------ function
    def run(self) -> None:
        func = self.func
        for param in func.params:
            if isinstance(param, E.Var):
                self.bind(param, func)
        for param in func.params:
            if isinstance(param, Buffer):
                for var in _buffer_vars(param):
                    if var not in self.defined:
                        self.bind(var, func)
                self.declare(param)
        self.stmt(func.body)

    # ------------------------------------------------------------------ expressions
    def expr(self, node: Any) -> None:
        if isinstance(node, E.Var):
            if node not in self.defined:
                raise self.fail("defined before use", f"variable {node.name} is used where it is not defined")
            if node in self.hidden:
                block = self.blocks[-1].block.name if self.blocks else "?"
                raise self.fail("blocks use iter vars", f"block {block} uses {node.name}, a loop variable "
                                                        "from outside the block; bind it to an iter var")
            return
        if isinstance(node, E.Let):
            self.expr(node.value)
            self.bind(node.var, self.where)
            self.expr(node.body)
            self.unbind(node.var)
            return
        if isinstance(node, E.BufferLoad):
            self.buffer_use(node.buffer)
            for index in node.indices:
                self.expr(index)
            return
        if isinstance(node, tuple):
            for item in node:
                self.expr(item)
            return
        if isinstance(node, E.PrimExpr) or isinstance(node, E.Range):
            for field in dataclasses.fields(node):
                value = getattr(node, field.name)
                if isinstance(value, (E.PrimExpr, tuple, E.Range)):
                    self.expr(value)

    def buffer_use(self, buffer: Buffer) -> None:
        if buffer not in self.buffers:
            raise self.fail("buffer declared", f"buffer {buffer.name} is used but not declared here "
                                               "(not a parameter, alloc_buffer, match_buffer or Allocate in scope)")

    def region(self, region: BufferRegion, what: str) -> None:
        self.buffer_use(region.buffer)
        if len(region.region) != region.buffer.ndim:
            raise self.fail("region shape", f"{what} region of {region.buffer.name} has {len(region.region)} ranges "
                                            f"for {region.buffer.ndim} dimensions")
        for r in region.region:
            self.expr(r.min)
            self.expr(r.extent)

    def extent(self, extent: E.PrimExpr, what: str) -> None:
        if not extent.dtype.is_integer:
            raise self.fail("iteration domain", f"{what} has a {extent.dtype} extent; it must be an integer")
        if isinstance(extent, E.IntImm) and extent.value < 0:
            raise self.fail("iteration domain", f"{what} has the negative extent {extent.value}")

    def buffer_shape(self, buffer: Buffer) -> None:
        for var in _buffer_vars(buffer):
            if var not in self.defined:
                raise self.fail("defined before use",
                                f"variable {var.name} in the shape of buffer {buffer.name} is not defined here")

    # ------------------------------------------------------------------ statements
    def stmt(self, node: Stmt) -> None:
        outer = self.where
        self.where = node
        try:
            self._stmt(node)
        finally:
            self.where = outer

    def _stmt(self, node: Stmt) -> None:
        if isinstance(node, SeqStmt):
            for item in node.stmts:
                self.stmt(item)
        elif isinstance(node, BufferStore):
            self.buffer_use(node.buffer)
            self.expr(node.indices)
            self.expr(node.value)
            if self.blocks and self.blocks[-1].declares_regions and node.buffer not in self.blocks[-1].writable:
                block = self.blocks[-1].block
                raise self.fail("stores inside declared writes",
                                f"block {block.name} stores to {node.buffer.name}, which its T.writes does not declare")
        elif isinstance(node, For):
            self.expr(node.min)
            self.expr(node.extent)
            self.extent(node.extent, f"loop {node.loop_var.name}")
            if node.min.dtype != node.loop_var.dtype or node.extent.dtype != node.loop_var.dtype:
                raise self.fail("loop types", f"loop {node.loop_var.name} ({node.loop_var.dtype}) has min "
                                              f"{node.min.dtype} and extent {node.extent.dtype}")
            self.bind(node.loop_var, node)
            self.loop_vars.add(node.loop_var)
            self.stmt(node.body)
            self.loop_vars.discard(node.loop_var)
            self.unbind(node.loop_var)
        elif isinstance(node, BlockRealize):
            if len(node.iter_values) != len(node.block.iter_vars):
                raise self.fail("block bindings", f"block {node.block.name} has {len(node.iter_values)} bindings "
                                                  f"for {len(node.block.iter_vars)} iter vars")
            for iv, value in zip(node.block.iter_vars, node.iter_values):
                self.expr(value)
                if value.dtype != iv.var.dtype:
                    raise self.fail("block bindings", f"iter var {iv.var.name} ({iv.var.dtype}) of block "
                                                      f"{node.block.name} is bound to a {value.dtype} value")
            self.expr(node.predicate)
            if not node.predicate.dtype.is_bool:
                raise self.fail("block bindings", f"block {node.block.name} has a non-bool predicate")
            self.stmt(node.block)
        elif isinstance(node, Block):
            self.block(node)
        elif isinstance(node, LetStmt):
            self.expr(node.value)
            self.bind(node.var, node)
            self.stmt(node.body)
            self.unbind(node.var)
        elif isinstance(node, Allocate):
            self.buffer_shape(node.buffer)
            self.declare(node.buffer)
            if self.blocks:
                self.blocks[-1].writable.add(node.buffer)
            self.stmt(node.body)
            self.undeclare(node.buffer)
        elif isinstance(node, IfThenElse):
            self.expr(node.condition)
            self.stmt(node.then_case)
            if node.else_case is not None:
                self.stmt(node.else_case)
        elif isinstance(node, (AssertStmt, While)):
            self.expr(node.condition)
            self.stmt(node.body)
        elif isinstance(node, Evaluate):
            self.expr(node.value)
        else:
            raise self.fail("known statements", f"{type(node).__name__} is not a loop-level statement")

    def block(self, block: Block) -> None:
        if block.name in self.block_names:
            raise self.fail("unique block names", f"two blocks are named {block.name!r}")
        self.block_names[block.name] = block
        for iv in block.iter_vars:
            self.expr(iv.dom.min)
            self.expr(iv.dom.extent)
            self.extent(iv.dom.extent, f"iter var {iv.var.name} of block {block.name}")
        outer_hidden = self.hidden
        if block.iter_vars:  # a block sees its surroundings only through its iter vars
            self.hidden = set(self.loop_vars)
        for iv in block.iter_vars:
            self.bind(iv.var, block)
        if block.init is not None and not any(iv.kind == "reduce" for iv in block.iter_vars):
            raise self.fail("init needs reduction", f"block {block.name} has an init but no reduce iter var",
                            block)
        introduced: list[E.Var] = []
        for buffer in block.alloc_buffers:
            self.buffer_shape(buffer)
            self.declare(buffer)
        for match in block.match_buffers:
            self.region(match.source, "match_buffer")
            for var in _buffer_vars(match.buffer):
                if var not in self.defined:
                    # A pattern variable of the view, not a binding: the same view (and its stride
                    # vars) may be matched in several blocks, as repeated tensorization does.
                    self.defined.add(var)
                    introduced.append(var)
            self.declare(match.buffer)
        for region in block.reads:
            self.region(region, "read")
        for region in block.writes:
            self.region(region, "write")
        writable = {r.buffer for r in block.writes} | set(block.alloc_buffers) | {m.buffer for m in block.match_buffers}
        self.blocks.append(_BlockFrame(block, writable))
        if block.init is not None:
            self.stmt(block.init)
        self.stmt(block.body)
        self.blocks.pop()
        for buffer in block.alloc_buffers:
            self.undeclare(buffer)
        for match in block.match_buffers:
            self.undeclare(match.buffer)
        for var in introduced:
            self.unbind(var)
        for iv in block.iter_vars:
            self.unbind(iv.var)
        self.hidden = outer_hidden


def _buffer_vars(buffer: Buffer) -> list[E.Var]:
    from .functor import free_vars

    return free_vars(tuple(buffer.shape) + tuple(buffer.strides) + (buffer.elem_offset,))
