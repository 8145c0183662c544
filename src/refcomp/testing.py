"""Helpers for differential tests: fresh random data, dtype-aware tolerances, numpy == interpreter == C.

    rng = np.random.default_rng(seed)
    a = random_array(rng, (n, m), "float16")
    check(func, [a, b], [np.empty(...)], expected=[reference], dtype="float16", terms=m)

`check` runs the reference interpreter, the interpreter on the program printed and parsed back
(the script format round trip), and the compiled C kernel on copies of the same inputs, and
compares every output with the numpy
reference: exactly for integers and bools, within a bound derived from the dtype's epsilon and
the number of rounded operations otherwise.  bfloat16 arrays are uint16 bit patterns throughout.
"""
from __future__ import annotations

import os
import warnings
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

__all__ = ["random_array", "as_float", "from_float", "epsilon", "assert_close", "check", "compiled",
           "reparsed", "c_backend_enabled", "evaluate_graph"]

_EPSILON = {"float64": 2.0 ** -52, "float32": 2.0 ** -23, "float16": 2.0 ** -10, "bfloat16": 2.0 ** -7}


def epsilon(dtype: str) -> float:
    """Machine epsilon of a float dtype (0 for integers: they compare exactly)."""
    return _EPSILON.get(str(dtype), 0.0)


def _storage(dtype: str) -> np.dtype:
    return np.dtype("uint16") if str(dtype) == "bfloat16" else np.dtype(str(dtype))


def from_float(values: np.ndarray, dtype: str) -> np.ndarray:
    """Float values converted to dtype (bfloat16: round to nearest even into uint16 bit patterns)."""
    if str(dtype) != "bfloat16":
        return np.asarray(values).astype(dtype)
    f32 = np.asarray(values, np.float32)
    bits = f32.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(f32), np.uint16(0x7FC0), rounded).astype(np.uint16)


def as_float(array: np.ndarray, dtype: str) -> np.ndarray:
    """The values of an array of dtype as float64 (bfloat16 bit patterns decoded)."""
    if str(dtype) == "bfloat16":
        return (np.asarray(array).astype(np.uint32) << np.uint32(16)).view(np.float32).astype(np.float64)
    return np.asarray(array).astype(np.float64)


def random_array(rng: np.random.Generator, shape: Sequence[int], dtype: str, *, low: float | None = None,
                 high: float | None = None, nonzero: bool = False) -> np.ndarray:
    """Fresh random data of dtype (never all zeros): floats uniform in [low, high) (default [-2, 2)),
    integers uniform over [low, high] (default: the whole range, so arithmetic wraps), bools 50/50."""
    dtype = str(dtype)
    shape = tuple(int(s) for s in shape)
    if dtype == "bool":
        return rng.random(shape) < 0.5
    if dtype in _EPSILON:
        lo, hi = (-2.0 if low is None else low), (2.0 if high is None else high)
        values = rng.uniform(lo, hi, shape)
        if nonzero:
            values = np.where(values == 0, hi / 2 or 1.0, values)
        out = from_float(values, dtype)
        if dtype != "bfloat16" and nonzero:
            out = np.where(out == 0, np.asarray(hi / 2 or 1.0).astype(dtype), out)
        return out
    info = np.iinfo(dtype)
    lo = int(info.min) if low is None else int(low)
    hi = int(info.max) if high is None else int(high)
    values = rng.integers(lo, hi, shape, dtype=dtype, endpoint=True)
    if nonzero:
        values = np.where(values == 0, np.asarray(hi if hi != 0 else lo, dtype), values)
    return values


