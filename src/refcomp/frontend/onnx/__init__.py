"""ONNX import: `from_onnx(model, shape_dict=None)` -> IRModule with a graph function `main`.

`dim_param` names become size vars (one per name), so one compiled model serves every batch size
and sequence length; `shape_dict` ({input name: shape}) overrides input shapes (ints or names).
Each op family's converters live in their own module and register themselves in CONVERTERS; an op
without a converter whose ONNX schema defines a function body is imported through that body
(functions.py); control flow is unrolled at import (ops_control.py); shape arithmetic over dynamic
dims stays symbolic (shape_values.py).
"""
from .importer import CONVERTERS, from_onnx, supported_ops  # noqa: F401
from . import (  # noqa: F401  (register converters)
    ops_control, ops_data_shaped, ops_deform_conv, ops_elementwise, ops_grid_sample, ops_linalg, ops_nn,
    ops_quant, ops_reduce, ops_resize, ops_rnn, ops_roi_align, ops_scatter,
    ops_shape, ops_signal, ops_strings, ops_text, ops_training,
)
