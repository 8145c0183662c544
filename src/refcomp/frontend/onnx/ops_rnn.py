"""ONNX RNN, GRU and LSTM, unrolled over a static sequence length.

The input projection X W^T of every step is one matmul; each step then adds H R^T and applies the
gates.  Rows past their sequence length (sequence_lens) keep their state and emit zeros, as the
ONNX definition says.  Directions forward, reverse and bidirectional; layout 0 (time major) and 1.
"""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from ...graph.shape_facts import const_value
from .importer import converter
from .ops_control import MAX_UNROLL

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTIVATIONS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}


def _activation(ctx, name, alpha, beta):
    c = lambda v, x: Constant(np.asarray(v, ctx.info(x).dtype.numpy()))  # noqa: E731
    table = {
        "tanh": lambda x: op.tanh(x),
        "sigmoid": lambda x: op.sigmoid(x),
        "relu": lambda x: op.relu(x),
        "softsign": lambda x: op.softsign(x),
        "softplus": lambda x: op.softplus(x),
        "leakyrelu": lambda x: op.leaky_relu(x, alpha=0.01 if alpha is None else alpha),
        "hardsigmoid": lambda x: op.hard_sigmoid(x, alpha=0.2 if alpha is None else alpha,
                                                 beta=0.5 if beta is None else beta),
        "affine": lambda x: op.add(op.multiply(x, c(1.0 if alpha is None else alpha, x)),
                                   c(0.0 if beta is None else beta, x)),
        "scaledtanh": lambda x: op.multiply(op.tanh(op.multiply(x, c(1.0 if beta is None else beta, x))),
                                            c(1.0 if alpha is None else alpha, x)),
    }
    fn = table.get(name.lower())
    if fn is None:
        ctx.fail(f"activation {name} is not supported")
    return lambda x: ctx.emit(fn(x))


def _activations(ctx, node, attrs, directions):
    names = [a.decode() if isinstance(a, bytes) else a for a in attrs.get("activations", [])]
    per_dir = len(DEFAULT_ACTIVATIONS[node.op_type])
    if not names:
        names = DEFAULT_ACTIVATIONS[node.op_type] * directions
    alphas = list(attrs.get("activation_alpha", []))
    betas = list(attrs.get("activation_beta", []))
    fns = []
    for k, name in enumerate(names):
        fns.append(_activation(ctx, name, alphas[k] if k < len(alphas) else None,
                               betas[k] if k < len(betas) else None))
    return [fns[d * per_dir:(d + 1) * per_dir] for d in range(directions)]


def _slice(ctx, x, axis, start, stop):
    return ctx.emit(op.strided_slice(x, [axis], [start], [stop]))


def _row(ctx, x, index):
    """x[index] without the leading axis."""
    return ctx.emit(op.squeeze(_slice(ctx, x, 0, index, index + 1), (0,)))


@converter("RNN", "GRU", "LSTM")
def _recurrent(ctx, node, inputs, attrs):
    kind = node.op_type
    inputs = list(inputs) + [None] * (8 - len(inputs))
    x, w, r, b, lengths, h0 = inputs[:6]
    c0, peep = (inputs[6], inputs[7]) if kind == "LSTM" else (None, None)
    layout = attrs.get("layout", 0)
    if layout:
        x = ctx.emit(op.permute_dims(x, (1, 0, 2)))
    seq, batch, _ = (const_value(d) for d in ctx.static_shape(x))
    if seq is None or batch is None:
        ctx.fail("the sequence length and batch size must be static (the recurrence is unrolled)")
    if seq > MAX_UNROLL:
        ctx.fail(f"sequences longer than {MAX_UNROLL} steps are not unrolled")
    hidden = attrs.get("hidden_size") or const_value(ctx.static_shape(r)[2])
    direction = attrs.get("direction", b"forward")
    direction = direction.decode() if isinstance(direction, bytes) else direction
    directions = 2 if direction == "bidirectional" else 1
    acts = _activations(ctx, node, attrs, directions)
    clip = attrs.get("clip")
    dtype = ctx.info(x).dtype.numpy()
    gates = GATES[kind]
    zeros = Constant(np.zeros((batch, hidden), dtype))
    valid = None
    if lengths is not None:  # valid[t]: (batch, 1) rows still inside their sequence at step t
        n = ctx.emit(op.reshape(op.astype(lengths, "int64"), (batch, 1)))
        valid = [ctx.emit(op.less(Constant(np.asarray(t, np.int64)), n)) for t in range(seq)]
    ys, hs, cs = [], [], []
    for d in range(directions):
        reverse = direction == "reverse" or d == 1
        wd, rd = _row(ctx, w, d), _row(ctx, r, d)
        projected = ctx.emit(op.matmul(x, op.permute_dims(wd)))  # (seq, batch, gates * hidden)
        if b is not None:
            bd = _row(ctx, b, d)
            projected = ctx.emit(op.add(projected, _slice(ctx, bd, 0, 0, gates * hidden)))
            rb = _slice(ctx, bd, 0, gates * hidden, 2 * gates * hidden)
        else:
            rb = None
        h = _row(ctx, h0, d) if h0 is not None else zeros
        c = _row(ctx, c0, d) if c0 is not None else zeros
        pd = _row(ctx, peep, d) if peep is not None else None
        rt = ctx.emit(op.permute_dims(rd))
        outs = [None] * seq
        for step in range(seq):
            t = seq - 1 - step if reverse else step
            xt = _row(ctx, projected, t)
            if kind == "GRU":
                h_new = _gru_step(ctx, xt, h, rd, rb, hidden, acts[d], clip, attrs.get("linear_before_reset", 0))
                c_new = c
            else:
                hr = ctx.emit(op.matmul(h, rt))
                pre = ctx.emit(op.add(xt, hr if rb is None else op.add(hr, rb)))
                if kind == "RNN":
                    h_new, c_new = acts[d][0](_clip(ctx, pre, clip)), c
                else:
                    h_new, c_new = _lstm_step(ctx, pre, c, pd, hidden, acts[d], clip)
            if valid is not None:
                h_new = ctx.emit(op.where(valid[t], h_new, h))
                c_new = ctx.emit(op.where(valid[t], c_new, c))
                outs[t] = ctx.emit(op.where(valid[t], h_new, zeros))
            else:
                outs[t] = h_new
            h, c = h_new, c_new
        ys.append(ctx.emit(op.concat(*[ctx.emit(op.expand_dims(o, (0, 1))) for o in outs], axis=0)))
        hs.append(ctx.emit(op.expand_dims(h, (0,))))
        cs.append(ctx.emit(op.expand_dims(c, (0,))))
    y = ys[0] if directions == 1 else ctx.emit(op.concat(*ys, axis=1))  # (seq, dirs, batch, hidden)
    y_h = hs[0] if directions == 1 else ctx.emit(op.concat(*hs, axis=0))
    y_c = cs[0] if directions == 1 else ctx.emit(op.concat(*cs, axis=0))
    if layout:
        y = ctx.emit(op.permute_dims(y, (2, 0, 1, 3)))
        y_h = ctx.emit(op.permute_dims(y_h, (1, 0, 2)))
        y_c = ctx.emit(op.permute_dims(y_c, (1, 0, 2)))
    return [y, y_h, y_c] if kind == "LSTM" else [y, y_h]


