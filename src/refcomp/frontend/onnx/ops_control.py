"""ONNX control flow imported by evaluation at import time: If on a constant condition, Loop with a
constant trip count and condition, and Scan over a static sequence length, unrolled; and the
Optional queries on plain tensors (optional types themselves are not imported).  A Loop whose
trip count or condition is known only at run time runs by recursion (ops_loop_runtime).

The graph IR's own `If` needs the branches outside a dataflow block; the importer builds one
dataflow block, so an If on a condition computed at run time computes both branches and selects
each output with `where` (branches whose outputs differ in shape or type are rejected).  Unrolling
keeps every iteration's ops visible to fusion; MAX_UNROLL bounds the code it may produce.
"""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...ast import expr as tir
from ...ast.graph_struct_info import as_dim
from ...graph.shape_facts import const_value, prove
from .importer import converter

MAX_UNROLL = 256


def _run_body(ctx, graph, env, bound: list):
    """Import a subgraph with its inputs bound to `bound` (outer names stay visible); its outputs."""
    inner = dict(env)
    for vi, value in zip(graph.input, bound):
        inner[vi.name] = value
    for init in graph.initializer:
        from onnx import numpy_helper

        inner[init.name] = Constant(np.asarray(numpy_helper.to_array(init)))
    node = ctx.node
    ctx.import_nodes(graph.node, inner)
    ctx.node = node
    missing = [vi.name for vi in graph.output if vi.name not in inner]
    if missing:
        ctx.fail(f"subgraph output {missing[0]} is never computed")
    return [inner[vi.name] for vi in graph.output]


def _scalar(ctx, value, what):
    if not isinstance(value, Constant):
        ctx.fail(f"{what} must be a constant known at import time (control flow is unrolled at import)")
    return np.asarray(value.array).reshape(-1)[0]


def _stack(ctx, values, axis=0):
    parts = [ctx.emit(op.expand_dims(v, (axis,))) for v in values]
    return parts[0] if len(parts) == 1 else ctx.emit(op.concat(*parts, axis=axis))


@converter("If")
def _if(ctx, node, inputs, attrs):
    if isinstance(inputs[0], Constant):
        cond = bool(np.asarray(inputs[0].array).reshape(-1)[0])
        branch = attrs["then_branch"] if cond else attrs["else_branch"]
        return _run_body(ctx, branch, ctx.env, [])
    return _if_selected(ctx, inputs[0], attrs)


def _if_selected(ctx, cond, attrs):
    """If on a condition known only at run time: both branches are computed (ONNX graphs have no
    side effects) and each output selected by the condition.  The branches' outputs must agree in
    shape and element type, since the output's type cannot depend on the data."""
    then = _run_body(ctx, attrs["then_branch"], ctx.env, [])
    other = _run_body(ctx, attrs["else_branch"], ctx.env, [])
    flag = ctx.emit(op.reshape(cond, ()))
    results = []
    for k, (a, b) in enumerate(zip(then, other)):
        ia, ib = ctx.info(a), ctx.info(b)
        if ia.dtype != ib.dtype or ia.shape is None or ib.shape is None or len(ia.shape) != len(ib.shape) \
                or not all(prove(tir.EQ(as_dim(p), as_dim(q))).proved for p, q in zip(ia.shape, ib.shape)):
            ctx.fail(f"an If on a condition known only at run time needs branches whose output {k} has one "
                     f"shape and type, got {ia} and {ib}")
        results.append(ctx.emit(op.where(flag, a, b)))
    return results


@converter("Loop")
def _loop(ctx, node, inputs, attrs):
    body = attrs["body"]
    trips = inputs[0] if inputs else None
    cond = inputs[1] if len(inputs) > 1 else None
    if any(v is not None and not isinstance(v, Constant) for v in (trips, cond)):
        from .ops_loop_runtime import loop_runtime

        return loop_runtime(ctx, node, inputs, attrs, _run_body)
    max_trips = int(_scalar(ctx, trips, "the Loop trip count")) if trips is not None else None
    running = bool(_scalar(ctx, cond, "the Loop condition")) if cond is not None else True
    if max_trips is not None and max_trips > MAX_UNROLL:
        ctx.fail(f"a Loop of more than {MAX_UNROLL} iterations is not unrolled")
    carried = list(inputs[2:])
    scans: list[list] = []
    n_scan = len(body.output) - 1 - len(carried)
    for i in range(MAX_UNROLL + 1 if max_trips is None else max_trips):
        if not running:
            break
        if i == MAX_UNROLL:
            ctx.fail(f"a Loop whose condition holds after {MAX_UNROLL} iterations is not unrolled")
        outs = _run_body(ctx, body, ctx.env, [Constant(np.asarray(i, np.int64)), Constant(np.asarray(running))]
                         + carried)
        running = bool(_scalar(ctx, outs[0], "the Loop condition computed by the body"))
        carried = list(outs[1:1 + len(carried)])
        scans.append(outs[1 + len(carried):])
    results = list(carried)
    for k in range(n_scan):
        if not scans:
            ctx.fail("a Loop that runs no iteration has empty scan outputs, which are not supported")
        results.append(_stack(ctx, [s[k] for s in scans]))
    return results


