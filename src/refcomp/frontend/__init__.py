"""Frontends: model formats imported into refcomp's graph IR."""
from __future__ import annotations


def from_onnx(model, shape_dict=None, name: str = "main", const_inputs=None):
    """Import an ONNX model (ModelProto or path); see refcomp.frontend.onnx.from_onnx."""
    from .onnx import from_onnx as _from_onnx

    return _from_onnx(model, shape_dict, name, const_inputs)


__all__ = ["from_onnx"]
