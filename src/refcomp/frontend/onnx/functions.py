"""Ops without a converter that ONNX defines as a function of other ops: expand the node into its body.

The operator schemas in the onnx package carry a function body for many composite ops (Attention,
the losses, the window functions, RotaryEmbedding, CenterCropPad...); context-dependent ones build
the body from the node's attributes and input types.  The body's nodes are renamed so they cannot
clash with the graph's names, attribute references are resolved against the node, and the caller
imports them in place of the node, under the body's own opset.
"""
from __future__ import annotations

import functools

from ...ast.graph_struct_info import TensorStructInfo


def function_body(node, opset: int, input_infos: list):
    """(nodes, opset) of `node`'s expansion, or None when its schema has no function body."""
    from onnx import FunctionProto, defs

    try:
        schema = defs.get_schema(node.op_type, opset, node.domain)
    except defs.SchemaError:
        return None
    proto = None
    if schema.has_context_dependent_function:
        types = [_type_proto(info).SerializeToString() for info in input_infos]
        try:
            data = schema.get_context_dependent_function_with_opset_version(opset, node.SerializeToString(), types)
        except Exception:  # the schema declines this node (e.g. an attribute combination it cannot express)
            data = b""
        if data:
            proto = FunctionProto()
            proto.ParseFromString(data)
    if proto is None and schema.has_function:
        data = schema.get_function_with_opset_version(opset)
        if data:
            proto = FunctionProto()
            proto.ParseFromString(data)
    if proto is None or not proto.node:
        return None
    body_opset = next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), opset)
    return _inline(proto, node, schema), body_opset


_counter = [0]


def _inline(proto, node, schema) -> list:
    """The body's nodes with formal names bound to the node's inputs/outputs and the rest made unique."""
    _counter[0] += 1
    prefix = f"__{node.op_type}{_counter[0]}_"
    names = {"": ""}
    for k, formal in enumerate(proto.input):
        names[formal] = node.input[k] if k < len(node.input) else ""
    for k, formal in enumerate(proto.output):
        names[formal] = node.output[k] if k < len(node.output) else ""
    given = {a.name: a for a in node.attribute}
    defaults = {name: a.default_value for name, a in schema.attributes.items() if a.default_value.type}
    defaults.update({a.name: a for a in proto.attribute_proto})
    return [_rename_node(n, names, prefix, given, defaults) for n in proto.node]


def _rename_node(body_node, names, prefix, given, defaults):
    from onnx import NodeProto

    out = NodeProto()
    out.CopyFrom(body_node)
    rename = lambda name: names.get(name, prefix + name if name else "")  # noqa: E731
    out.input[:] = [rename(i) for i in body_node.input]
    out.output[:] = [rename(o) for o in body_node.output]
    if out.name:
        out.name = prefix + out.name
    attrs = []
    for attr in body_node.attribute:
        if attr.ref_attr_name:
            source = given.get(attr.ref_attr_name) or defaults.get(attr.ref_attr_name)
            if source is None:
                continue  # an unset optional attribute: the body node takes its own default
            resolved = type(attr)()
            resolved.CopyFrom(source)
            resolved.name = attr.name
            attrs.append(resolved)
            continue
        if attr.g.node or attr.graphs:
            attr = _rename_subgraphs(attr, rename, names, prefix, given, defaults)
        attrs.append(attr)
    del out.attribute[:]
    out.attribute.extend(attrs)
    return out


def _rename_subgraphs(attr, rename, names, prefix, given, defaults):
    copy = type(attr)()
    copy.CopyFrom(attr)
    for graph in ([copy.g] if copy.g.node else []) + list(copy.graphs):
        for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
            vi.name = rename(vi.name)
        for init in graph.initializer:
            init.name = rename(init.name)
        renamed = [_rename_node(n, names, prefix, given, defaults) for n in graph.node]
        del graph.node[:]
        graph.node.extend(renamed)
    return copy


def _type_proto(info):
    """The ONNX TypeProto of an imported value's struct info (empty for a missing optional input)."""
    from onnx import TypeProto, helper

    from ...graph.shape_facts import const_value

    if info is None or not isinstance(info, TensorStructInfo) or info.dtype is None:
        return TypeProto()
    elem = helper.np_dtype_to_tensor_dtype(info.dtype.numpy())
    if info.shape is None:
        return helper.make_tensor_type_proto(elem, None)
    dims = [const_value(d) for d in info.shape]
    return helper.make_tensor_type_proto(elem, [d if d is not None else str(s) for d, s in zip(dims, info.shape)])


@functools.lru_cache(maxsize=None)
def has_function_body(op_type: str, domains=("", "ai.onnx.preview", "ai.onnx.ml")) -> bool:
    """Whether the newest schema of op_type (in any of `domains`) defines a function body, so the
    importer can expand it even without a converter."""
    from onnx import defs

    for domain in domains:
        try:
            schema = defs.get_schema(op_type, defs.onnx_opset_version(), domain)
        except defs.SchemaError:
            continue
        if schema.has_function or schema.has_context_dependent_function:
            return True
    return False