def _clip(ctx, value, clip):
    return value if clip is None else ctx.emit(op.clip(value, -clip, clip))


def _gate(ctx, value, k, hidden):
    return ctx.emit(op.strided_slice(value, [1], [k * hidden], [(k + 1) * hidden]))


def _gru_step(ctx, xt, h, rd, rb, hidden, acts, clip, linear_before_reset):
    f, g = acts
    r_z, r_r, r_h = (ctx.emit(op.strided_slice(rd, [0], [k * hidden], [(k + 1) * hidden])) for k in range(3))
    b_z, b_r, b_h = (_gate(ctx, ctx.emit(op.expand_dims(rb, (0,))), k, hidden) for k in range(3)) if rb is not None \
        else (None, None, None)

    def plus(value, bias):
        return value if bias is None else ctx.emit(op.add(value, bias))

    z = f(_clip(ctx, ctx.emit(op.add(_gate(ctx, xt, 0, hidden), plus(ctx.emit(op.matmul(h, op.permute_dims(r_z))),
                                                                       b_z))), clip))
    r = f(_clip(ctx, ctx.emit(op.add(_gate(ctx, xt, 1, hidden), plus(ctx.emit(op.matmul(h, op.permute_dims(r_r))),
                                                                       b_r))), clip))
    if linear_before_reset:
        recur = ctx.emit(op.multiply(r, plus(ctx.emit(op.matmul(h, op.permute_dims(r_h))), b_h)))
    else:
        recur = plus(ctx.emit(op.matmul(op.multiply(r, h), op.permute_dims(r_h))), b_h)
    candidate = g(_clip(ctx, ctx.emit(op.add(_gate(ctx, xt, 2, hidden), recur)), clip))
    one = Constant(np.ones((), ctx.info(h).dtype.numpy()))
    return ctx.emit(op.add(op.multiply(op.subtract(one, z), candidate), op.multiply(z, h)))


def _lstm_step(ctx, pre, c, peep, hidden, acts, clip):
    f, g, h_act = acts
    i_pre, o_pre, f_pre, c_pre = (_gate(ctx, pre, k, hidden) for k in range(4))
    if peep is not None:
        p_i, p_o, p_f = (ctx.emit(op.strided_slice(peep, [0], [k * hidden], [(k + 1) * hidden])) for k in range(3))
        i_pre = ctx.emit(op.add(i_pre, op.multiply(p_i, c)))
        f_pre = ctx.emit(op.add(f_pre, op.multiply(p_f, c)))
    i = f(_clip(ctx, i_pre, clip))
    forget = f(_clip(ctx, f_pre, clip))
    candidate = g(_clip(ctx, c_pre, clip))
    c_new = ctx.emit(op.add(op.multiply(forget, c), op.multiply(i, candidate)))
    if peep is not None:
        o_pre = ctx.emit(op.add(o_pre, op.multiply(p_o, c_new)))
    o = f(_clip(ctx, o_pre, clip))
    return ctx.emit(op.multiply(o, h_act(c_new))), c_new