@converter("Scan")
def _scan(ctx, node, inputs, attrs):
    body = attrs["body"]
    n_scan = attrs["num_scan_inputs"]
    if ctx.opset < 9:
        return _scan8(ctx, node, inputs, attrs, body, n_scan)
    states, xs = list(inputs[:len(inputs) - n_scan]), list(inputs[len(inputs) - n_scan:])
    in_axes = list(attrs.get("scan_input_axes", [0] * n_scan))
    in_dirs = list(attrs.get("scan_input_directions", [0] * n_scan))
    n_out = len(body.output) - len(states)
    out_axes = list(attrs.get("scan_output_axes", [0] * n_out))
    out_dirs = list(attrs.get("scan_output_directions", [0] * n_out))
    return _unroll(ctx, body, states, xs, in_axes, in_dirs, out_axes, out_dirs)


def _unroll(ctx, body, states, xs, in_axes, in_dirs, out_axes, out_dirs):
    axes = [a % ctx.info(x).ndim for a, x in zip(in_axes, xs)]
    lengths = {const_value(ctx.static_shape(x)[a]) for x, a in zip(xs, axes)}
    if len(lengths) != 1 or None in lengths:
        ctx.fail("Scan inputs need one static sequence length")
    length = lengths.pop()
    if length > MAX_UNROLL:
        ctx.fail(f"a Scan of more than {MAX_UNROLL} steps is not unrolled")
    outs_per_step = []
    for t in range(length):
        slices = []
        for x, a, d in zip(xs, axes, in_dirs):
            i = length - 1 - t if d else t
            piece = ctx.emit(op.strided_slice(x, [a], [i], [i + 1], [1]))
            slices.append(ctx.emit(op.squeeze(piece, (a,))))
        outs = _run_body(ctx, body, ctx.env, states + slices)
        states = list(outs[:len(states)])
        outs_per_step.append(outs[len(states):])
    results = list(states)
    for k, (axis, direction) in enumerate(zip(out_axes, out_dirs)):
        steps = [s[k] for s in outs_per_step]
        if direction:
            steps = steps[::-1]
        ndim = ctx.info(steps[0]).ndim + 1
        results.append(_stack(ctx, steps, axis % ndim))
    return results


def _scan8(ctx, node, inputs, attrs, body, n_scan):
    """Scan-8: a batch axis first, the sequence axis second; each batch row is scanned on its own."""
    if inputs[0] is not None:
        ctx.fail("Scan with sequence_lens is not supported")
    states, xs = list(inputs[1:len(inputs) - n_scan]), list(inputs[len(inputs) - n_scan:])
    batch = const_value(ctx.static_shape(xs[0])[0])
    if batch is None:
        ctx.fail("Scan-8 needs a static batch size")
    dirs = list(attrs.get("directions", [0] * n_scan))
    n_out = len(body.output) - len(states)
    rows = []
    for b in range(batch):
        def row(v):
            return ctx.emit(op.squeeze(ctx.emit(op.strided_slice(v, [0], [b], [b + 1], [1])), (0,)))

        rows.append(_unroll(ctx, body, [row(s) for s in states], [row(x) for x in xs], [0] * n_scan, dirs,
                            [0] * n_out, [0] * n_out))
    return [_stack(ctx, [r[k] for r in rows]) for k in range(len(rows[0]))]


@converter("OptionalHasElement")
def _optional_has_element(ctx, node, inputs, attrs):
    # optional values are not imported: an input is a tensor or absent, both known now
    present = bool(inputs) and inputs[0] is not None
    return Constant(np.asarray(present))


@converter("OptionalGetElement")
def _optional_get_element(ctx, node, inputs, attrs):
    if not inputs or inputs[0] is None:
        ctx.fail("OptionalGetElement of an absent value")
    return inputs[0]
