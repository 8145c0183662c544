"""Each ATen op the torch.export importer claims, exported from a one-op module and checked against torch eager.

A case names the ATen overload it exercises; the test asserts that overload is in the exported
graph, so the table is the list of ops that are both supported and tested.  Inputs are fresh
random data (`rng`), positive where the op needs it.
"""
import operator

import numpy as np
import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

import refcomp  # noqa: E402
from refcomp.frontend import from_exported_program  # noqa: E402
from refcomp.frontend.torch_export import TorchImportError, supported_ops  # noqa: E402


def f(*shape):
    return ("f", shape)


def pos(*shape):
    return ("p", shape)


def unit(*shape):
    return ("u", shape)


def i64(*shape, lo=0, hi=5):
    return ("i", shape, lo, hi)


def b(*shape):
    return ("b", shape)


X = f(3, 4)
A = (f(2, 3, 4),)


def case(op, fn, *inputs, tol=None):
    return pytest.param(op, fn, inputs or (X,), tol, id=op)


IMG = f(2, 4, 6, 6)
UNARY = ["abs", "acos", "acosh", "asin", "asinh", "atan", "atanh", "ceil", "cos", "cosh", "erf", "exp", "exp2",
         "expm1", "floor", "log", "log10", "log1p", "log2", "neg", "reciprocal", "relu", "rsqrt", "sigmoid", "sign",
         "sgn", "sin", "sinh", "sqrt", "tan", "tanh", "trunc", "round", "square", "frac", "erfc"]
DOMAIN = {"acos": unit, "asin": unit, "atanh": unit, "acosh": lambda *s: ("p1", s), "log": pos, "log10": pos,
          "log1p": pos, "log2": pos, "rsqrt": pos, "sqrt": pos, "reciprocal": pos}

CASES = [case(f"aten.{name}.default", (lambda n: lambda x: getattr(torch, n)(x))(name), DOMAIN.get(name, f)(3, 4))
         for name in UNARY]
