"""Signed floordiv / floormod by a constant power of two: the emitter writes a shift and a mask
(rc_floordiv_pow2 / rc_floormod_pow2) that must give the floor semantics of the general helpers
and numpy for every value, negative ones and the type's extremes included, in strict C99 too."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import refcomp
from refcomp.ast import Buffer, BufferStore, For, IntImm, PrimFunc, SizeVar, Var, floordiv, floormod, seq
from refcomp.emit_c import EmitOptions, emit

TARGETS = ["c -Werror", "c -std=c99"]
SIGNED = ["int8", "int16", "int32", "int64"]


def _kernel(dtype: str, shifts: list[int]) -> PrimFunc:
    """Q_k[i] = A[i] // 2^k and R_k[i] = A[i] % 2^k (floor) for each k in shifts."""
    n = SizeVar("n", "int32")
    A = Buffer("A", (n,), dtype)
    outs = [Buffer(f"{name}{k}", (n,), dtype) for k in shifts for name in "QR"]
    i = Var("i", "int32")
    stores = []
    for k in shifts:
        divisor = IntImm(1 << k, dtype)
        stores.append(BufferStore(outs[len(stores)], floordiv(A[i], divisor), (i,)))
        stores.append(BufferStore(outs[len(stores)], floormod(A[i], divisor), (i,)))
    return PrimFunc((A, *outs), For(i, 0, n, "serial", seq(*stores)), f"pow2_{dtype}")


def _shifts(dtype: str) -> list[int]:
    return list(range(1, np.iinfo(dtype).bits - 1))


def _edges(dtype: str) -> np.ndarray:
    info = np.iinfo(dtype)
    near = [info.min, info.min + 1, info.min + 2, -(2 ** 7) - 1, -(2 ** 7), -9, -8, -7, -2, -1, 0, 1, 2, 7, 8, 9,
            2 ** 7 - 1, info.max - 1, info.max]
    return np.array(sorted({int(v) for v in near if info.min <= v <= info.max}), dtype)


def _check(dtype: str, values: np.ndarray, target: str) -> None:
    shifts = _shifts(dtype)
    func = _kernel(dtype, shifts)
    lib = refcomp.build(func, target=target)
    outs = [np.full(values.shape, 3, dtype) for _ in range(2 * len(shifts))]
    lib(values, *outs)
    wide = values.astype(np.int64)
    for index, k in enumerate(shifts):
        np.testing.assert_array_equal(outs[2 * index], (wide // (1 << k)).astype(dtype), err_msg=f"{dtype} // 2^{k}")
        np.testing.assert_array_equal(outs[2 * index + 1], (wide % (1 << k)).astype(dtype), err_msg=f"{dtype} % 2^{k}")


@pytest.mark.parametrize("dtype", SIGNED)
@pytest.mark.parametrize("target", TARGETS)
def test_power_of_two_division_at_the_edges(dtype, target):
    """Every shift the type allows, on the values where floor and truncation part ways; int8 and
    int16 over every value they hold."""
    info = np.iinfo(dtype)
    values = np.arange(info.min, info.max + 1, dtype=np.int64).astype(dtype) if info.bits <= 16 else _edges(dtype)
    _check(dtype, values, target)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_power_of_two_division_on_drawn_values(dtype):
    info = np.iinfo(dtype)

    @settings(max_examples=5, deadline=None)
    @given(st.lists(st.integers(int(info.min), int(info.max)), min_size=1, max_size=64))
    def run(values):
        _check(dtype, np.array(values, dtype), "c -Werror")
    run()


def _stores(func: PrimFunc) -> str:
    """The emitted lines that store an output (the kernel's body, not the prelude)."""
    return "\n".join(line for line in emit(func, EmitOptions()).source.splitlines() if "] = " in line)


def test_the_shift_forms_are_emitted_for_signed_powers_of_two_only():
    """A signed divisor 2^k takes the shift and mask; a divisor that is not a power of two, or an
    unsigned one (whose helper is C's `/` already), keeps the general helper."""
    body = _stores(_kernel("int32", [3]))
    assert "rc_floordiv_pow2_i32(" in body and "rc_floormod_pow2_i32(" in body
    n = SizeVar("n", "int32")
    i = Var("i", "int32")
    for dtype, divisor, helper in (("int32", 12, "rc_floordiv_i32("), ("uint32", 8, "rc_floordiv_u32(")):
        A, O = Buffer("A", (n,), dtype), Buffer("O", (n,), dtype)
        func = PrimFunc((A, O), For(i, 0, n, "serial", BufferStore(O, floordiv(A[i], IntImm(divisor, dtype)), (i,))),
                        "other")
        body = _stores(func)
        assert helper in body and "pow2" not in body
