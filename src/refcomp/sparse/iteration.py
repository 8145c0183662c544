"""Stage I: sparse iterations over the coordinates of a format's axes.

A stage I program declares axes (`SpAxis`, with symbolic lengths and a parent), sparse buffers
over chains of them (`SpBuffer`), and one sparse iteration:

    I = sp_axis("I", "dense_fixed", m)
    J = sp_axis("J", "sparse_variable", k, parent=I, nnz=nnz)
    F = sp_axis("F", "dense_fixed", n)
    A, B, C = SpBuffer("A", (I, J)), SpBuffer("B", (K, F)), SpBuffer("C", (I, F))
    spmm = sp_iter("spmm", [(I, "S"), (J, "R"), (F, "S")], C, lambda i, j, f: ((i, f), A[i, j] * B[j, f]))

Each iteration variable stands for the *coordinate* of its axis (the column j, not the position
of j in the indices array); an access `B[j, f]` reads the logical element at those coordinates,
which is 0 where a sparse buffer stores nothing (and the sum where a coordinate is stored twice,
as ELL padding is).  A buffer read by its own iteration variables (`A[i, j]` over A's axes) reads
the value stored at the iteration point's position.  With an "R" (reduce) axis the output is set to 0
at every point of the spatial axes' iteration and the values are summed into it; otherwise each
point is assigned.

`script_stage1` prints the program, `check_iteration` checks it (IRError naming the rule), and
`run_stage1` is its executable meaning on numpy arrays (the same arguments as the lowered kernel).
`sparse_reorder` and `sparse_fuse` rewrite the loop structure of an iteration; `lower.py` takes it
to stage II (position space) and stage III (the ordinary loop IR).
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

import numpy as np

from ..ast import Buffer, BufferLoad, IntImm, PrimExpr, Var, collect, convert
from ..ast.printer import script
from ..errors import IRError, ScheduleError
from ..shape.evaluate import EvaluationError, evaluate
from .formats import _ranges
from .validate import check_index_array, check_indices, check_indptr, check_values

AXIS_KINDS = ("dense_fixed", "dense_variable", "sparse_fixed", "sparse_variable")


class SparseIterationError(IRError):
    """A stage I program breaks a rule of the sparse iteration (message names the rule)."""


class SparseScheduleError(ScheduleError):
    """A sparse transformation's precondition does not hold (message names it)."""


@dataclass(frozen=True, eq=False)
class SpAxis:
    """An axis of a stage I program: coordinates in [0, length), nested in `parent`.

    Variable axes (dense_variable, sparse_variable) count their positions in `nnz`; a sparse_fixed
    axis holds `per_row` coordinates per parent position."""

    name: str
    kind: str
    length: PrimExpr
    parent: "SpAxis | None" = None
    nnz: PrimExpr | None = None
    per_row: PrimExpr | None = None
    sorted: bool = True

    def __post_init__(self) -> None:
        if self.kind not in AXIS_KINDS:
            raise SparseIterationError(f"axis {self.name}: kind must be one of {AXIS_KINDS}, got {self.kind!r}")
        object.__setattr__(self, "length", convert(self.length))
        variable = self.kind in ("dense_variable", "sparse_variable")
        if variable != (self.nnz is not None):
            raise SparseIterationError(f"axis {self.name}: nnz goes with variable axes only")
        if (self.kind == "sparse_fixed") != (self.per_row is not None):
            raise SparseIterationError(f"axis {self.name}: per_row goes with sparse_fixed axes only")
        if self.nnz is not None:
            object.__setattr__(self, "nnz", convert(self.nnz))
        if self.per_row is not None:
            object.__setattr__(self, "per_row", convert(self.per_row))

    @property
    def has_indptr(self) -> bool:
        return self.kind in ("dense_variable", "sparse_variable")

    @property
    def has_indices(self) -> bool:
        return self.kind in ("sparse_fixed", "sparse_variable")

    @property
    def parents(self) -> PrimExpr:
        """How many positions the parent has (1 for a root axis)."""
        return IntImm(1) if self.parent is None else self.parent.positions

    @property
    def positions(self) -> PrimExpr:
        """How many positions this axis has over all parent positions."""
        if self.kind == "dense_fixed":
            return self.length if self.parent is None else self.parent.positions * self.length
        if self.kind == "sparse_fixed":
            return self.parents * self.per_row
        return self.nnz  # type: ignore[return-value]

    def describe(self) -> str:
        args = ([self.parent.name] if self.parent is not None else []) + [script(self.length)]
        if self.nnz is not None:
            args.append(f"nnz={script(self.nnz)}")
        if self.per_row is not None:
            args.append(f"per_row={script(self.per_row)}")
        if self.has_indices and not self.sorted:
            args.append("unsorted")
        return f"{self.kind}({', '.join(args)})"


