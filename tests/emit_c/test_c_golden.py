"""Golden files of emitted C: a change in the output shows in review.

Run with REFCOMP_UPDATE_GOLDEN=1 to rewrite the files after an intended change.  Only the
kernel function is compared (the helper prelude has its own tests); the numbers are checked by
the other test files.
"""
import os
from pathlib import Path

import pytest

from refcomp.ast import (
    AssertStmt, Buffer, BufferStore, Call, Cast, For, IntImm, PrimFunc, Ramp, SizeVar, Var, floordiv, max_,
)
from refcomp.emit_c import EmitOptions, emit

GOLDEN = Path(__file__).parent / "golden"
NATIVE = EmitOptions(vectors=True, openmp=True, vector_bytes=32)
STRICT = EmitOptions(vectors=False, openmp=False, label="c -std=c99")


def _scalar_kernel():
    n = SizeVar("n", "int32")
    A = Buffer("A", (n, 4), "float16")
    B = Buffer("B", (n,), "int32")
    i, j = Var("i", "int32"), Var("j", "int32")
    store = BufferStore(B, floordiv(B[i], IntImm(3)) + Cast("int32", A[i, j]), (i,))
    body = AssertStmt(n > 0, "n must be positive",
                      For(i, 0, n, "parallel", For(j, 0, 4, "unrolled", store)))
    return PrimFunc((A, B), body, "scalar_mix")


def _vector_kernel():
    n = SizeVar("n", "int32")
    A, B = Buffer("A", (n * 16,), "float32"), Buffer("B", (n * 16,), "float32")
    i = Var("i", "int32")
    ramp = Ramp(i * 16, IntImm(1), 16)
    value = max_(Call("exp", (A[ramp],), "float32x16"), A[ramp])
    return PrimFunc((A, B), For(i, 0, n, "serial", BufferStore(B, value, (ramp,))), "vector_exp_max")


def _kernel_only(source: str) -> str:
    """From the comment line above the exported kernel to the end of the file."""
    kernel = source.index("\nint32_t refcomp_")
    return source[source.rfind("\n/* ", 0, kernel) + 1:]


@pytest.mark.parametrize("name, make, options", [
    ("scalar_mix_native", _scalar_kernel, NATIVE), ("scalar_mix_c99", _scalar_kernel, STRICT),
    ("vector_exp_max_native", _vector_kernel, NATIVE), ("vector_exp_max_c99", _vector_kernel, STRICT),
])
def test_golden(name, make, options):
    text = _kernel_only(emit(make(), options).source)
    path = GOLDEN / f"{name}.c"
    if os.environ.get("REFCOMP_UPDATE_GOLDEN") or not path.exists():
        if not os.environ.get("REFCOMP_UPDATE_GOLDEN"):
            pytest.fail(f"missing golden file {path}; run with REFCOMP_UPDATE_GOLDEN=1 to create it")
        path.write_text(text)
    assert text == path.read_text(), f"emitted C changed; diff against {path} (REFCOMP_UPDATE_GOLDEN=1 updates)"
