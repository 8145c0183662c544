"""convert_layout: convolution chains in the channel-blocked layout NCHW{L}c (spec/graph.md,
"Layouts"), converted back only at their edges.

Run before legalize_ops, on the operators themselves.  In each dataflow block, a binding joins
the blocked region when it is

- a float32 `conv2d` with constant weights and constant channel counts, not grouped or depthwise
  (one input channel per output channel): it becomes `conv2d_nchwc`, its weights packed
  ("OIHW{L}o", refcomp.graph.op.layout.pack_conv_weight) here, once, at build time.  One of
  fewer than L / 2 input channels (a stem over an image's 3, which blocks would pad mostly with
  zeros) whose input is not blocked reads that input as it is, NCHW, and writes the blocked
  layout: no conversion in, and none of its output (a MobileNetV2 stem, 3 x 3 stride 2 over 3
  channels at 96 x 96, batch 2, ran in 0.61x the time of the NCHW kernel on Zen 3, before the
  conversion of its output that it also saves);
- an elementwise or broadcast operator of float32 output whose tensor operands are values of its
  own shape (blocked, or converted in), per-channel constants ((C, 1, 1) or (1, C, 1, 1): packed here the same way,
  the channels past C repeating the last one, so that no operator sees a value it would not see in
  NCHW) or constants of one element, at least one operand blocked;
- `max_pool2d`, `avg_pool2d` or `global_avg_pool` of a blocked value (their `_nchwc` forms).

A value that a convolution reads and that is not blocked is converted to it
(`layout_transform`); a blocked value that anything else reads (a reshape, a matmul, the
function's result, another block) is converted back under its own name, once, right after it is
made.  Regions (values connected by these reads) with fewer than `min_convs` convolutions of at
least L output channels keep NCHW: the conversions would cost more than the blocked kernels win.
With regions="depthwise" (graph.build's default, layouts="auto") only the regions holding a
depthwise convolution are converted: measured, one AVX-512 core, a MobileNetV2 at half width ran
1.04-1.08x faster in NCHW16c, a ResNet-18 at half width (no depthwise layer) 0.92-1.07x, on par
(benchmarks/README.md).
L is the native vector of float32 lanes (refcomp.emit_c.toolchain); `refcomp.graph.build(layouts=...)`
chooses: "auto" (the default) regions="depthwise", True "all", False leaves the pass out.  Decisions go to the debug log of "refcomp.graph.convert_layout".
"""
from __future__ import annotations

import logging

import numpy as np

from ...ast.function import IRModule
from ...ast.graph import Call, Constant, DataflowBlock, DataflowVar, Op, Var, VarBinding
from ...ast.graph_struct_info import TensorStructInfo
from ..block_builder import BlockBuilder
from ..op.layout import (avg_pool2d_nchwc, blocked_name, conv2d_nchwc, global_avg_pool_nchwc, layout_transform,
                         max_pool2d_nchwc, pack_conv_weight, to_blocked)
from ..op.registry import get as get_op
from ..shape_facts import const_value
from .common import graph_functions, used_vars

log = logging.getLogger("refcomp.graph.convert_layout")

_POOLS = {"max_pool2d": max_pool2d_nchwc, "avg_pool2d": avg_pool2d_nchwc}