def sp_axis(name: str, kind: str, length: Any, parent: SpAxis | None = None, nnz: Any = None,
            per_row: Any = None, sorted: bool = True) -> SpAxis:
    return SpAxis(name, kind, length, parent, nnz, per_row, sorted)


@dataclass(frozen=True, eq=False)
class SpBuffer:
    """A buffer over a chain of axes.  `logical` (one dim per axis, its coordinates) is what stage
    I indexes; `storage` is the array the kernel receives: one value per position of the last
    non-dense_fixed axis of the chain, times the lengths of the dense_fixed axes after it (a chain
    of dense_fixed axes only is an ordinary dense array)."""

    name: str
    axes: tuple[SpAxis, ...]
    dtype: str = "float32"
    logical: Buffer = field(init=False)
    storage: Buffer = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes", tuple(self.axes))
        check_chain(self)
        object.__setattr__(self, "logical", Buffer(self.name, tuple(a.length for a in self.axes), self.dtype))
        cut = self.sparse_depth
        dims = tuple(a.length for a in self.axes) if cut < 0 else \
            (self.axes[cut].positions,) + tuple(a.length for a in self.axes[cut + 1:])
        object.__setattr__(self, "storage", Buffer(self.name, dims, self.dtype))

    @property
    def sparse_depth(self) -> int:
        """Index of the last axis of the chain that is not dense_fixed (-1: a dense buffer)."""
        return max((t for t, a in enumerate(self.axes) if a.kind != "dense_fixed"), default=-1)

    def __getitem__(self, indices: Any) -> BufferLoad:
        return self.logical[indices]


def check_chain(buffer: SpBuffer) -> None:
    """A buffer's chain: the first axis is a root; each later one is a root dense_fixed axis or a
    child of the axis before it (so positions of the chain are well defined)."""
    for t, axis in enumerate(buffer.axes):
        if not isinstance(axis, SpAxis):
            raise SparseIterationError(f"buffer {buffer.name}: axis {t} is not an SpAxis: {axis!r}")
        before = buffer.axes[t - 1] if t else None
        if axis.parent is not before and not (axis.parent is None and axis.kind == "dense_fixed"):
            raise SparseIterationError(
                f"buffer {buffer.name}: axis {axis.name} must follow its parent "
                f"{axis.parent.name if axis.parent else '(none: a root)'} in the chain")


@dataclass(frozen=True, eq=False)
class IterAxis:
    var: Var
    axis: SpAxis
    kind: str  # "S" spatial or "R" reduce


@dataclass(frozen=True, eq=False)
class SparseIteration:
    """One sparse iteration: loops (each a tuple of axes; more than one is a fused loop) in order,
    the output buffer with its indices, the value, and the buffers in parameter order."""

    name: str
    loops: tuple[tuple[IterAxis, ...], ...]
    output: SpBuffer
    out_indices: tuple[PrimExpr, ...]
    value: PrimExpr
    buffers: tuple[SpBuffer, ...]
    init: bool = True  # a reduction first sets its output to 0 (False: it adds to what is there)

    @property
    def iters(self) -> tuple[IterAxis, ...]:
        return tuple(it for loop in self.loops for it in loop)

    @property
    def reduces(self) -> bool:
        return any(it.kind == "R" for it in self.iters)

    def with_loops(self, loops: Sequence[Sequence[IterAxis]]) -> "SparseIteration":
        return replace(self, loops=tuple(tuple(loop) for loop in loops))


def sp_iter(name: str, axes: Sequence[tuple[SpAxis, str]], output: SpBuffer,
            body: Callable[..., tuple[Sequence[Any], PrimExpr]], buffers: Sequence[SpBuffer],
            init: bool = True) -> SparseIteration:
    """An iteration over `axes` ((axis, "S" | "R") in loop order): body(*coordinate vars) gives
    (output indices, value).  With init=False a reduction adds to the output's values."""
    iters = tuple(IterAxis(Var(axis.name.lower(), "int32"), axis, kind) for axis, kind in axes)
    indices, value = body(*(it.var for it in iters))
    it = SparseIteration(name, tuple((i,) for i in iters), output, tuple(convert(i) for i in indices),
                         convert(value), tuple(buffers), init)
    check_iteration(it)
    return it


