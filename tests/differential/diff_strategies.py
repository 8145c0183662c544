"""Shared pieces of the differential suite: dtype lists and hypothesis strategies for shapes/seeds."""
from hypothesis import strategies as st

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOAT_DTYPES = ["float16", "bfloat16", "float32", "float64"]
ALL_DTYPES = INT_DTYPES + FLOAT_DTYPES

seeds = st.integers(0, 2**32 - 1)


def dims(low: int = 1, high: int = 6):
    """A small dimension (the programs take symbolic dims, so one build serves every size)."""
    return st.integers(low, high)