CASES += [
    case("aten.silu.default", F.silu), case("aten.mish.default", F.mish), case("aten.hardswish.default", F.hardswish),
    case("aten.hardsigmoid.default", F.hardsigmoid), case("aten.gelu.default", F.gelu),
    case("aten.leaky_relu.default", lambda x: F.leaky_relu(x, 0.2)), case("aten.elu.default", F.elu),
    case("aten.celu.default", lambda x: F.celu(x, 0.7)), case("aten.selu.default", F.selu),
    case("aten.softplus.default", lambda x: F.softplus(x, beta=2.0, threshold=3.0)),
    case("aten.hardtanh.default", lambda x: F.hardtanh(x, -0.5, 0.5)), case("aten.relu6.default", F.relu6),
    case("aten.logit.default", lambda x: torch.logit(x, 1e-3), pos(3, 4)),
    case("aten.isnan.default", lambda x: torch.isnan(torch.log(x))), case("aten.isinf.default", lambda x: torch.isinf(1 / x)),
    case("aten.isfinite.default", lambda x: torch.isfinite(torch.log(x))),
    case("aten.logical_not.default", lambda x: torch.logical_not(x > 0)),
    case("aten.bitwise_not.default", torch.bitwise_not, i64(3, 4, lo=-9, hi=9)),
    case("aten.add.Tensor", lambda x, y: x + 2 * y, X, f(4)), case("aten.sub.Tensor", torch.sub, X, f(3, 1)),
    case("aten.mul.Tensor", torch.mul, X, X), case("aten.div.Tensor", torch.div, X, pos(4)),
    case("aten.rsub.Scalar", lambda x: torch.rsub(x, 2.0)),
    case("aten.div.Tensor_mode", lambda x, y: torch.div(x, y, rounding_mode="floor"), i64(3, 4, lo=-9, hi=9),
         i64(4, lo=1, hi=4)),
    case("aten.floor_divide.default", torch.floor_divide, X, pos(4)),
    case("aten.remainder.Tensor", torch.remainder, X, pos(4)),
    case("aten.remainder.Scalar", lambda x: torch.remainder(x, 3), i64(3, 4, lo=-9, hi=9)),
    case("aten.fmod.Tensor", torch.fmod, X, pos(4)), case("aten.fmod.Scalar", lambda x: torch.fmod(x, 0.7)),
    case("aten.pow.Tensor_Scalar", lambda x: x ** 3), case("aten.pow.Tensor_Tensor", torch.pow, pos(3, 4), X),
    case("aten.pow.Scalar", lambda x: torch.pow(2.0, x)),
    case("aten.maximum.default", torch.maximum, X, f(4)), case("aten.minimum.default", torch.minimum, X, X),
    case("aten.atan2.default", torch.atan2, X, X),
    case("aten.eq.Tensor", torch.eq, i64(3, 4), i64(4)), case("aten.ne.Tensor", torch.ne, i64(3, 4), i64(3, 4)),
    case("aten.lt.Tensor", torch.lt, X, X), case("aten.le.Tensor", torch.le, X, f(4)),
    case("aten.gt.Tensor", torch.gt, X, X), case("aten.ge.Tensor", torch.ge, X, X),
    case("aten.eq.Scalar", lambda x: x == 2, i64(3, 4)), case("aten.ne.Scalar", lambda x: x != 2, i64(3, 4)),
    case("aten.lt.Scalar", lambda x: x < 0.1), case("aten.le.Scalar", lambda x: x <= 0.1),
    case("aten.gt.Scalar", lambda x: x > 0.1), case("aten.ge.Scalar", lambda x: x >= 2, i64(3, 4)),
    case("aten.logical_and.default", torch.logical_and, b(3, 4), b(3, 4)),
    case("aten.logical_or.default", torch.logical_or, b(3, 4), b(4)),
    case("aten.logical_xor.default", torch.logical_xor, b(3, 4), b(3, 4)),
    case("aten.bitwise_and.Tensor", torch.bitwise_and, i64(3, 4, hi=64), i64(3, 4, hi=64)),
    case("aten.bitwise_or.Tensor", torch.bitwise_or, b(3, 4), b(3, 4)),
    case("aten.bitwise_xor.Tensor", torch.bitwise_xor, i64(3, 4, hi=64), i64(4, hi=64)),
    case("aten.__and__.Tensor", operator.and_, b(3, 4), b(3, 4)),
    case("aten.__or__.Tensor", operator.or_, b(3, 4), b(3, 4)),
    case("aten.where.self", lambda c, x, y: torch.where(c, x, y), b(3, 4), X, f(4)),
    case("aten.where.ScalarOther", lambda x: torch.where(x > 0, x, 0.5)),
    case("aten.masked_fill.Scalar", lambda x, m: x.masked_fill(m, -1.5), X, b(3, 4)),
    case("aten.clamp.default", lambda x: torch.clamp(x, -0.5, 0.7)),
    case("aten.clamp.Tensor", lambda x, lo: torch.clamp(x, min=lo), X, f(4)),
    case("aten.clamp_min.default", lambda x: torch.clamp_min(x, 0.1)),
    case("aten.clamp_max.default", lambda x: torch.clamp_max(x, 0.1)),
    case("aten.lerp.Scalar", lambda x, y: torch.lerp(x, y, 0.3), X, X),
    case("aten.addcmul.default", lambda x, y, z: torch.addcmul(x, y, z, value=0.5), X, X, X),
    case("aten.addcdiv.default", lambda x, y, z: torch.addcdiv(x, y, z, value=0.5), X, X, pos(3, 4)),
    case("aten.hypot.default", torch.hypot, X, X),
    case("aten.xlogy.Tensor", torch.xlogy, X, pos(3, 4)),
    # type conversion and identities
    case("aten._to_copy.default", lambda x: torch.ops.aten._to_copy(x, dtype=torch.int32)),
    case("aten.to.dtype", lambda x: x.to(torch.float64)), case("aten.type_as.default", lambda x, y: x.type_as(y),
                                                                 i64(3, 4), X),
    case("aten.clone.default", lambda x: torch.clone(x) + 1), case("aten.contiguous.default",
                                                                   lambda x: x.t().contiguous()),
    case("aten.alias.default", lambda x: torch.ops.aten.alias(x) * 2), case("aten.detach.default",
                                                                             lambda x: x.detach() * 2),
    case("aten.dropout.default", lambda x: F.dropout(x, 0.5, training=False) * 2),
    # shapes
    case("aten.view.default", lambda x: x.view(4, 3)), case("aten.reshape.default", lambda x: x.reshape(2, -1),
                                                            f(2, 3, 4)),
    case("aten.flatten.using_ints", lambda x: torch.flatten(x, 1), *A),
    case("aten.unflatten.int", lambda x: x.unflatten(1, (2, 2)), X),
    case("aten.permute.default", lambda x: x.permute(2, 0, 1), *A),
    case("aten.transpose.int", lambda x: x.transpose(0, 2), *A), case("aten.t.default", lambda x: x.t()),
    case("aten.movedim.int", lambda x: torch.movedim(x, 0, 2), *A),
    case("aten.unsqueeze.default", lambda x: x.unsqueeze(1)),
    case("aten.squeeze.dim", lambda x: x.squeeze(1), f(3, 1, 4)), case("aten.squeeze.dims",
                                                                       lambda x: x.squeeze((0, 2)), f(1, 3, 1)),
    case("aten.squeeze.default", lambda x: x.squeeze(), f(1, 3, 1)),
    case("aten.expand.default", lambda x: x.expand(2, 3, 4), f(3, 1)),
    case("aten.expand_as.default", lambda x, y: x.expand_as(y), f(1, 4), X),
    case("aten.broadcast_to.default", lambda x: torch.broadcast_to(x, (2, 3, 4)), f(4)),
    case("aten.slice.Tensor", lambda x: x[:, 1:3]), case("aten.narrow.default", lambda x: x.narrow(1, 1, 2)),
    case("aten.select.int", lambda x: x[:, -1]), case("aten.cat.default", lambda x, y: torch.cat([x, y], 1), X, X),
    case("aten.stack.default", lambda x, y: torch.stack([x, y], 1), X, X),
    case("aten.split.Tensor", lambda x: torch.split(x, 3, 1)[1], f(2, 8)),
    case("aten.split_with_sizes.default", lambda x: torch.split(x, [1, 3], 1)[1]),
    case("aten.chunk.default", lambda x: torch.chunk(x, 2, 1)[0]),
    case("aten.unbind.int", lambda x: torch.unbind(x, 0)[2]),
    case("aten.flip.default", lambda x: torch.flip(x, (0, 1))), case("aten.roll.default",
                                                                     lambda x: torch.roll(x, 2, 1)),
    case("aten.repeat.default", lambda x: x.repeat(2, 1, 3)), case("aten.tile.default",
                                                                   lambda x: torch.tile(x, (2,))),
    case("aten.repeat_interleave.self_int", lambda x: torch.repeat_interleave(x, 2, 0)),
    case("aten.constant_pad_nd.default", lambda x: torch.constant_pad_nd(x, (1, 2, 0, 1), 0.5)),
    case("aten.pad.default", lambda x: F.pad(x, (1, 2), mode="reflect"), f(2, 3, 5)),
    case("aten.swapaxes.default", lambda x: torch.swapaxes(x, 0, 1)),
    # creation
    case("aten.arange.default", lambda x: x + torch.arange(4)), case("aten.arange.start",
                                                                     lambda x: x + torch.arange(2, 6)),
    case("aten.arange.start_step", lambda x: x + torch.arange(0.5, 2.5, 0.5)),
    case("aten.full.default", lambda x: x + torch.full((3, 4), 1.5)), case("aten.zeros.default",
                                                                           lambda x: x + torch.zeros(4)),
    case("aten.ones.default", lambda x: x + torch.ones(4)), case("aten.zeros_like.default",
                                                                 lambda x: torch.zeros_like(x) + 1),
    case("aten.ones_like.default", lambda x: torch.ones_like(x) + x), case("aten.full_like.default",
                                                                           lambda x: torch.full_like(x, 2) + x),
    case("aten.new_ones.default", lambda x: x.new_ones((3, 4)) + x), case("aten.new_zeros.default",
                                                                          lambda x: x.new_zeros((4,)) + x),
    case("aten.new_full.default", lambda x: x.new_full((4,), 3.0) + x),
    case("aten.scalar_tensor.default", lambda x: x + torch.scalar_tensor(2.5)),
    case("aten.tril.default", lambda x: torch.tril(x, 1)), case("aten.triu.default", lambda x: torch.triu(x, -1)),
    case("aten.eye.default", lambda x: x + torch.eye(4), f(4, 4)),
    # indexing
    case("aten.index.Tensor", lambda x, i, j: x[i, j], f(4, 5, 3), i64(2, 1, hi=4), i64(3, lo=-5, hi=5)),
    case("aten.index_select.default", lambda x, i: torch.index_select(x, 1, i), X, i64(5, hi=4)),
    case("aten.gather.default", lambda x, i: torch.gather(x, 1, i), X, i64(3, 2, hi=4)),
    case("aten.embedding.default", F.embedding, i64(2, 3, hi=6), f(6, 4)),
    case("aten.scatter.src", lambda x, i, s: x.scatter(1, i, s), X, ("perm", (3, 4)), X),
    case("aten.scatter_add.default", lambda x, i, s: x.scatter_add(1, i, s), X, i64(3, 6, hi=4), f(3, 6)),
    case("aten.diff.default", lambda x: torch.diff(x, dim=1)),
    case("aten.one_hot.default", lambda i: F.one_hot(i, 5), i64(3, 2, hi=5)),
    # reductions
    case("aten.sum.dim_IntList", lambda x: x.sum((0, 2)), *A), case("aten.sum.default", lambda x: x.sum()),
    case("aten.mean.dim", lambda x: x.mean(-1, keepdim=True)), case("aten.mean.default", lambda x: x.mean()),
    case("aten.amax.default", lambda x: torch.amax(x, 1)), case("aten.amin.default", lambda x: torch.amin(x, 0)),
    case("aten.max.default", lambda x: torch.max(x)), case("aten.min.default", lambda x: torch.min(x)),
    case("aten.max.dim", lambda x: torch.max(x, 1)[0] + torch.max(x, 1)[1]),
    case("aten.min.dim", lambda x: torch.min(x, 0, keepdim=True)[1]),
    case("aten.prod.dim_int", lambda x: torch.prod(x, 1)), case("aten.prod.default", lambda x: torch.prod(x),
                                                                unit(2, 3)),
    case("aten.var.dim", lambda x: torch.var(x, 1)),
    case("aten.var.correction", lambda x: torch.ops.aten.var.correction(x, [0], correction=2, keepdim=True)),
    case("aten.std.correction",
                                                                 lambda x: torch.std(x, 0, correction=0)),
    case("aten.argmax.default", lambda x: torch.argmax(x, 1)), case("aten.argmin.default", lambda x: torch.argmin(x)),
    case("aten.any.dim", lambda x: torch.any(x > 1, 1)), case("aten.any.default", lambda x: torch.any(x > 1)),
    case("aten.all.dim", lambda x: torch.all(x > -1, 0)), case("aten.all.default", lambda x: torch.all(x > -2)),
    case("aten.cumsum.default", lambda x: torch.cumsum(x, 1)), case("aten.cumprod.default",
                                                                    lambda x: torch.cumprod(x, 0)),
    case("aten.logsumexp.default", lambda x: torch.logsumexp(x, 1)),
    case("aten.softmax.int", lambda x: torch.softmax(x, 0)), case("aten.log_softmax.int",
                                                                  lambda x: torch.log_softmax(x, -1)),
    case("aten.topk.default", lambda x: torch.topk(x, 2, 1)[0]),
    case("aten.linalg_vector_norm.default", lambda x: torch.linalg.vector_norm(x, dim=1)),
    # matrix products
    case("aten.linear.default", lambda x, w, c: F.linear(x, w, c), *A, f(5, 4), f(5)),
    case("aten.mm.default", torch.mm, X, f(4, 5)), case("aten.bmm.default", torch.bmm, *A, f(2, 4, 5)),
    case("aten.matmul.default", torch.matmul, f(2, 1, 3, 4), f(3, 4, 2)),
    case("aten.addmm.default", lambda c, a, w: torch.addmm(c, a, w, beta=0.5, alpha=2.0), f(5), X, f(4, 5)),
    case("aten.baddbmm.default", torch.baddbmm, f(2, 3, 5), *A, f(2, 4, 5)),
    case("aten.dot.default", torch.dot, f(4), f(4)), case("aten.mv.default", torch.mv, X, f(4)),
    case("aten.outer.default", torch.outer, f(3), f(4)),
    case("aten.einsum.default", lambda a, w: torch.einsum("bij,bjk->bik", a, w), *A, f(2, 4, 5)),
    # convolution, pooling, normalization
    case("aten.conv2d.default", lambda x, w, c: F.conv2d(x, w, c, stride=2, padding=1), IMG, f(5, 4, 3, 3), f(5)),
    case("aten.conv1d.default", lambda x, w: F.conv1d(x, w, padding=1, groups=2), f(2, 4, 7), f(6, 2, 3)),
    case("aten.conv_transpose2d.input", lambda x, w: F.conv_transpose2d(x, w, stride=2, padding=1), IMG,
         f(4, 3, 3, 3)),
    case("aten.max_pool2d.default", lambda x: F.max_pool2d(x, 3, 2, 1), IMG),
    case("aten.avg_pool2d.default", lambda x: F.avg_pool2d(x, 2), IMG),
    case("aten.adaptive_avg_pool2d.default", lambda x: F.adaptive_avg_pool2d(x, 1), IMG),
    case("aten.batch_norm.default", lambda x, m, v, w, c: F.batch_norm(x, m, v, w, c, False, 0.1, 1e-5), IMG,
         f(4), pos(4), f(4), f(4)),
    case("aten.layer_norm.default", lambda x, w, c: F.layer_norm(x, (4,), w, c), *A, f(4), f(4)),
    case("aten.group_norm.default", lambda x, w, c: F.group_norm(x, 2, w, c), IMG, f(4), f(4)),
    case("aten.rms_norm.default", lambda x, w: F.rms_norm(x, (4,), w, 1e-6), *A, f(4)),
    case("aten.scaled_dot_product_attention.default",
         lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m), f(2, 2, 3, 4), f(2, 2, 5, 4), f(2, 2, 5, 4),
         b(3, 5)),
    case("aten.pixel_shuffle.default", lambda x: F.pixel_shuffle(x, 2), IMG),
    case("aten.upsample_nearest2d.vec", lambda x: F.interpolate(x, scale_factor=2, mode="nearest"), IMG),
]
aten = torch.ops.aten
# Overloads models and decompositions emit, called directly
CASES += [
    case("aten._softmax.default", lambda x: aten._softmax(x, 1, False)),
    case("aten._log_softmax.default", lambda x: aten._log_softmax(x, 0, False)),
    case("aten.native_layer_norm.default", lambda x, w, c: aten.native_layer_norm(x, [4], w, c, 1e-5)[0], *A, f(4),
         f(4)),
    case("aten._native_batch_norm_legit_no_training.default",
         lambda x, w, c, m, v: aten._native_batch_norm_legit_no_training(x, w, c, m, v, 0.1, 1e-5)[0], IMG, f(4), f(4),
         f(4), pos(4)),
    case("aten.native_group_norm.default", lambda x, w, c: aten.native_group_norm(x, w, c, 2, 4, 36, 2, 1e-5)[0],
         IMG, f(4), f(4)),
    case("aten.convolution.default",
         lambda x, w: aten.convolution(x, w, None, [1, 2], [1, 0], [1, 1], False, [0, 0], 1), IMG, f(3, 4, 3, 3)),
    case("aten.conv2d.padding", lambda x, w: F.conv2d(x, w, padding="same"), IMG, f(3, 4, 3, 3)),
    case("aten.upsample_bilinear2d.vec", lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"), IMG),
    case("aten.adaptive_max_pool2d.default", lambda x: F.adaptive_max_pool2d(x, 3), IMG),
    case("aten.max_pool2d_with_indices.default", lambda x: aten.max_pool2d_with_indices(x, [2, 2], [2, 2])[0], IMG),
    case("aten.instance_norm.default", lambda x, w, c: F.instance_norm(x, weight=w, bias=c), IMG, f(4), f(4)),
    case("aten.scatter.value", lambda x, i: x.scatter(1, i, 2.5), X, ("perm", (3, 4))),
    case("aten.scatter_reduce.two", lambda x, i, s: x.scatter_reduce(1, i, s, "amax"), X, i64(3, 5, hi=4), f(3, 5)),
    case("aten.take_along_dim.default", lambda x, i: torch.take_along_dim(x, i, 1), X, i64(3, 2, hi=4)),
    case("aten.var_mean.dim", lambda x: sum(torch.var_mean(x, 1))),
    case("aten.var_mean.correction", lambda x: sum(aten.var_mean.correction(x, [0], correction=0, keepdim=True))),
    case("aten.std.dim", lambda x: aten.std.dim(x, [1], True, True)),
    case("aten.addbmm.default", torch.addbmm, f(3, 5), *A, f(2, 4, 5)),
    case("aten.addmv.default", torch.addmv, f(3), X, f(4)),
    case("aten.masked_fill.Tensor", lambda x, m, v: x.masked_fill(m, v), X, b(3, 4), f()),
    case("aten.where.ScalarSelf", lambda x: aten.where.ScalarSelf(x > 0, 0.5, x)),
    case("aten.rsub.Tensor", lambda x, y: torch.rsub(x, y, alpha=2), X, X),
    case("aten.div.Scalar_mode", lambda x: aten.div.Scalar_mode(x, 3, rounding_mode="trunc"),
         i64(3, 4, lo=-9, hi=9)),
    case("aten.reflection_pad2d.default", lambda x: aten.reflection_pad2d(x, [1, 2, 2, 1]), IMG),
    case("aten.replication_pad2d.default", lambda x: aten.replication_pad2d(x, [1, 2, 2, 1]), IMG),
    case("aten.eye.m", lambda x: x + torch.eye(3, 4)),
    case("aten.lerp.Tensor", torch.lerp, X, X, unit(3, 4)),
    case("aten.clamp_min.Tensor", lambda x, y: aten.clamp_min.Tensor(x, y), X, f(4)),
    case("aten.clamp_max.Tensor", lambda x, y: aten.clamp_max.Tensor(x, y), X, f(4)),
    case("aten.add.Scalar", lambda x: aten.add.Scalar(x, 2, alpha=3), i64(3, 4)),
    case("aten.mul.Scalar", lambda x: aten.mul.Scalar(x, 1.5)),
    case("aten.sub.Scalar", lambda x: aten.sub.Scalar(x, 1.5)),
    case("aten.div.Scalar", lambda x: aten.div.Scalar(x, 3), i64(3, 4)),
    case("aten.true_divide.Tensor", torch.true_divide, i64(3, 4), i64(4, lo=1)),
    case("aten.__xor__.Tensor", operator.xor, b(3, 4), b(3, 4)),
    case("aten.bitwise_and.Scalar", lambda x: torch.bitwise_and(x, 6), i64(3, 4, hi=64)),
    case("aten.any.dims", lambda x: aten.any.dims(x > 1, [0, 1])),
    case("aten.all.dims", lambda x: aten.all.dims(x > -1, [1], True)),
    case("aten.norm.ScalarOpt_dim", lambda x: aten.norm.ScalarOpt_dim(x, 1, [1])),
    case("aten.vdot.default", torch.vdot, f(4), f(4)),
    case("aten.numpy_T.default", lambda x: x.T * 2, *A),
    case("aten.view_as.default", lambda x, y: x.view_as(y), X, f(2, 6)),
]


def _data(spec, rng):
    kind, shape = spec[0], spec[1]
    if kind == "f":
        return torch.from_numpy(np.asarray(rng.standard_normal(shape), "float32"))
    if kind == "p":
        return torch.from_numpy(rng.uniform(0.2, 2.0, shape).astype("float32"))
    if kind == "p1":
        return torch.from_numpy(rng.uniform(1.1, 3.0, shape).astype("float32"))
    if kind == "u":
        return torch.from_numpy(rng.uniform(-0.9, 0.9, shape).astype("float32"))
    if kind == "i":
        return torch.from_numpy(rng.integers(spec[2], spec[3], shape).astype("int64"))
    if kind == "b":
        return torch.from_numpy(rng.random(shape) < 0.6)
    if kind == "perm":  # distinct indices per row, so scatter has no write conflicts
        return torch.from_numpy(np.stack([rng.permutation(shape[1]) for _ in range(shape[0])]).astype("int64"))
    raise ValueError(kind)


class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs):
        return self.fn(*xs)