def _loads(it: SparseIteration) -> list[BufferLoad]:
    return collect(it.value, BufferLoad)


def check_iteration(it: SparseIteration) -> None:
    """The rules of stage I (SparseIterationError names the first one broken):

    - every axis's parent is iterated, in an earlier loop or earlier in the same fused loop;
    - a fused loop is a chain (each axis the child of the one before it);
    - kinds are "S" or "R", and no spatial axis is the child of a reduce axis;
    - the output is indexed by exactly the spatial variables, each once;
    - where the output's chain has a non-dense_fixed axis, its index is that axis's own variable
      (a value can only be stored at a position the iteration visits), and that axis is sorted;
    - every buffer accessed is listed, with one index per axis of its chain."""
    seen: set[SpAxis] = set()
    for loop in it.loops:
        for t, ia in enumerate(loop):
            if ia.kind not in ("S", "R"):
                raise SparseIterationError(f"{it.name}: axis {ia.axis.name}: kind must be 'S' or 'R', got {ia.kind!r}")
            if ia.axis.parent is not None and ia.axis.parent not in seen:
                raise SparseIterationError(f"{it.name}: axis {ia.axis.name} is iterated before its parent "
                                           f"{ia.axis.parent.name}")
            if t and ia.axis.parent is not loop[t - 1].axis:
                raise SparseIterationError(f"{it.name}: fused axes must form a chain, but "
                                           f"{ia.axis.name} is not a child of {loop[t - 1].axis.name}")
            if ia.kind == "S" and ia.axis.parent is not None and \
                    any(o.axis is ia.axis.parent and o.kind == "R" for o in it.iters):
                raise SparseIterationError(f"{it.name}: spatial axis {ia.axis.name} sits below reduce axis "
                                           f"{ia.axis.parent.name}")
            seen.add(ia.axis)
    if len(seen) != len(it.iters):
        raise SparseIterationError(f"{it.name}: an axis is iterated twice")
    spatial = [ia.var for ia in it.iters if ia.kind == "S"]
    if len(it.out_indices) != len(spatial) or set(it.out_indices) != set(spatial):
        raise SparseIterationError(f"{it.name}: the output {it.output.name} must be indexed by the spatial "
                                   f"variables {[v.name for v in spatial]}, each once")
    by_var = {ia.var: ia.axis for ia in it.iters}
    for t, axis in enumerate(it.output.axes):
        if axis.kind != "dense_fixed" and by_var.get(it.out_indices[t]) is not axis:
            raise SparseIterationError(f"{it.name}: the output {it.output.name} is sparse along {axis.name}, so "
                                       f"its index there must be the iteration variable of {axis.name}")
        if axis.has_indices and not axis.sorted:
            raise SparseIterationError(f"{it.name}: the output {it.output.name} is stored along the unsorted axis "
                                       f"{axis.name}, where a coordinate may repeat")
    known = {b.logical: b for b in it.buffers}
    if it.output.logical not in known:
        raise SparseIterationError(f"{it.name}: the output {it.output.name} is not among the buffers")
    for load in _loads(it):
        if load.buffer not in known:
            raise SparseIterationError(f"{it.name}: buffer {load.buffer.name} is read but not listed")


# ----------------------------------------------------------------------------- transformations
def sparse_reorder(it: SparseIteration, order: Sequence[str]) -> SparseIteration:
    """The loops of `it` in a new order, given by axis names (a fused loop by any one of its axes,
    or all of them in their order).  Requires a permutation of the loops in which every axis comes
    after its parent (SparseScheduleError otherwise).

        sp_iter [I, J, F] "SRS"   --sparse_reorder(["I", "F", "J"])-->   sp_iter [I, F, J] "SSR"
    """
    by_name = {ia.axis.name: n for n, loop in enumerate(it.loops) for ia in loop}
    unknown = [name for name in order if name not in by_name]
    if unknown:
        raise SparseScheduleError(f"sparse_reorder: unknown axes {unknown} (the iteration has {sorted(by_name)})")
    picked: list[int] = []
    for name in order:
        if by_name[name] not in picked:
            picked.append(by_name[name])
    if sorted(picked) != list(range(len(it.loops))) or len(order) > len(by_name):
        raise SparseScheduleError(f"sparse_reorder: expected every loop once, got {list(order)}")
    out = it.with_loops([it.loops[n] for n in picked])
    try:
        check_iteration(out)
    except SparseIterationError as err:
        raise SparseScheduleError(f"sparse_reorder: {err.message if hasattr(err, 'message') else err}") from None
    return out


