"""Relations a function states (attrs["assumptions"]) are checked before every call."""
import numpy as np
import pytest

import refcomp
from refcomp import te


def test_stated_assumptions_are_checked_at_call_time(rng):
    n = te.var("n")
    A = te.placeholder((n,), "float32", name="A")
    B = te.compute((n // 4,), lambda i: A[i * 4 + 3], name="B")
    func = te.create_prim_func([A, B]).with_attr("assumptions", (n % 4 == 0,))
    lib = refcomp.build(func)
    a = rng.standard_normal(12).astype("float32")
    b = rng.standard_normal(3).astype("float32")
    lib(a, b)
    np.testing.assert_array_equal(b, a[3::4])
    with pytest.raises(refcomp.ArgumentError, match=r"n % 4 == 0 does not hold \(n = 10\)"):
        lib(rng.standard_normal(10).astype("float32"), np.empty(2, "float32"))
