"""normalize: re-derive struct info of every binding (and check it against the annotation).

Passes that rewrite values may leave a var annotated with info its new value no longer proves;
normalize recomputes each call's info with the operator rules, records new runtime checks, and
raises an IRError when a var's annotation statically contradicts its value.
"""
from __future__ import annotations

from ...ast.function import IRModule
from ...ast.graph import Call, VarBinding
from ...errors import IRError
from ..block_builder import BlockBuilder
from ..infer import base_check
from .common import graph_functions, map_blocks, with_bindings


def normalize(mod: IRModule) -> IRModule:
    """The module with every call's struct info re-inferred and checked."""
    bb = BlockBuilder(mod)
    for name, func in graph_functions(mod):
        def block_fn(block):
            out = []
            for b in block.bindings:
                value = b.value
                if isinstance(value, Call):
                    info = bb.infer_call(value)
                    if isinstance(b, VarBinding) and b.var.struct_info is not None and base_check(
                            b.var.struct_info, info) == "fail":
                        raise IRError(f"normalize: {b.var.name} is annotated {b.var.struct_info} but its value "
                                      f"has {info}", spot=b)
                    value = value.with_(struct_info=info)
                out.append(b if value is b.value else b.with_(value=value))
            return with_bindings(block, out)

        mod = mod.with_function(name, map_blocks(func, block_fn))
    return mod