def assert_close(got: np.ndarray, want: np.ndarray, dtype: str, *, terms: int = 1,
                 magnitude: np.ndarray | None = None, what: str = "result") -> None:
    """got (in dtype) equals want: exactly for integers/bools, else within
    2 * (terms + 1) * eps * magnitude (magnitude defaults to |want|; pass e.g. |A| @ |B| for sums),
    plus the dtype's smallest normal for values near zero.  NaNs must match NaNs."""
    dtype = str(dtype)
    if dtype not in _EPSILON:
        want_arr = np.asarray(want)
        if np.asarray(got).shape != want_arr.shape:
            raise AssertionError(f"{what}: shape {np.asarray(got).shape} != {want_arr.shape}")
        np.testing.assert_array_equal(np.asarray(got), want_arr.astype(np.asarray(got).dtype), err_msg=what)
        return
    got_f = as_float(got, dtype)
    want_f = np.asarray(want, np.float64)
    if got_f.shape != want_f.shape:
        raise AssertionError(f"{what}: shape {got_f.shape} != {want_f.shape}")
    scale = np.abs(want_f) if magnitude is None else np.asarray(magnitude, np.float64)
    tiny = {"float64": 1e-300, "float32": 1e-37, "float16": 6.2e-5, "bfloat16": 1e-37}[dtype]
    allowed = 2.0 * (terms + 1) * epsilon(dtype) * np.where(np.isfinite(scale), scale, 0.0) + tiny
    nan_got, nan_want = np.isnan(got_f), np.isnan(want_f)
    with np.errstate(invalid="ignore"):
        same_inf = np.isinf(want_f) & (got_f == want_f)
        # a float16/bfloat16 result may overflow where the float64 reference did not
        finite_limit = {"float64": np.inf, "float32": 3.4028234663852886e38, "float16": 65504.0,
                        "bfloat16": 3.3895313892515355e38}[dtype]
        overflowed = np.isinf(got_f) & (np.abs(want_f) >= finite_limit * (1 - 2 * epsilon(dtype)))
        err = np.abs(got_f - want_f)
        ok = (nan_got & nan_want) | same_inf | overflowed | (~nan_got & ~nan_want & (err <= allowed))
    if not ok.all():
        bad = np.argwhere(~ok)[:5]
        lines = [f"  at {tuple(int(i) for i in idx)}: got {got_f[tuple(idx)]!r}, want {want_f[tuple(idx)]!r}, "
                 f"allowed error {allowed[tuple(idx)] if np.ndim(allowed) else allowed:.3g}" for idx in bad]
        raise AssertionError(f"{what}: {int((~ok).sum())} of {ok.size} elements differ ({dtype}, terms={terms})\n"
                             + "\n".join(lines))


# ----------------------------------------------------------------------------- running programs

def c_backend_enabled() -> bool:
    """The compiled-C leg runs unless REFCOMP_DIFFERENTIAL_C=0 (e.g. on a machine without gcc)."""
    return os.environ.get("REFCOMP_DIFFERENTIAL_C", "1") != "0"


_BUILDS: "OrderedDict[int, tuple[Any, Any]]" = OrderedDict()


def compiled(func: Any, **build_options: Any) -> Any:
    """refcomp.build(func) once per function object (the test reuses programs across examples)."""
    import refcomp

    key = id(func)
    hit = _BUILDS.get(key)
    if hit is not None and hit[0] is func:
        if isinstance(hit[1], BaseException):  # a failed build fails fast on the next example
            raise hit[1].with_traceback(None)
        return hit[1]
    try:
        try:
            library = refcomp.build(func, **build_options)
        except refcomp.ShapeError as exc:
            # The prover works under a time limit, so on a loaded machine an access may come back
            # "unknown".  The interpreter checks every access of the same program on the same data,
            # so fall back to run-time guards instead of failing the numeric comparison.
            if build_options.get("bounds", "prove") != "prove" or "bounds='runtime'" not in str(exc.hint):
                raise
            warnings.warn(f"refcomp.testing: {getattr(func, 'name', 'func')}: bounds not proved in time, "
                          "building with bounds='runtime'", RuntimeWarning, stacklevel=2)
            library = refcomp.build(func, **{**build_options, "bounds": "runtime"})
    except Exception as exc:
        _BUILDS[key] = (func, exc)
        raise
    _BUILDS[key] = (func, library)
    while len(_BUILDS) > 128:
        _BUILDS.popitem(last=False)
    return library