# ops that sum many products: their float32 results differ from torch's by the summation order
ACCUMULATING = ("conv", "linear", "mm", "matmul", "bmm", "dot", "mv", "einsum", "attention", "norm", "var", "std",
                "sum", "mean", "cum", "prod", "softmax", "logsumexp", "upsample", "pool")


def _tolerance(aten, expected: np.ndarray, tol):
    """(rtol, atol) by dtype and op, atol scaled by the result's magnitude."""
    if tol is not None:
        return tol
    if expected.dtype != np.float32:
        return 1e-12, 0.0
    scale = max(1.0, float(np.nanmax(np.abs(np.where(np.isfinite(expected), expected, 0)), initial=0.0)))
    if any(word in aten for word in ACCUMULATING):
        return 1e-4, 1e-4 * scale
    return 1e-5, 1e-5 * scale


@pytest.mark.parametrize("aten, fn, inputs, tol", CASES)
def test_aten_op_matches_torch_eager(aten, fn, inputs, tol, rng):
    xs = [_data(s, rng) for s in inputs]
    with torch.no_grad():
        ep = torch.export.export(_Fn(fn), tuple(xs))
        expected = fn(*xs).numpy()
    ops = {str(n.target) for n in ep.graph.nodes if n.op == "call_function"}
    assert aten in ops, f"{aten} is not in the exported graph: {sorted(ops)}"
    mod = from_exported_program(ep)
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))
    got = np.asarray(vm["main"](*[x.numpy() for x in xs]))
    assert got.shape == expected.shape and got.dtype == expected.dtype
    rtol, atol = _tolerance(aten, expected, tol)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol, equal_nan=True)