def sparse_fuse(it: SparseIteration, names: Sequence[str]) -> SparseIteration:
    """Fuse adjacent loops into one loop over the positions of the innermost of them.  Requires
    the named axes to be adjacent loops, in order, the first a root axis and each other the child
    of the one before (SparseScheduleError).

        sp_iter [I, J] "SS"   --sparse_fuse(["I", "J"])-->   sp_iter [(I, J)] "SS": one loop over nnz
    """
    flat = [(n, ia) for n, loop in enumerate(it.loops) for ia in loop]
    where = {ia.axis.name: k for k, (_, ia) in enumerate(flat)}
    if len(names) < 2 or any(name not in where for name in names):
        raise SparseScheduleError(f"sparse_fuse: expected two or more axes of the iteration, got {list(names)}")
    ks = [where[name] for name in names]
    if ks != list(range(ks[0], ks[0] + len(ks))):
        raise SparseScheduleError(f"sparse_fuse: axes {list(names)} are not adjacent loops in this order")
    first, last = flat[ks[0]][0], flat[ks[-1]][0]
    if any(len(loop) > 1 for loop in it.loops[first:last + 1]) and \
            ({ia.axis.name for loop in it.loops[first:last + 1] for ia in loop} != set(names)):
        raise SparseScheduleError("sparse_fuse: a fused loop must be fused whole")
    if flat[ks[0]][1].axis.parent is not None:
        raise SparseScheduleError(f"sparse_fuse: {names[0]} is below {flat[ks[0]][1].axis.parent.name}; a fused "
                                  f"loop must start at a root axis")
    for a, b in zip(ks, ks[1:]):
        if flat[b][1].axis.parent is not flat[a][1].axis:
            raise SparseScheduleError(f"sparse_fuse: {flat[b][1].axis.name} is not a child of {flat[a][1].axis.name}")
    merged = tuple(ia for loop in it.loops[first:last + 1] for ia in loop)
    return it.with_loops(list(it.loops[:first]) + [merged] + list(it.loops[last + 1:]))