def native_float_lanes() -> int:
    """L: float32 lanes of this CPU's native vector (8 with AVX2, 16 with AVX-512)."""
    from ...emit_c.toolchain import native_vector_bytes

    return max(4, native_vector_bytes() // 4)


REGIONS = ("all", "depthwise")


def convert_layout(mod: IRModule, lanes: int | None = None, min_convs: int = 2, regions: str = "all") -> IRModule:
    """mod with its convolution chains in NCHW{lanes}c (module doc); regions "depthwise": only
    the regions holding a depthwise convolution (graph.build's default, layouts="auto")."""
    if regions not in REGIONS:
        from ...errors import BuildError

        raise BuildError(f"convert_layout: regions must be one of {', '.join(REGIONS)}, got {regions!r}")
    lanes = lanes or native_float_lanes()
    bb = BlockBuilder(mod)
    for name, func in graph_functions(mod):
        uses = _uses(func)
        blocks, changed = [], False
        for block in func.body.blocks:
            new = _convert_block(block, uses, lanes, min_convs, regions, bb, name) if isinstance(block, DataflowBlock) \
                else block
            changed |= new is not block
            blocks.append(new)
        if changed:
            mod = mod.with_function(name, func.with_(body=func.body.with_(blocks=tuple(blocks))))
    return mod


def _uses(func) -> dict:
    """var -> the bindings' vars that read it (None for the function's result)."""
    found: dict = {}
    for block in func.body.blocks:
        for b in block.bindings:
            for v in used_vars(b.value):
                found.setdefault(v, []).append(b.var)
    for v in used_vars(func.body.body):
        found.setdefault(v, []).append(None)
    return found


def _tensor(expr) -> TensorStructInfo | None:
    info = expr.struct_info
    return info if isinstance(info, TensorStructInfo) else None


def _static(dim) -> int | None:
    return const_value(dim)


def _nchw_f32(expr) -> tuple | None:
    """The (N, C, H, W) dims of a 4-d float32 tensor with a constant channel count, else None."""
    info = _tensor(expr)
    if info is None or info.shape is None or info.ndim != 4 or str(info.dtype) != "float32" \
            or _static(info.shape[1]) is None:
        return None
    return tuple(info.shape)


def _conv_kind(call: Call) -> str | None:
    """"dense" or "depthwise" for a conv2d the blocked layout takes, else None."""
    x, w = call.args
    xs = _nchw_f32(x)
    if xs is None or not isinstance(w, Constant) or w.array.ndim != 4 or w.array.dtype != np.float32:
        return None
    groups = int(call.attrs.get("groups", 1))
    channels = _static(xs[1])
    if groups == 1 and w.array.shape[1] == channels:
        return "dense"
    if groups == channels and w.array.shape[0] == channels and w.array.shape[1] == 1:
        return "depthwise"
    return None


def _channel_constant(const: Constant, channels: int) -> str | None:
    """"scalar" for a constant of one element, "channel" for a per-channel one, else None."""
    shape = const.array.shape
    if const.array.size == 1 and len(shape) <= 4:
        return "scalar"
    full = (1,) * (4 - len(shape)) + tuple(shape) if len(shape) <= 4 else None
    if full is not None and full[0] == 1 and full[1] == channels and full[2] == 1 and full[3] == 1:
        return "channel"
    return None


def _candidate(b, blocked: set, lanes: int) -> str | None:
    """Why binding b may join the blocked region ("conv", "elementwise", "pool"), or None."""
    value = b.value
    if not isinstance(b, VarBinding) or not isinstance(value, Call) or not isinstance(value.op, Op):
        return None
    name = value.op.name
    if name == "conv2d":
        return "conv" if _conv_kind(value) is not None and _nchw_f32(b.var) is not None else None
    if name in _POOLS or name == "global_avg_pool":
        return "pool" if value.args and value.args[0] in blocked and _nchw_f32(b.var) is not None else None
    out = _nchw_f32(b.var)
    if out is None:
        return None
    try:
        pattern = get_op(name).pattern
    except Exception:
        return None
    if pattern not in ("elementwise", "broadcast"):
        return None
    channels = _static(out[1])
    some = False
    for arg in value.args:
        if isinstance(arg, Constant):
            if _channel_constant(arg, channels) is None:
                return None
        elif isinstance(arg, Var) and _tensor(arg) is not None:
            # a blocked value, or a tensor of the output's own shape (converted in: a residual sum's
            # shortcut that a convolution reads blocked already)
            if _tensor(arg).shape is None or len(_tensor(arg).shape) != 4 \
                    or any(_static(a) != _static(o) or (_static(a) is None and a is not o)
                           for a, o in zip(_tensor(arg).shape, out)):
                return None
            some |= arg in blocked
        else:
            return None
    return "elementwise" if some else None


def _convert_block(block: DataflowBlock, uses: dict, lanes: int, min_convs: int, regions: str,
                   bb: BlockBuilder, fname: str):
    bindings = block.bindings
    kinds: dict = {}
    blocked: set = set()
    for b in bindings:
        kind = _candidate(b, blocked, lanes)
        if kind is not None:
            kinds[b.var] = kind
            blocked.add(b.var)
    if not blocked:
        return block
    # regions: blocked values joined by the reads between them
    parent = {v: v for v in blocked}

    def find(v):
        while parent[v] is not v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for b in bindings:
        if b.var in blocked:
            for arg in used_vars(b.value):
                if arg in blocked:
                    parent[find(arg)] = find(b.var)
    worthy: dict = {}
    for v in blocked:
        if kinds[v] == "conv" and _static(_tensor(v).shape[1]) >= lanes:
            worthy[find(v)] = worthy.get(find(v), 0) + 1
    if regions == "depthwise":  # only regions with a depthwise convolution (module doc)
        with_depthwise = {find(v) for v in blocked
                          if kinds[v] == "conv" and _conv_kind(_value_of(bindings, v)) == "depthwise"}
        worthy = {root: count for root, count in worthy.items() if root in with_depthwise}
    keep = {v for v in blocked if worthy.get(find(v), 0) >= min_convs}
    for root in {find(v) for v in blocked}:
        members = [v for v in blocked if find(v) is root]
        log.debug("convert_layout: %s: region of %d bindings from %s, %d convolutions of >= %d channels: %s",
                  fname, len(members), members[0].name, worthy.get(root, 0), lanes,
                  f"NCHW{lanes}c" if root in keep or any(m in keep for m in members) else "kept NCHW")
    if not keep:
        return block
    layout = blocked_name(lanes)
    out: list = []
    blocked_of: dict = {}
    into: dict = {}

    def emit(call: Call, name: str) -> Var:
        var = DataflowVar(name, bb.infer_call(call))
        out.append(VarBinding(var, call.with_(struct_info=var.struct_info)))
        return var

    def as_blocked(arg):
        if arg in blocked_of:
            return blocked_of[arg]
        if arg not in into:
            into[arg] = emit(layout_transform(arg, src="NCHW", dst=layout), f"{arg.name}_{layout}")
        return into[arg]

    for b in bindings:
        if b.var not in keep:
            out.append(b)
            continue
        value, kind = b.value, kinds[b.var]
        if kind == "conv":
            x, w = value.args
            depthwise = _conv_kind(value) == "depthwise"
            # an input of fewer than L / 2 channels (an image's 3) would be mostly padding lanes:
            # read as it is where it is not blocked already
            plain = not depthwise and x not in blocked_of and 2 * _static(_nchw_f32(x)[1]) < lanes
            weight = Constant(pack_conv_weight(np.asarray(w.array), lanes, depthwise, plain_input=plain))
            call = conv2d_nchwc(x if plain else as_blocked(x), weight, strides=value.attrs["strides"],
                                padding=value.attrs["padding"], dilation=value.attrs["dilation"], depthwise=depthwise)
        elif kind == "pool":
            x = as_blocked(value.args[0])
            if value.op.name == "global_avg_pool":
                call = global_avg_pool_nchwc(x)
            else:
                keys = ("pool_size", "strides", "padding", "dilation", "ceil_mode") + \
                    (("count_include_pad",) if value.op.name == "avg_pool2d" else ())
                call = _POOLS[value.op.name](x, **{k: value.attrs[k] for k in keys if k in value.attrs})
        else:
            channels = _static(_tensor(b.var).shape[1])
            args = tuple(_blocked_constant(a, channels, lanes) if isinstance(a, Constant) else as_blocked(a)
                         for a in value.args)
            call = value.with_(args=args, struct_info=None)
        var = emit(call, f"{b.var.name}_{layout}")
        blocked_of[b.var] = var
        if any(user is None or user not in keep for user in uses.get(b.var, [])):
            # read outside the region: converted back, under its own name
            back = layout_transform(var, src=layout, dst="NCHW", channels=_static(_tensor(b.var).shape[1]))
            out.append(VarBinding(b.var, back.with_(struct_info=bb.infer_call(back))))
    log.debug("convert_layout: %s: %d bindings in %s, %d conversions in", fname, len(blocked_of), layout, len(into))
    return DataflowBlock(tuple(out))


def _value_of(bindings, var):
    return next(b.value for b in bindings if b.var is var)


def _blocked_constant(const: Constant, channels: int, lanes: int) -> Constant:
    """A per-channel constant as (1, C / L, 1, 1, L), its padding lanes repeating the last channel
    (a constant of one element stays as it is)."""
    if _channel_constant(const, channels) == "scalar":
        return const
    array = np.asarray(const.array).reshape(1, channels, 1, 1)
    pad = -(-channels // lanes) * lanes - channels
    array = np.pad(array, [(0, 0), (0, pad), (0, 0), (0, 0)], mode="edge")
    return Constant(to_blocked(array, lanes))
