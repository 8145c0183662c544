"""Reading blocks and buffer declarations of the script format (`with T.block(...)`, `T.alloc_buffer`).

When a block leaves out `T.reads` or `T.writes`, they are inferred as TVM does in spirit: each
buffer accessed in the block (not allocated by it) gets, per dimension, the single index when every
access agrees on one index free of the block's inner loops, `[b + lo, b + hi]` when the accesses are
`b + c` with constant offsets c, the range of an inner loop when every access is that loop's
variable, and the whole dimension otherwise.
"""
from __future__ import annotations

import ast
from typing import Any, Mapping

from . import expr as E
from .buffer import Buffer, BufferRegion
from .parser_expr import ExprReader, Scope
from .stmt import (
    Allocate, Block, BlockRealize, BufferStore, For, IterVar, LetStmt, MatchBufferRegion, Stmt,
)
from .structural import structural_equal

_AXIS_KINDS = {"spatial": "spatial", "S": "spatial", "reduce": "reduce", "R": "reduce",
               "opaque": "opaque", "O": "opaque"}
_BUFFER_OPTIONS = ("dtype", "scope", "strides", "elem_offset", "align", "offset_factor", "name",
                   "buffer_type", "axis_separators")


def is_root_realize(stmt: Any) -> bool:
    """A realize of a block named "root" with no iter vars and a true predicate."""
    return (isinstance(stmt, BlockRealize) and stmt.block.name == "root" and not stmt.block.iter_vars
            and isinstance(stmt.predicate, E.IntImm) and stmt.predicate.value == 1)


class _Header:
    """What the lines at the top of a block declare."""

    def __init__(self) -> None:
        self.iter_vars: list[IterVar] = []
        self.values: list[E.PrimExpr | None] = []
        self.predicate: E.PrimExpr | None = None
        self.reads: tuple[BufferRegion, ...] | None = None
        self.writes: tuple[BufferRegion, ...] | None = None
        self.annotations: dict[str, Any] = {}
        self.allocs: list[Buffer] = []
        self.matches: list[MatchBufferRegion] = []
        self.init: Stmt | None = None


