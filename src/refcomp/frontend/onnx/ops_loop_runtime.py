"""ONNX Loop whose trip count or condition is known only at run time, the Relax way: recursion.

Two graph functions are added to the module and call each other:

    loop(i, m, cond, v..., acc..., free...) = if i < m and cond: step(i, m, cond, v..., acc..., free...)
                                             else: (v..., acc...)
    step(i, m, cond, v..., acc..., free...) = the body on (i, cond, v...) giving (cond', v'..., s...);
                                             loop(i + 1, m, cond', v'..., concat(acc, [s])..., free...)

`v` are the loop-carried values (each iteration's result is matched at run time against the
shape of the initial value), `acc` the scan outputs gathered so far (a leading axis of run-time
length, empty at first), `free` the enclosing graph's values the body reads.  The caller matches
the scan outputs to a fresh size var.  The VM runs the If and the calls (graph functions with
control flow are not compiled to one C function).
"""
from __future__ import annotations

import itertools

import numpy as np

from ...ast import SizeVar
from ...ast.graph import Call, Constant, GlobalVar, SeqExpr, Tuple, TupleGetItem, Var, VarBinding
from ...ast.graph import BindingBlock
from ...ast.graph_struct_info import FuncStructInfo, TensorStructInfo, TupleStructInfo, definable_vars, shape_vars
from ...graph import op
from ...graph.block_builder import BlockBuilder, make_if

_count = itertools.count()


def _free_names(graph) -> list[str]:
    """Names a subgraph (and the subgraphs inside it) reads from its enclosing scopes, in order."""
    from onnx import AttributeProto

    defined = {vi.name for vi in graph.input} | {t.name for t in graph.initializer}
    free: list[str] = []
    for node in graph.node:
        used = list(node.input)
        for attr in node.attribute:
            subs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                used += _free_names(sub)
        for name in used:
            if name and name not in defined and name not in free:
                free.append(name)
        defined.update(o for o in node.output if o)
    return free


def _scalar_info(dtype: str) -> TensorStructInfo:
    return TensorStructInfo((), dtype)


def _param(name: str, info) -> Var:
    return Var(name, info)


def _check_param_info(ctx, info, what: str) -> None:
    if not isinstance(info, TensorStructInfo) or info.shape is None:
        ctx.fail(f"a Loop with a run-time trip count needs tensors of known rank, {what} is {info}")
    loose = [v for v in shape_vars(info) if v not in definable_vars(info)]
    if loose:
        ctx.fail(f"a Loop with a run-time trip count needs {what}'s dims to be literals or size vars, got {info}")


