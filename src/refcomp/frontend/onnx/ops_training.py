"""ONNX training-preview optimizers (Adagrad, Adam, Momentum) and the classic-ML ops Binarizer,
ArrayFeatureExtractor and TreeEnsemble, as element-wise graphs.

An optimizer node updates several tensors at once: its inputs are R, T, then one group per state
(X..., G..., and V.../H... as the op needs), its outputs one group per updated state.  R and T may
be run-time scalars; T > 0 decisions become `where`.
"""
from __future__ import annotations

import numpy as np

from ...ast.graph import Constant
from ...graph import op
from .importer import converter

TRAINING = "ai.onnx.preview.training"


def _groups(ctx, inputs, count):
    tensors = inputs[2:]
    if len(tensors) % count:
        ctx.fail(f"expected the tensors in {count} groups of equal length, got {len(tensors)} inputs")
    n = len(tensors) // count
    return [tensors[k * n:(k + 1) * n] for k in range(count)]


def _scalar_like(ctx, value, like):
    return Constant(np.asarray(value, ctx.info(like).dtype.numpy()))


def _as(ctx, value, like):
    """A run-time scalar input (R, T) in the dtype of the updated tensor."""
    target = ctx.info(like).dtype
    return value if ctx.info(value).dtype == target else ctx.emit(op.astype(value, target))


@converter("Adagrad", domain=TRAINING)
def _adagrad(ctx, node, inputs, attrs):
    xs, gs, hs = _groups(ctx, inputs, 3)
    decay, norm, eps = attrs.get("decay_factor", 0.0), attrs.get("norm_coefficient", 0.0), attrs.get("epsilon", 1e-6)
    new_x, new_h = [], []
    for x, g, h in zip(xs, gs, hs):
        c = lambda v: _scalar_like(ctx, v, x)  # noqa: E731
        r = ctx.emit(op.divide(_as(ctx, inputs[0], x),
                               op.add(c(1.0), op.multiply(_as(ctx, inputs[1], x), c(decay)))))
        g_reg = ctx.emit(op.add(op.multiply(c(norm), x), g))
        h_new = ctx.emit(op.add(h, op.multiply(g_reg, g_reg)))
        adaptive = ctx.emit(op.add(op.sqrt(h_new), c(eps)))
        new_x.append(ctx.emit(op.subtract(x, op.divide(op.multiply(r, g_reg), adaptive))))
        new_h.append(h_new)
    return new_x + new_h


@converter("Adam", domain=TRAINING)
def _adam(ctx, node, inputs, attrs):
    xs, gs, vs, hs = _groups(ctx, inputs, 4)
    alpha, beta = attrs.get("alpha", 0.9), attrs.get("beta", 0.999)
    norm, post, eps = attrs.get("norm_coefficient", 0.0), attrs.get("norm_coefficient_post", 0.0), \
        attrs.get("epsilon", 1e-6)
    new_x, new_v, new_h = [], [], []
    for x, g, v, h in zip(xs, gs, vs, hs):
        c = lambda value: _scalar_like(ctx, value, x)  # noqa: E731
        rate, t = _as(ctx, inputs[0], x), _as(ctx, inputs[1], x)
        g_reg = ctx.emit(op.add(op.multiply(c(norm), x), g))
        v_new = ctx.emit(op.add(op.multiply(c(alpha), v), op.multiply(c(1 - alpha), g_reg)))
        h_new = ctx.emit(op.add(op.multiply(c(beta), h), op.multiply(c(1 - beta), op.multiply(g_reg, g_reg))))
        h_sqrt = ctx.emit(op.add(op.sqrt(h_new), c(eps)))
        adjusted = ctx.emit(op.divide(op.multiply(rate, op.sqrt(op.subtract(c(1.0), op.power(c(beta), t)))),
                                      op.subtract(c(1.0), op.power(c(alpha), t))))
        rate = ctx.emit(op.where(op.greater(t, c(0.0)), adjusted, rate))
        x_new = ctx.emit(op.subtract(x, op.divide(op.multiply(rate, v_new), h_sqrt)))
        new_x.append(ctx.emit(op.multiply(c(1 - post), x_new)))
        new_v.append(v_new)
        new_h.append(h_new)
    return new_x + new_v + new_h


@converter("Momentum", domain=TRAINING)
def _momentum(ctx, node, inputs, attrs):
    xs, gs, vs = _groups(ctx, inputs, 3)
    alpha, beta, norm = attrs["alpha"], attrs["beta"], attrs["norm_coefficient"]
    mode = attrs.get("mode", b"standard")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    if mode not in ("standard", "nesterov"):
        ctx.fail(f"unknown momentum mode {mode!r}")
    new_x, new_v = [], []
    for x, g, v in zip(xs, gs, vs):
        c = lambda value: _scalar_like(ctx, value, x)  # noqa: E731
        rate, t = _as(ctx, inputs[0], x), _as(ctx, inputs[1], x)
        g_reg = ctx.emit(op.add(op.multiply(c(norm), x), g))
        beta_adj = ctx.emit(op.where(op.greater(t, c(0.0)), c(beta), c(1.0)))
        v_new = ctx.emit(op.add(op.multiply(c(alpha), v), op.multiply(beta_adj, g_reg)))
        step = v_new if mode == "standard" else ctx.emit(op.add(g_reg, op.multiply(c(alpha), v_new)))
        new_x.append(ctx.emit(op.subtract(x, op.multiply(rate, step))))
        new_v.append(v_new)
    return new_x + new_v


