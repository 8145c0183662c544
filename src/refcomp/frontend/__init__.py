"""Frontends: model formats imported into refcomp's graph IR."""
from __future__ import annotations


def from_onnx(model, shape_dict=None, name: str = "main", const_inputs=None):
    """Import an ONNX model (ModelProto or path); see refcomp.frontend.onnx.from_onnx."""
    from .onnx import from_onnx as _from_onnx

    return _from_onnx(model, shape_dict, name, const_inputs)


def from_exported_program(ep, name: str = "main", decompose: bool = False):
    """Import a torch.export ExportedProgram; see refcomp.frontend.torch_export.from_exported_program."""
    from .torch_export import from_exported_program as _from_exported_program

    return _from_exported_program(ep, name, decompose)


__all__ = ["from_exported_program", "from_onnx"]