# ----------------------------------------------------------------------------- printing
def script_stage1(it: SparseIteration) -> str:
    """The program as text: axes, buffers, and the iteration (fused loops in parentheses)."""
    axes: list[SpAxis] = []
    for buffer in it.buffers:
        for axis in buffer.axes:
            chain = []
            while axis is not None and axis not in axes and axis not in chain:
                chain.append(axis)
                axis = axis.parent
            axes.extend(reversed(chain))
    for ia in it.iters:
        if ia.axis not in axes:
            axes.append(ia.axis)
    lines = [f"# stage I: {it.name}"]
    lines += [f"{a.name} = {a.describe()}" for a in axes]
    lines += [f"{b.name}: {b.dtype}[{', '.join(a.name for a in b.axes)}]" for b in it.buffers]
    groups = ", ".join(loop[0].axis.name if len(loop) == 1 else "(" + ", ".join(ia.axis.name for ia in loop) + ")"
                       for loop in it.loops)
    kinds = "".join(ia.kind for ia in it.iters)
    names = ", ".join(ia.var.name for ia in it.iters)
    flag = ", init=False" if it.reduces and not it.init else ""
    lines.append(f"with sp_iter([{groups}], \"{kinds}\"{flag}) as [{names}]:")
    op = "+=" if it.reduces else "="
    target = f"{it.output.name}[{', '.join(script(i) for i in it.out_indices)}]"
    lines.append(f"    {target} {op} {script(it.value)}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------- interpretation
def arrays_of(it: SparseIteration) -> list[tuple[str, SpAxis, Buffer]]:
    """The kernel's array parameters in order: (role, axis, buffer) for each indptr / indices of
    the axes the buffers use (outermost first, each axis once), then the buffers' storage."""
    out: list[tuple[str, Any, Buffer]] = []
    seen: list[SpAxis] = []
    for buffer in it.buffers:
        for axis in buffer.axes:
            chain = []
            a: SpAxis | None = axis
            while a is not None and a not in seen and a not in chain:
                chain.append(a)
                a = a.parent
            for a in reversed(chain):
                seen.append(a)
                if a.has_indptr:
                    out.append(("indptr", a, Buffer(f"{a.name}_indptr", (a.parents + 1,), "int32")))
                if a.has_indices:
                    out.append(("indices", a, Buffer(f"{a.name}_indices", (a.positions,), "int32")))
    for ia in it.iters:
        if ia.axis not in seen and (ia.axis.has_indptr or ia.axis.has_indices):
            raise SparseIterationError(f"{it.name}: axis {ia.axis.name} is iterated but no buffer stores it")
    for buffer in it.buffers:
        out.append(("data", buffer, buffer.storage))
    return out


def _sizes(params: list[tuple[str, Any, Buffer]], args: Sequence[np.ndarray]) -> dict[Var, int]:
    sizes: dict[Var, int] = {}
    for (_, _, buffer), array in zip(params, args):
        for dim, extent in zip(buffer.shape, np.shape(array)):
            if isinstance(dim, Var):
                sizes[dim] = int(extent)
            elif not isinstance(dim, IntImm) and len(collect(dim, Var)) == 1:
                var = collect(dim, Var)[0]
                if var not in sizes:  # dim = var + constant (an indptr)
                    sizes[var] = int(extent) - int(evaluate(dim, {var: 0}))
    return sizes


def _enumerate(axes: Sequence[SpAxis], arrays: dict, sizes: dict) -> tuple[int, dict, dict]:
    """Points of the iteration over `axes` (parents first): (count, coordinate and position of each axis)."""
    count = 1
    coord: dict[SpAxis, np.ndarray] = {}
    pos: dict[SpAxis, np.ndarray] = {}
    for axis in axes:
        parent = pos[axis.parent] if axis.parent is not None else np.zeros(count, dtype=np.int64)
        length = int(evaluate(axis.length, sizes))
        if axis.kind == "dense_fixed":
            repeat, local = np.full(count, length), np.arange(length)
            new_pos = (parent[:, None] * length + local).ravel()
            new_coord = np.tile(local, count)
        elif axis.kind == "sparse_fixed":
            k = int(evaluate(axis.per_row, sizes))
            repeat = np.full(count, k)
            new_pos = (parent[:, None] * k + np.arange(k)).ravel()
            new_coord = arrays[("indices", axis)][new_pos].astype(np.int64)
        else:
            ptr = arrays[("indptr", axis)].astype(np.int64)
            starts, repeat = ptr[parent], ptr[parent + 1] - ptr[parent]
            new_pos = _ranges(starts, repeat)
            new_coord = arrays[("indices", axis)][new_pos].astype(np.int64) if axis.has_indices \
                else new_pos - np.repeat(starts, repeat)
        coord = {a: np.repeat(c, repeat) for a, c in coord.items()}
        pos = {a: np.repeat(p, repeat) for a, p in pos.items()}
        coord[axis], pos[axis] = new_coord, new_pos
        count = int(new_pos.size)
    return count, coord, pos


def _dense_view(buffer: SpBuffer, arrays: dict, sizes: dict, storage: np.ndarray) -> tuple[np.ndarray, tuple]:
    """The logical (coordinate-space) array of a buffer, 0 where nothing is stored, and the
    coordinates of its stored values in storage order."""
    shape = tuple(int(evaluate(a.length, sizes)) for a in buffer.axes)
    count, coord, pos = _enumerate(list(buffer.axes), arrays, sizes)
    flat = _storage_index(buffer, coord, pos, sizes)
    dense = np.zeros(shape, dtype=storage.dtype)
    where = tuple(coord[a] for a in buffer.axes)
    np.add.at(dense, where, storage.reshape(-1)[flat])  # a coordinate stored twice (padding) sums
    return dense, (where, flat)


def _storage_index(buffer: SpBuffer, coord: dict, pos: dict, sizes: dict) -> np.ndarray:
    cut = buffer.sparse_depth
    flat = pos[buffer.axes[cut]] if cut >= 0 else np.zeros_like(next(iter(coord.values())))
    for axis in buffer.axes[cut + 1:]:
        flat = flat * int(evaluate(axis.length, sizes)) + coord[axis]
    return flat


def check_arrays(it: SparseIteration, arrays: dict, sizes: dict) -> None:
    """The format invariants of every indptr / indices array (SparseFormatError naming the array
    and position) and the dtype and shape of every buffer, before anything reads them."""
    def size(expr: PrimExpr) -> int:
        try:
            return int(evaluate(expr, sizes))
        except EvaluationError as err:
            raise SparseIterationError(f"{it.name}: the size {script(expr)} is not known from the arrays "
                                       f"({err}); give it by name") from None

    for (role, owner), array in arrays.items():
        if role == "data":
            check_values(it.name, owner.name, array, tuple(size(d) for d in owner.storage.shape))
            continue
        name = f"{owner.name}.{role}"
        if role == "indptr":
            total = arrays[("indices", owner)].size if owner.has_indices and \
                isinstance(arrays.get(("indices", owner)), np.ndarray) else size(owner.nnz)
            check_indptr(it.name, name, array, size(owner.parents), total)
        else:
            check_index_array(it.name, name, array, size(owner.positions) if not owner.has_indptr else None)
            segments = arrays[("indptr", owner)] if owner.has_indptr else None
            check_indices(it.name, name, array, size(owner.length), segments, owner.sorted and owner.has_indptr)


def run_stage1(it: SparseIteration, *args: np.ndarray, **extents: int) -> None:
    """Run the iteration on numpy arrays in place, by its coordinate semantics (the reference the
    lowered stages are tested against).  Arguments as `arrays_of(it)` lists them; a size that no
    array's shape shows (a dimension only coordinates reach) is given by name."""
    params = arrays_of(it)
    if len(args) != len(params):
        raise SparseIterationError(f"{it.name}: expected {len(params)} arrays, got {len(args)}")
    sizes = _sizes(params, args)
    named = {v.name: v for v in sizes}
    for axis in [ia.axis for ia in it.iters] + [a for b in it.buffers for a in b.axes]:
        for part in (axis.length, axis.nnz, axis.per_row):
            if part is not None:
                named.update({v.name: v for v in collect(part, Var)})
    for name, value in extents.items():
        if name not in named:
            raise SparseIterationError(f"{it.name}: no size named {name!r}")
        sizes[named[name]] = int(value)
    arrays = {(role, owner): a for (role, owner, _), a in zip(params, args)}
    check_arrays(it, arrays, sizes)
    count, coord, pos = _enumerate([ia.axis for ia in it.iters], arrays, sizes)
    env = {ia.var: coord[ia.axis] for ia in it.iters}
    own = {ia.var: ia.axis for ia in it.iters}
    by_logical = {b.logical: b for b in it.buffers}
    views = {b.logical: _dense_view(b, arrays, sizes, arrays[("data", b)])[0] for b in it.buffers}

    def load(node: Any) -> Any:
        if not isinstance(node, BufferLoad):
            raise SparseIterationError(f"{it.name}: cannot evaluate {script(node)}")
        where = tuple(np.broadcast_to(evaluate(i, env), (count,)).astype(np.int64) for i in node.indices)
        buffer = by_logical[node.buffer]
        cut = buffer.sparse_depth
        if cut >= 0 and all(own.get(i) is a for i, a in zip(node.indices[:cut + 1], buffer.axes)):
            # read by the buffer's own iteration variables: the value stored at the point's position
            # (padding included), as the lowered loops read it
            flat = pos[buffer.axes[cut]]
            for axis, c in zip(buffer.axes[cut + 1:], where[cut + 1:]):
                flat = flat * int(evaluate(axis.length, sizes)) + c
            return arrays[("data", buffer)].reshape(-1)[flat]
        return views[node.buffer][where]

    values = np.broadcast_to(evaluate(it.value, env, opaque=load) if count else np.zeros(0), (count,))
    out_store = arrays[("data", it.output)]
    dense, (where, flat) = _dense_view(it.output, arrays, sizes, out_store)
    target = tuple(np.broadcast_to(evaluate(i, env), (count,)).astype(np.int64) for i in it.out_indices) \
        if count else tuple(np.zeros(0, np.int64) for _ in it.out_indices)
    if it.reduces and it.init:
        spatial = [ia for ia in it.iters if ia.kind == "S"]
        points, scoord, _ = _enumerate([ia.axis for ia in spatial], arrays, sizes)
        senv = {ia.var: scoord[ia.axis] for ia in spatial}
        zeroed = tuple(np.broadcast_to(evaluate(i, senv), (points,)).astype(np.int64) for i in it.out_indices)
        dense[zeroed] = 0  # every spatial point is set to 0, visited by a reduction or not
    if it.reduces:
        np.add.at(dense, target, values.astype(dense.dtype))
    else:
        dense[target] = values.astype(dense.dtype)
    view = out_store.reshape(-1)
    view[flat] = dense[where]
