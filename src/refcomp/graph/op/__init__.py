"""Graph operators by family; each builder returns an unnormalized `Call` (emit it with a BlockBuilder).

`registry.get(name)` gives an operator's shape rule, legalization, numpy reference and pattern.
"""
from .registry import REGISTRY, OpInfo, get, names, register  # noqa: F401
from .base import call_dps_packed, call_tir, view  # noqa: F401
from .elementwise import *  # noqa: F401,F403
from .elementwise import BINARY_NAMES, UNARY_NAMES, astype, clip, where  # noqa: F401
from .linear import dense, linear, matmul  # noqa: F401
from .reduce import *  # noqa: F401,F403
from .reduce import argmax, argmin, cumprod, cumsum, logsumexp, std, variance  # noqa: F401
from .nn import *  # noqa: F401,F403
from .manipulate import *  # noqa: F401,F403
from .index import *  # noqa: F401,F403
from .create import *  # noqa: F401,F403
from .image import resize2d  # noqa: F401
from .layout import (  # noqa: F401
    avg_pool2d_nchwc, conv2d_nchwc, global_avg_pool_nchwc, layout_transform, max_pool2d_nchwc,
)
from .dynamic import tensor_to_shape  # noqa: F401
from .minifloat import minifloat_decode, minifloat_encode  # noqa: F401
from .strings import (  # noqa: F401
    label_encode, regex_full_match, string_cast, string_concat, string_equal, string_normalize, string_split,
)
from .bitwise import bitcast, bitwise_and, bitwise_not, bitwise_or, bitwise_xor, left_shift, right_shift  # noqa: F401
from . import elementwise as _e, reduce as _r

for _name in _e.UNARY_NAMES + _e.BINARY_NAMES:
    globals()[_name] = getattr(_e, _name)
for _name in ("sum", "max", "min", "prod", "mean", "l1_norm", "l2_norm", "sum_square"):
    globals()[_name] = getattr(_r, _name)