class BlockReader(ExprReader):
    """Blocks and buffers; the statement reader (parser.FunctionReader) builds on this."""

    loop_ranges: dict

    def __init__(self, fail, tir_names) -> None:
        super().__init__(fail, tir_names)
        self.declared: dict[int, Any] = {}
        self.saw_block = False  # whether the function has blocks (it then gets a root block)

    # ------------------------------------------------------------------ buffers
    def shape(self, node: ast.AST) -> tuple[E.PrimExpr, ...]:
        if isinstance(node, (ast.Tuple, ast.List)):
            return tuple(self.expr(d) for d in node.elts)
        return (self.expr(node),)

    def buffer(self, call: ast.Call, default_name: str, function: str) -> Buffer:
        """A Buffer from `T.Buffer(shape, dtype, scope=..., strides=..., elem_offset=..., align=..., name=...)`."""
        args = list(call.args)
        limit = 3 if function == "T.allocate" else 2
        if not args or len(args) > limit:
            raise self.fail(call, f"{function} takes the shape{', dtype and scope' if limit == 3 else ' and dtype'}"
                                  " positionally and other options by keyword")
        options: dict[str, Any] = {"dtype": "float32", "scope": "global"}
        if len(args) > 1:
            options["dtype"] = self.string(args[1], "dtype")
        if len(args) > 2:
            options["scope"] = self.string(args[2], "scope")
        for keyword in call.keywords:
            if keyword.arg not in _BUFFER_OPTIONS:
                raise self.fail(keyword.value, f"{function} has no option {keyword.arg!r}")
            if keyword.arg in ("strides",):
                options["strides"] = self.shape(keyword.value)
            elif keyword.arg == "elem_offset":
                options["elem_offset"] = self.expr(keyword.value)
            elif keyword.arg in ("align", "offset_factor"):
                options[keyword.arg] = self.int_value(keyword.value, keyword.arg)
            elif keyword.arg == "axis_separators":
                if self.literal(keyword.value) not in ([], (), None):
                    raise self.fail(keyword.value, "axis_separators are not supported")
            elif keyword.arg == "buffer_type":
                continue
            else:
                options[keyword.arg] = self.string(keyword.value, keyword.arg)
        dtype = options["dtype"]
        from .parser_expr import as_dtype

        if as_dtype(dtype) is None:
            raise self.fail(args[1] if len(args) > 1 else call, f"unknown dtype {dtype!r}")
        align = max(options.get("align", 0), 0)
        return Buffer(options.get("name", default_name), self.shape(args[0]), dtype, options["scope"],
                      options.get("strides", ()), options.get("elem_offset"), align)

    # ------------------------------------------------------------------ blocks
    def block(self, stmt: ast.With, call: ast.Call) -> Stmt:
        no_realize = False
        for keyword in call.keywords:
            if keyword.arg == "no_realize" and isinstance(keyword.value, ast.Constant):
                no_realize = bool(keyword.value.value)
            else:
                raise self.fail(keyword.value, f"T.block has no option {keyword.arg!r}")
        if len(call.args) > 1:
            raise self.fail(call, "T.block takes one name")
        name = self.string(call.args[0], "the block name") if call.args else "block"
        self.saw_block = True
        outer = self.scope
        self.scope = Scope(outer)
        try:
            header = _Header()
            rest = [s for s in stmt.body if not self.header_line(s, header, no_realize)]
            body = self.body(rest, stmt)  # type: ignore[attr-defined]
        finally:
            self.scope = outer
        reads, writes = header.reads, header.writes
        if reads is None or writes is None:
            inferred_reads, inferred_writes = infer_regions(body, header.init, header.allocs)
            reads = inferred_reads if reads is None else reads
            writes = inferred_writes if writes is None else writes
        if name == "root" and not header.iter_vars and header.reads is None and header.writes is None:
            reads, writes = (), ()
        block = Block(name, tuple(header.iter_vars), reads, writes, body, header.init, tuple(header.allocs),
                      tuple(header.matches), header.annotations)
        if no_realize:
            if header.predicate is not None:
                raise self.fail(stmt, "T.where needs a realized block (no_realize=False)")
            return block
        predicate = header.predicate if header.predicate is not None else E.IntImm(1, "bool")
        return BlockRealize(tuple(header.values), predicate, block)

    def header_line(self, stmt: ast.stmt, header: _Header, no_realize: bool) -> bool:
        """Apply stmt to header if it is one of the block's declaration lines; False for body lines."""
        if isinstance(stmt, ast.With) and len(stmt.items) == 1 and isinstance(stmt.items[0].context_expr, ast.Call) \
                and self.dotted(stmt.items[0].context_expr.func) == "T.init":
            if header.init is not None:
                raise self.fail(stmt, "a block has one T.init")
            header.init = self.body(stmt.body, stmt)  # type: ignore[attr-defined]
            return True
        call = getattr(stmt, "value", None)
        if not isinstance(call, ast.Call):
            return False
        name = self.dotted(call.func)
        if isinstance(stmt, ast.Expr):
            if name in ("T.reads", "T.writes"):
                regions = []
                for arg in call.args:
                    items = arg.elts if isinstance(arg, (ast.List, ast.Tuple)) else [arg]
                    regions.extend(self.region(item) for item in items)
                if name == "T.reads":
                    header.reads = tuple(regions)
                else:
                    header.writes = tuple(regions)
                return True
            if name == "T.where":
                (condition,) = self.positional(call, 1, name)
                header.predicate = self.expr(condition)
                return True
            if name == "T.block_attr":
                (value,) = self.positional(call, 1, name)
                attrs = self.literal(value)
                if not isinstance(attrs, Mapping):
                    raise self.fail(value, "T.block_attr takes a dict")
                header.annotations.update(attrs)
                return True
            return False
        if not isinstance(stmt, ast.Assign) or len(stmt.targets) != 1:
            return False
        target = stmt.targets[0]
        if name == "T.axis.remap":
            self.remap(stmt, call, header, no_realize)
            return True
        if name is not None and name.startswith("T.axis."):
            kind = _AXIS_KINDS.get(name[len("T.axis."):])
            if kind is None:
                raise self.fail(call.func, f"unknown axis kind {name}; expected spatial, reduce or opaque")
            if not isinstance(target, ast.Name):
                raise self.fail(target, f"{name} defines one name")
            self.axis(target.id, call, kind, header, no_realize)
            return True
        if name == "T.alloc_buffer" and isinstance(target, ast.Name):
            buffer = self.buffer(call, target.id, name)
            self.scope.define(target.id, buffer)
            header.allocs.append(buffer)
            return True
        if name == "T.match_buffer" and isinstance(target, ast.Name):
            if not call.args:
                raise self.fail(call, "T.match_buffer needs the region it views")
            source = self.region(call.args[0])
            trimmed = ast.copy_location(ast.Call(func=call.func, args=call.args[1:], keywords=call.keywords), call)
            buffer = self.buffer(trimmed, target.id, name)
            self.scope.define(target.id, buffer)
            header.matches.append(MatchBufferRegion(buffer, source))
            return True
        return False

    def axis(self, name: str, call: ast.Call, kind: str, header: _Header, no_realize: bool) -> None:
        dtype_text = None
        for keyword in call.keywords:
            if keyword.arg != "dtype":
                raise self.fail(keyword.value, f"T.axis has no option {keyword.arg!r}")
            dtype_text = self.string(keyword.value, "dtype")
        if not 1 <= len(call.args) <= 2:
            raise self.fail(call, "T.axis.<kind> takes (domain, binding)")
        binding = self.expr(call.args[1]) if len(call.args) == 2 else None
        if binding is None and not no_realize:
            raise self.fail(call, "the iter var needs its binding: T.axis.spatial(extent, value)")
        if binding is not None and no_realize:
            raise self.fail(call, "a no_realize block has no bindings")
        like = binding.dtype if binding is not None else None
        dom_node = call.args[0]
        if isinstance(dom_node, ast.Tuple) and len(dom_node.elts) == 2:
            from .parser_expr import promote_pair
            from .script_common import extent_of

            begin, end = promote_pair(self.value(dom_node.elts[0]), self.value(dom_node.elts[1]))
            dom = E.Range(begin, extent_of(begin, end))
        else:
            dom = E.Range.from_extent(self.expr(dom_node, like))
        from .parser_expr import as_dtype

        var_dtype = as_dtype(dtype_text) if dtype_text else (like or dom.extent.dtype)
        if var_dtype is None:
            raise self.fail(call, f"unknown dtype {dtype_text!r}")
        var = E.Var(name, var_dtype)
        self.scope.define(name, var)
        header.iter_vars.append(IterVar(var, dom, kind))
        header.values.append(binding)

    def remap(self, stmt: ast.Assign, call: ast.Call, header: _Header, no_realize: bool) -> None:
        if no_realize:
            raise self.fail(call, "a no_realize block has no bindings")
        kinds_node, values_node = self.positional(call, 2, "T.axis.remap")
        kinds = self.string(kinds_node, "the axis kinds")
        target = stmt.targets[0]
        names = target.elts if isinstance(target, ast.Tuple) else [target]
        values = values_node.elts if isinstance(values_node, (ast.List, ast.Tuple)) else [values_node]
        if not (len(kinds) == len(names) == len(values)):
            raise self.fail(call, f"T.axis.remap got {len(kinds)} kinds, {len(values)} loop variables and "
                                  f"{len(names)} names")
        for letter, name_node, value_node in zip(kinds, names, values):
            if letter not in "SR":
                raise self.fail(kinds_node, f"T.axis.remap kinds are S or R, got {letter!r}")
            if not isinstance(name_node, ast.Name):
                raise self.fail(name_node, "expected a name")
            value = self.value(value_node)
            span = self.loop_ranges.get(value) if isinstance(value, E.Var) else None
            if span is None:
                raise self.fail(value_node, "T.axis.remap binds loop variables of enclosing loops")
            var = E.Var(name_node.id, value.dtype)
            self.scope.define(name_node.id, var)
            header.iter_vars.append(IterVar(var, E.Range(span[0], span[1]), _AXIS_KINDS[letter]))
            header.values.append(value)