@converter("Binarizer", domain="ai.onnx.ml")
def _binarizer(ctx, node, inputs, attrs):
    x = inputs[0]
    c = lambda value: _scalar_like(ctx, value, x)  # noqa: E731
    return ctx.emit(op.where(op.greater(x, c(attrs.get("threshold", 0.0))), c(1), c(0)))


@converter("ArrayFeatureExtractor", domain="ai.onnx.ml")
def _array_feature_extractor(ctx, node, inputs, attrs):
    x, indices = inputs
    if ctx.info(x).ndim == 1:  # a 1-d input is one row
        x = ctx.emit(op.expand_dims(x, (0,)))
    indices = ctx.emit(op.reshape(indices, (-1,))) if ctx.info(indices).ndim != 1 else indices
    return ctx.emit(op.take(x, indices, axis=ctx.info(x).ndim - 1))


def _leaf_paths(attrs):
    """[(leaf index, [(node, went_true)...])] for every leaf reachable from the tree roots."""
    true_ids, false_ids = attrs["nodes_truenodeids"], attrs["nodes_falsenodeids"]
    true_leaf, false_leaf = attrs["nodes_trueleafs"], attrs["nodes_falseleafs"]
    paths = []
    for root in attrs["tree_roots"]:
        stack = [(root, [])]
        while stack:
            nid, path = stack.pop()
            for went, child, is_leaf in ((True, true_ids[nid], true_leaf[nid]),
                                         (False, false_ids[nid], false_leaf[nid])):
                step = path + [(nid, went)]
                if is_leaf:
                    paths.append((child, step))
                else:
                    stack.append((child, step))
    return paths


@converter("TreeEnsemble", domain="ai.onnx.ml")
def _tree_ensemble(ctx, node, inputs, attrs):
    """Every node's condition at once, then each leaf's path as a product of its conditions: a
    sample reaches exactly one leaf per tree, whose weight it adds to the leaf's target."""
    from onnx import numpy_helper

    x = inputs[0]
    dtype = ctx.info(x).dtype.numpy()
    tensor = lambda key: numpy_helper.to_array(attrs[key]) if key in attrs else None  # noqa: E731
    modes, splits = tensor("nodes_modes").astype(np.int64), tensor("nodes_splits").astype(dtype)
    features = np.asarray(attrs["nodes_featureids"], np.int64)
    if attrs.get("aggregate_function", 1) not in (0, 1) or attrs.get("post_transform", 0) != 0:
        ctx.fail("only SUM/AVERAGE aggregation without a post transform is supported")
    if "nodes_missing_value_tracks_true" in attrs and any(attrs["nodes_missing_value_tracks_true"]):
        ctx.fail("nodes_missing_value_tracks_true is not supported")
    c = lambda v: Constant(np.asarray(v, dtype))  # noqa: E731
    f = ctx.emit(op.take(x, Constant(features), axis=1))  # (N, nodes)
    s = Constant(splits)
    tests = [op.less_equal(f, s), op.less(f, s), op.greater_equal(f, s), op.greater(f, s), op.equal(f, s),
             op.not_equal(f, s)]
    cond = None
    for mode in sorted(set(modes.tolist())):
        if mode == 6:
            values = tensor("membership_values").astype(dtype)
            sets, current = [], []
            for v in values:  # NaN ends one member node's set, in node order
                if np.isnan(v):
                    sets.append(current)
                    current = []
                else:
                    current.append(v)
            width = max((len(m) for m in sets), default=1) or 1
            table = np.full((len(modes), width), np.nan, dtype)
            for k, nid in enumerate(np.nonzero(modes == 6)[0]):
                table[nid, :len(sets[k])] = sets[k]
            hit = ctx.emit(op.max(op.astype(op.equal(op.expand_dims(f, (2,)), Constant(table[None])), str(dtype)),
                                  axis=(2,)))
            this = ctx.emit(op.greater(hit, c(0)))
        elif 0 <= mode < 6:
            this = ctx.emit(tests[mode])
        else:
            ctx.fail(f"unknown node mode {mode}")
        cond = this if cond is None else ctx.emit(op.where(Constant(modes == mode), this, cond))
    # one extra always-true column pads shorter paths
    ones = ctx.emit(op.full_like(op.strided_slice(f, [1], [0], [1]), 1.0))
    truth = ctx.emit(op.concat(op.astype(cond, str(dtype)), ones, axis=1))
    paths = _leaf_paths(attrs)
    depth = max(len(p) for _, p in paths)
    pad = len(modes)
    index = np.full((len(paths), depth), pad, np.int64)
    went = np.ones((len(paths), depth), bool)
    for k, (_, path) in enumerate(paths):
        for j, (nid, direction) in enumerate(path):
            index[k, j], went[k, j] = nid, direction
    taken = ctx.emit(op.take(truth, Constant(index), axis=1))  # (N, leaves, depth)
    terms = ctx.emit(op.where(Constant(went), taken, op.subtract(c(1), taken)))
    reached = ctx.emit(op.prod(terms, axis=(2,)))
    weights = tensor("leaf_weights").astype(dtype)
    targets = attrs["leaf_targetids"]
    table = np.zeros((len(paths), attrs["n_targets"]), dtype)
    for k, (leaf, _) in enumerate(paths):
        table[k, targets[leaf]] += weights[leaf]
    y = ctx.emit(op.matmul(reached, Constant(table)))
    if attrs.get("aggregate_function", 1) == 0:
        y = ctx.emit(op.divide(y, c(len(attrs["tree_roots"]))))
    return y