def loop_runtime(ctx, node, inputs, attrs, run_body):
    """The outputs of Loop `node` run by recursion (run_body(ctx, graph, env, bound) imports the body)."""
    body = attrs["body"]
    e = ctx.emit
    trips = inputs[0] if inputs and inputs[0] is not None else Constant(np.asarray(np.iinfo(np.int64).max, np.int64))
    cond = inputs[1] if len(inputs) > 1 and inputs[1] is not None else Constant(np.asarray(True))
    trips = e(op.astype(op.reshape(trips, ()), "int64"))
    cond = e(op.astype(op.reshape(cond, ()), "bool"))
    carried = [ctx.tensor(v) for v in inputs[2:]]
    n_scan = len(body.output) - 1 - len(carried)
    free_names = [n for n in _free_names(body) if n in ctx.env and not isinstance(ctx.env[n], Constant)]
    free = [ctx.tensor(ctx.env[n]) for n in free_names]
    for k, v in enumerate(carried):
        _check_param_info(ctx, v.struct_info, f"loop-carried value {k}")
    for name, v in zip(free_names, free):
        _check_param_info(ctx, v.struct_info, f"the outer value {name}")
    tag = next(_count)

    def params(scan_infos):
        ps = [_param("i", _scalar_info("int64")), _param("m", _scalar_info("int64")), _param("cond", _scalar_info("bool"))]
        ps += [_param(f"v{k}", v.struct_info) for k, v in enumerate(carried)]
        ps += [_param(f"acc{k}", info) for k, info in enumerate(scan_infos)]
        ps += [_param(f"free{k}", v.struct_info) for k, v in enumerate(free)]
        return ps

    def import_body(ps):
        """The body imported on the params (i, cond, v...) with the free names bound to free params."""
        env = dict(ctx.env)
        for name, p in zip(free_names, ps[3 + len(carried) + n_scan:]):
            env[name] = p
        saved = ctx.env
        ctx.env = env
        try:
            return run_body(ctx, body, env, [ps[0], ps[2]] + ps[3:3 + len(carried)])
        finally:
            ctx.env = saved

    # a first import on scratch params learns the scan outputs' types (then is dropped)
    outer_bb = ctx.bb
    ctx.bb = BlockBuilder()
    try:
        with ctx.bb.function("scratch", params([])):
            with ctx.bb.dataflow():
                outs = import_body(params([]))
                scan_infos = [ctx.info(ctx.tensor(s)) for s in outs[1 + len(carried):]]
                out = ctx.bb.emit_output(Tuple(()))
            ctx.bb.emit_func_output(out)
    finally:
        ctx.bb = outer_bb
    flexible = []  # scan outputs with dims computed in the body: the first step fixes them
    for k, info in enumerate(scan_infos):
        _check_param_info(ctx, info, f"scan output {k}")
        flexible.append(any(v not in ctx.bb.defined_vars for v in shape_vars(info)))
        if flexible[-1]:
            scan_infos[k] = TensorStructInfo(tuple(SizeVar(f"scan{k}_dim{j}", "int64") for j in range(info.ndim)),
                                             info.dtype)
    acc_infos = [TensorStructInfo((SizeVar(f"steps{k}", "int64"),) + tuple(info.shape), info.dtype)
                 for k, info in enumerate(scan_infos)]
    ret = TupleStructInfo(tuple(v.struct_info for v in carried)
                          + tuple(TensorStructInfo(None, info.dtype, info.ndim + 1) for info in scan_infos))
    loop_ps, step_ps = params(acc_infos), params(acc_infos)
    loop_gv = GlobalVar(f"onnx_loop{tag}", FuncStructInfo(tuple(p.struct_info for p in loop_ps), ret))
    step_gv = GlobalVar(f"onnx_loop{tag}_step", FuncStructInfo(tuple(p.struct_info for p in step_ps), ret))
    bb = ctx.bb

    with bb.function(step_gv.name, step_ps):
        with bb.dataflow():
            outs = import_body(step_ps)
            cond_out = e(op.astype(op.reshape(ctx.tensor(outs[0]), ()), "bool"))
            values = []
            for k, (v, p) in enumerate(zip(outs[1:1 + len(carried)], step_ps[3:])):
                v = ctx.tensor(v)
                values.append(bb.match_cast(v, p.struct_info))  # the carried shape holds (checked at run time)
            grown = []
            for k, s in enumerate(outs[1 + len(carried):]):
                acc = step_ps[3 + len(carried) + k]
                if flexible[k]:
                    grown.append(bb.emit_output(ctx.tensor(s)))
                    continue
                s = bb.match_cast(ctx.tensor(s), TensorStructInfo(tuple(acc.struct_info.shape[1:]), acc.struct_info.dtype))
                grown.append(e(op.concat(acc, op.expand_dims(s, (0,)), axis=0)))
            following = e(op.add(step_ps[0], Constant(np.asarray(1, np.int64))))
            args = [following, step_ps[1], cond_out] + values + grown + step_ps[3 + len(carried) + n_scan:]
            args = [bb.emit_output(a) if not isinstance(a, Var) or type(a).__name__ == "DataflowVar" else a
                    for a in args]
        for k in range(n_scan):
            if flexible[k]:
                args[3 + len(carried) + k] = _grow(bb, step_ps[3 + len(carried) + k], args[3 + len(carried) + k])
        result = bb.emit(Call(loop_gv, tuple(args)))
        bb.emit_func_output(result)

    with bb.function(loop_gv.name, loop_ps):
        go = bb.emit(op.logical_and(op.less(loop_ps[0], loop_ps[1]), loop_ps[2]))
        then_var = Var("r", ret)
        then = SeqExpr((BindingBlock((VarBinding(then_var, Call(step_gv, tuple(loop_ps), struct_info=ret)),)),),
                       then_var)
        done = bb.normalize(Tuple(tuple(loop_ps[3:3 + len(carried) + n_scan])))
        else_var = Var("r", done.struct_info)
        other = SeqExpr((BindingBlock((VarBinding(else_var, done),)),), else_var)
        result = bb.emit(make_if(None, go, then, other, bb.defined_vars))
        bb.emit_func_output(result)

    empty = [e(op.full((0,) * (info.ndim + 1) if flexible[k] else (0,) + tuple(info.shape), 0, str(info.dtype)))
             for k, info in enumerate(scan_infos)]
    call = e(Call(loop_gv, tuple([Constant(np.asarray(0, np.int64)), trips, cond] + carried + empty + free)))
    results = []
    for k, v in enumerate(carried):
        results.append(e(TupleGetItem(call, k)))
    for k, info in enumerate(scan_infos):
        got = e(TupleGetItem(call, len(carried) + k))
        steps = SizeVar(f"loop_steps{tag}_{k}", "int64")
        dims = tuple(SizeVar(f"loop_scan{tag}_{k}_dim{j}", "int64") for j in range(info.ndim)) if flexible[k] \
            else tuple(info.shape)
        results.append(bb.match_cast(got, TensorStructInfo((steps,) + dims, info.dtype)))
    return results


def _grow(bb, acc, value):
    """acc with value appended along a new leading axis; while acc is empty (its trailing dims 0,
    unknown before the first step) the result is value alone, after that value's shape must be
    that of the earlier steps (checked at run time)."""
    from ...ast.graph import MatchCast

    steps = acc.struct_info.shape[0]
    first = bb.emit(op.equal(op.shape_to_tensor((steps,), scalar=True), Constant(np.asarray(0, np.int64))))
    alone = bb.normalize(op.expand_dims(value, (0,)))
    alone_var = Var("grown", alone.struct_info)
    then = SeqExpr((BindingBlock((VarBinding(alone_var, alone),)),), alone_var)
    info = value.struct_info
    same = TensorStructInfo((steps,) + tuple(info.shape), info.dtype)
    matched = Var("earlier", same)
    lifted = bb.normalize(op.expand_dims(value, (0,)))
    lifted_var = Var("step", lifted.struct_info)
    joined = bb.normalize(op.concat(matched, lifted_var, axis=0))
    joined_var = Var("grown", joined.struct_info)
    other = SeqExpr((BindingBlock((MatchCast(matched, acc, same), VarBinding(lifted_var, lifted),
                                   VarBinding(joined_var, joined))),), joined_var)
    return bb.emit(make_if(None, first, then, other, bb.defined_vars))