def test_the_table_covers_at_least_150_aten_ops():
    tested = {p.values[0] for p in CASES}
    assert len(tested) >= 150
    assert tested <= set(supported_ops())


class _Softmax(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x.reshape(x.shape[0], -1), -1)


def test_attention_with_a_fully_masked_row_gives_zeros_there(rng):
    """A boolean mask that masks out every key of a query row: torch gives that row zeros (its
    safe softmax), and so does the converted graph, for the mask and for a causal row too."""
    q, k, v = (torch.from_numpy(rng.standard_normal(s).astype(np.float32)) for s in ((1, 2, 3, 4), (1, 2, 5, 4), (1, 2, 5, 4)))
    mask = torch.from_numpy(rng.random((3, 5)) < 0.6)
    mask[1] = False
    fn = lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, m)  # noqa: E731
    expected = fn(q, k, v, mask).numpy()
    assert np.all(expected[:, :, 1] == 0)
    with torch.no_grad():
        ep = torch.export.export(_Fn(fn), (q, k, v, mask))
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(from_exported_program(ep), target="c"))
    got = np.asarray(vm["main"](q.numpy(), k.numpy(), v.numpy(), mask.numpy()))
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-5)


def test_symbolic_dims_become_size_vars_with_their_ranges(rng):
    batch, seq = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=2, max=16)
    x = _data(f(2, 3, 4), rng)
    ep = torch.export.export(_Softmax(), (x,), dynamic_shapes=({0: batch, 1: seq},))
    mod = from_exported_program(ep)
    func = mod["main"]
    b, s, _ = func.params[0].struct_info.shape
    assert (b.name, s.name) == ("batch", "seq")  # the size vars carry the torch Dims' names
    assert func.attrs["tir_var_upper_bound"] == {"batch": 8, "seq": 16}
    assert func.attrs["tir_var_lower_bound"] == {"batch": 1, "seq": 2}
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))
    for shape in [(1, 2, 4), (3, 5, 4), (8, 16, 4)]:
        y = _data(f(*shape), rng)
        np.testing.assert_allclose(vm["main"](y.numpy()), torch.softmax(y.reshape(shape[0], -1), -1).numpy(),
                                   rtol=1e-5, atol=1e-6)


