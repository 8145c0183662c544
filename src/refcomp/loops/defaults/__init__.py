"""Rule-based default schedules, one module per operator class, chosen by analysing the PrimFunc.

Each rule takes a Schedule, returns a new one (the one given is left as it was), decides from the blocks' iter kinds and buffer accesses (never the
function's name) whether its class applies, and transforms the schedule with the checked
primitives only.  A rule that does not apply returns None and changes nothing; one whose step a
primitive refuses (the step cannot be proven legal or in bounds) raises the primitive's
RefcompError, and the caller falls back to the generic schedule and says so.
"""
from .batched_matmul import bt_tile_intrinsics, schedule_batched_matmul_bt, tiled_batched_matmul_bt, transposed_operand
from .pool import padded_rows_window_reduction, padded_window_reduction, schedule_pool, window_reduction
from .reduction import is_row_reduction, prefetch_rows, schedule_row_reduction
from .transpose import MIN_EXTENT as MIN_EXTENT_OF_TRANSPOSE
from .transpose import schedule_transpose, transposed_pair

# (name, rule) in the order they are tried: a rule takes a Schedule and returns a new one, or None
# when its class does not apply; the Schedule it was given is left as it was either way.
RULES = (
    ("row reduction", schedule_row_reduction),
    ("transpose", schedule_transpose),
    ("batched matmul with B transposed", schedule_batched_matmul_bt),
    ("pooling", schedule_pool),
)

__all__ = [
    "RULES", "MIN_EXTENT_OF_TRANSPOSE", "bt_tile_intrinsics", "is_row_reduction", "prefetch_rows",
    "schedule_batched_matmul_bt", "schedule_pool", "schedule_row_reduction", "schedule_transpose",
    "tiled_batched_matmul_bt", "transposed_operand", "transposed_pair", "window_reduction",
    "padded_window_reduction", "padded_rows_window_reduction",
]
