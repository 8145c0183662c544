"""Lookup primitives (get_block, get_loops, get_child_blocks, get_producers, get_consumers) and the
location helpers every other primitive uses to find a block or loop and its scope.

Like every primitive, each public function takes the current PrimFunc first and returns
`(func, result)`; lookups return func unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...ast import Block, BlockRealize, Buffer, For, PrimFunc, Stmt, Var
from ...errors import ScheduleError
from .tree import block_realizes, find_path, loops_between, path_to, stmt_children, walk


@dataclass(frozen=True, eq=False)
class BlockLocation:
    """Where a block sits: the path from the function body to its BlockRealize, and its scope."""

    path: list[Stmt]  # func.body ... realize (the Block itself is not included)

    @property
    def realize(self) -> BlockRealize:
        """The block's BlockRealize."""
        return self.path[-1]

    @property
    def block(self) -> Block:
        """The block itself."""
        return self.realize.block

    @property
    def scope_index(self) -> int:
        """Index in path of the innermost enclosing Block (the scope root); -1 when there is none."""
        return max((i for i, s in enumerate(self.path[:-1]) if isinstance(s, Block)), default=-1)

    @property
    def scope(self) -> Block | None:
        """The innermost enclosing block (None at the top of a function without a root block)."""
        return self.path[self.scope_index] if self.scope_index >= 0 else None

    @property
    def loops(self) -> list[For]:
        """The loops between the scope root and the block, outer to inner."""
        return loops_between(self.path[:-1])


def locate_block(func: PrimFunc, block: Block | str, primitive: str) -> BlockLocation:
    """The location of block (a Block node of func, or a block name) or a ScheduleError."""
    if isinstance(block, str):
        realizes = [r for r in block_realizes(func.body) if r.block.name == block]
        if not realizes:
            raise ScheduleError(f"{primitive}: no block named {block!r}", ir=func)
        if len(realizes) > 1:
            raise ScheduleError(f"{primitive}: {len(realizes)} blocks are named {block!r}", ir=func)
        block = realizes[0].block
    if not isinstance(block, Block):
        raise ScheduleError(f"{primitive}: expected a block, got {type(block).__name__}", ir=func)
    path = find_path(func.body, lambda s: isinstance(s, BlockRealize) and s.block is block)
    if path is None:
        raise ScheduleError(f"{primitive}: block {block.name!r} is not in the function", ir=func)
    return BlockLocation(path)


def locate_loop(func: PrimFunc, loop: For, primitive: str) -> list[Stmt]:
    """The path from the function body to loop, or a ScheduleError."""
    if not isinstance(loop, For):
        raise ScheduleError(f"{primitive}: expected a loop, got {type(loop).__name__}", ir=func)
    path = path_to(func.body, loop)
    if path is None:
        raise ScheduleError(f"{primitive}: loop {loop.loop_var.name} is not in the function", ir=func)
    return path


def find_loop_by_var(func: PrimFunc, var: Var) -> For | None:
    """The For whose loop var is var, or None."""
    for stmt in walk(func.body):
        if isinstance(stmt, For) and stmt.loop_var is var:
            return stmt
    return None


def find_block_by_name(func: PrimFunc, name: str) -> Block | None:
    """The block named name, or None."""
    for realize in block_realizes(func.body):
        if realize.block.name == name:
            return realize.block
    return None


def child_block_realizes(stmt: Stmt) -> list[BlockRealize]:
    """BlockRealizes below stmt that are not nested inside another block below stmt."""
    found: list[BlockRealize] = []

    def visit(node: Stmt) -> None:
        for child in stmt_children(node):
            if isinstance(child, BlockRealize):
                found.append(child)
            else:
                visit(child)

    if isinstance(stmt, BlockRealize):
        stmt = stmt.block
    visit(stmt)
    return found


def scope_siblings(func: PrimFunc, location: BlockLocation) -> list[BlockRealize]:
    """Every block in the same scope as location's block, in program order (itself included)."""
    if location.scope is not None:
        return child_block_realizes(location.scope)
    return child_block_realizes_of_stmt(func.body)


def child_block_realizes_of_stmt(stmt: Stmt) -> list[BlockRealize]:
    """Like child_block_realizes, but stmt itself counts when it is a BlockRealize."""
    found: list[BlockRealize] = []

    def visit(node: Stmt) -> None:
        if isinstance(node, BlockRealize):
            found.append(node)
            return
        for child in stmt_children(node):
            visit(child)

    visit(stmt)
    return found


def written_buffers(block: Block) -> set[Buffer]:
    """The buffers of block's write regions."""
    return {region.buffer for region in block.writes}


def read_buffers(block: Block) -> set[Buffer]:
    """The buffers of block's read regions."""
    return {region.buffer for region in block.reads}


# ----------------------------------------------------------------------------- the primitives

def get_block(func: PrimFunc, name: str) -> tuple[PrimFunc, Block]:
    """The block called name.  Requires exactly one block with that name."""
    if not isinstance(name, str):
        raise ScheduleError(f"get_block: name: expected a str, got {name!r}")
    return func, locate_block(func, name, "get_block").block


def get_loops(func: PrimFunc, block: Block) -> tuple[PrimFunc, list[For]]:
    """The loops above block in its scope, outermost first."""
    return func, locate_block(func, block, "get_loops").loops


def get_child_blocks(func: PrimFunc, block_or_loop: Block | For) -> tuple[PrimFunc, list[Block]]:
    """The blocks directly inside a block's body or a loop (not those nested in them)."""
    if isinstance(block_or_loop, Block):
        locate_block(func, block_or_loop, "get_child_blocks")
        return func, [r.block for r in child_block_realizes(block_or_loop)]
    locate_loop(func, block_or_loop, "get_child_blocks")
    return func, [r.block for r in child_block_realizes(block_or_loop)]


def get_producers(func: PrimFunc, block: Block) -> tuple[PrimFunc, list[Block]]:
    """Blocks of the same scope, before block, that write a buffer block reads."""
    location = locate_block(func, block, "get_producers")
    siblings = scope_siblings(func, location)
    reads = read_buffers(block)
    result = []
    for realize in siblings:
        if realize.block is block:
            break
        if written_buffers(realize.block) & reads:
            result.append(realize.block)
    return func, result


def get_consumers(func: PrimFunc, block: Block) -> tuple[PrimFunc, list[Block]]:
    """Blocks of the same scope, after block, that read a buffer block writes."""
    location = locate_block(func, block, "get_consumers")
    siblings = scope_siblings(func, location)
    writes = written_buffers(block)
    result = []
    seen = False
    for realize in siblings:
        if realize.block is block:
            seen = True
            continue
        if seen and read_buffers(realize.block) & writes:
            result.append(realize.block)
    return func, result