_PARSED: "OrderedDict[int, tuple[Any, Any]]" = OrderedDict()


def reparsed(func: Any) -> Any:
    """func printed in the script format and parsed back (once per function object)."""
    import refcomp

    hit = _PARSED.get(id(func))
    if hit is not None and hit[0] is func:
        return hit[1]
    text = func.script()
    again = refcomp.from_source(text)
    if again.script() != text:
        raise AssertionError(f"{func.name}: print -> parse -> print is not a fixed point")
    _PARSED[id(func)] = (func, again)
    while len(_PARSED) > 128:
        _PARSED.popitem(last=False)
    return again


def _garbage_like(template: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """An output array pre-filled with random bytes (so an unwritten element shows)."""
    out = np.empty_like(template)
    raw = rng.integers(0, 256, out.nbytes, dtype=np.uint8)
    out.view(np.uint8).reshape(-1)[:] = raw
    return out


def check(func: Any, inputs: Sequence[Any], outputs: Sequence[np.ndarray], expected: Sequence[np.ndarray], *,
          dtype: str | Sequence[str], terms: int = 1, magnitude: Sequence[np.ndarray | None] | None = None,
          scalars: dict[str, Any] | None = None, backends: Sequence[str] = ("interpret", "script", "c"),
          build_options: dict[str, Any] | None = None, seed: int = 0) -> dict[str, list[np.ndarray]]:
    """Run func on (copies of) inputs + outputs with every backend and compare each output to numpy.

    `outputs` are templates (shape and dtype); each backend gets arrays filled with random garbage.
    Returns the outputs per backend, e.g. to compare them with each other.
    """
    import refcomp

    scalars = dict(scalars or {})
    dtypes = [dtype] * len(outputs) if isinstance(dtype, str) else list(dtype)
    magnitudes = list(magnitude) if magnitude is not None else [None] * len(outputs)
    rng = np.random.default_rng(seed)
    results: dict[str, list[np.ndarray]] = {}
    for backend in backends:
        if backend == "c" and not c_backend_enabled():
            continue
        args = [np.array(a, copy=True) if isinstance(a, np.ndarray) else a for a in inputs]
        outs = [_garbage_like(t, rng) for t in outputs]
        if backend == "interpret":
            refcomp.interpret(func, *args, *outs, **scalars)
        elif backend == "script":  # the program after a round trip through the script format
            refcomp.interpret(reparsed(func), *args, *outs, **scalars)
        elif backend == "c":
            compiled(func, **(build_options or {}))(*args, *outs, **scalars)
        else:
            raise ValueError(f"unknown backend {backend!r}")
        for k, (got, want) in enumerate(zip(outs, expected)):
            assert_close(got, want, dtypes[k], terms=terms, magnitude=magnitudes[k],
                         what=f"{backend}: output {k} of {getattr(func, 'name', 'func')}")
        for original, after in zip(inputs, args):
            if isinstance(original, np.ndarray):
                np.testing.assert_array_equal(after, original, err_msg=f"{backend}: an input was modified")
        results[backend] = outs
    return results


def evaluate_graph(func: Any, *args: Any) -> Any:
    """A graph function (its blocks of operator calls, before legalization) run on each operator's
    numpy reference, no kernel built: the oracle a graph pass's rewrite is compared against.  Its
    result as the function returns it (an array, or a tuple of them)."""
    from .ast.graph import Call, Constant, Op, Tuple

    env = dict(zip(func.params, args))

    def value(e):
        if isinstance(e, Constant):
            return np.asarray(e.array)
        if isinstance(e, Call) and isinstance(e.op, Op):
            from .graph.op import registry

            return registry.get(e.op.name).evaluate([value(a) for a in e.args], e.attrs)
        if isinstance(e, Tuple):
            return tuple(value(f) for f in e.fields)
        return env[e]

    for block in func.body.blocks:
        for b in block.bindings:
            env[b.var] = value(b.value)
    return value(func.body.body)