def test_unsupported_op_names_node_and_op(rng):
    ep = torch.export.export(_Fn(lambda x: torch.special.i0(x)), (_data(X, rng),))
    with pytest.raises(TorchImportError, match=r"node i0 \(aten.special_i0.default|node .*i0.*not supported"):
        from_exported_program(ep)


def test_data_dependent_shapes_are_a_clear_error(rng):
    ep = torch.export.export(_Fn(lambda x: torch.nonzero(x > 0)), (_data(X, rng),))
    with pytest.raises(TorchImportError, match=r"nonzero.*data-dependent"):
        from_exported_program(ep)


def test_not_an_exported_program_is_a_clear_error():
    with pytest.raises(TorchImportError, match="expected a torch.export.ExportedProgram"):
        from_exported_program(torch.nn.Linear(2, 2))


class _SymbolicIndexing(torch.nn.Module):
    """Indexing whose bounds are size expressions: a negative select, a slice to the end, arange(seq)."""

    def forward(self, x):
        seq = x.shape[1]
        positions = torch.arange(seq).to(x.dtype)
        last = x[:, -1]
        tail = x[:, 1:] * 2
        shifted = x + positions[None, :, None]
        return last, tail, shifted


def test_symbolic_slices_selects_and_ranges_match_torch(rng):
    batch, seq = torch.export.Dim("batch", min=1, max=8), torch.export.Dim("seq", min=3, max=16)
    model = _SymbolicIndexing()
    ep = torch.export.export(model, (_data(f(2, 4, 3), rng),), dynamic_shapes=({0: batch, 1: seq},))
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(from_exported_program(ep), target="c"))
    for shape in [(1, 3, 3), (3, 7, 3), (2, 16, 3)]:
        x = _data(f(*shape), rng)
        got = vm["main"](x.numpy())
        for g, e in zip(got, model(x)):
            np.testing.assert_allclose(np.asarray(g), e.numpy(), rtol=1e-6, atol=1e-6)


class _InPlace(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        y.add_(1.5)
        y.relu_()
        return y + x


def test_in_place_ops_on_intermediates_convert_functionally(rng):
    x = _data(X, rng)
    ep = torch.export.export(_InPlace(), (x,))
    assert {"aten.add_.Tensor", "aten.relu_.default"} <= {str(n.target) for n in ep.graph.nodes}
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(from_exported_program(ep), target="c"))
    np.testing.assert_allclose(vm["main"](x.numpy()), _InPlace()(x).numpy(), rtol=1e-6, atol=1e-6)


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(8)
        self.proj = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.softmax(self.proj(F.gelu(self.norm(x))), -1)


def test_core_aten_decomposition_imports_too(rng):
    torch.manual_seed(0)
    model = _Block().eval()
    x = _data(f(2, 3, 8), rng)
    ep = torch.export.export(model, (x,))
    mod = from_exported_program(ep, decompose=True)
    vm = refcomp.runtime.VirtualMachine(refcomp.graph.build(mod, target="c"))
    with torch.no_grad():
        np.testing.assert_allclose(vm["main"](x.numpy()), model(x).numpy(), rtol=1e-5, atol=1e-6)