# ---------------------------------------------------------------------- region inference

def infer_regions(body: Stmt, init: Stmt | None, allocated: list[Buffer]):
    """(reads, writes) of a block that does not declare them (see the module docstring)."""
    loads: dict[Buffer, list[tuple]] = {}
    stores: dict[Buffer, list[tuple]] = {}
    inner_loops: dict[E.Var, For] = {}
    inner_vars: set[E.Var] = set()

    def walk(node: Any) -> None:
        if isinstance(node, tuple):
            for item in node:
                walk(item)
            return
        if isinstance(node, For):
            inner_loops[node.loop_var] = node
            inner_vars.add(node.loop_var)
        elif isinstance(node, LetStmt) or isinstance(node, E.Let):
            inner_vars.add(node.var)
        elif isinstance(node, Block):
            inner_vars.update(iv.var for iv in node.iter_vars)
        if isinstance(node, BufferStore):
            walk(node.value)
            walk(node.indices)
            stores.setdefault(node.buffer, []).append(node.indices)
            return
        if isinstance(node, E.BufferLoad):
            walk(node.indices)
            loads.setdefault(node.buffer, []).append(node.indices)
            return
        if isinstance(node, (Allocate,)):
            allocated_here.add(node.buffer)
        if isinstance(node, Block):
            allocated_here.update(node.alloc_buffers)
        if hasattr(node, "__dataclass_fields__") and not isinstance(node, Buffer):
            for name in node.__dataclass_fields__:
                walk(getattr(node, name))

    allocated_here: set[Buffer] = set(allocated)
    if init is not None:
        walk(init)
    walk(body)

    def regions(accesses: dict[Buffer, list[tuple]]) -> tuple[BufferRegion, ...]:
        out = []
        for buffer, index_lists in accesses.items():
            if buffer in allocated_here:
                continue
            ranges = []
            for dim, extent in enumerate(buffer.shape):
                column = [indices[dim] for indices in index_lists]
                ranges.append(_dimension_range(column, extent, inner_loops, inner_vars))
            out.append(BufferRegion(buffer, tuple(ranges)))
        return tuple(out)

    return regions(loads), regions(stores)


def _dimension_range(column: list, extent: E.PrimExpr, inner_loops: dict, inner_vars: set) -> E.Range:
    from .functor import free_vars

    first = column[0]
    uses_inner = any(v in inner_vars for index in column for v in free_vars(index))
    if not uses_inner and first.dtype.lanes == 1 and all(
            structural_equal(first, other, map_free_vars=False) for other in column[1:]):
        return E.Range(first, E.IntImm(1, first.dtype))
    if not uses_inner and first.dtype.lanes == 1:
        offsets = [_base_and_offset(index) for index in column]
        base = offsets[0][0]
        if base is not None and all(b is not None and structural_equal(base, b, map_free_vars=False)
                                    for b, _ in offsets[1:]):
            low = min(c for _, c in offsets)
            high = max(c for _, c in offsets)
            start = base if low == 0 else E.Add(base, E.IntImm(low, base.dtype))
            return E.Range(start, E.IntImm(high - low + 1, base.dtype))
    if isinstance(first, E.Var) and first in inner_loops and all(index is first for index in column):
        loop = inner_loops[first]
        if not any(v in inner_vars for v in free_vars(loop.min) + free_vars(loop.extent)):
            return E.Range(loop.min, loop.extent)
    return E.Range.from_extent(extent)


def _base_and_offset(index: E.PrimExpr) -> tuple[E.PrimExpr | None, int]:
    """index as base + constant (`vi + 1` -> (vi, 1), `vi - 2` -> (vi, -2), `vi` -> (vi, 0))."""
    if isinstance(index, E.Add) and isinstance(index.b, E.IntImm):
        return index.a, index.b.value
    if isinstance(index, E.Sub) and isinstance(index.b, E.IntImm):
        return index.a, -index.b.value
    if isinstance(index, E.IntImm):
        return None, index.value
    return index, 0
