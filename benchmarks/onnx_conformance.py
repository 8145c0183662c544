"""ONNX backend node tests through refcomp: import, compile, run in the VM, compare with the expected outputs.

The cases ship inside the onnx package (onnx/backend/test/data/node/*/model.onnx plus
test_data_set_0/{input,output}_*.pb).  A case's op type is its (single) node's; an `_expanded`
case counts toward the op type of its base case.  An op type passes when every one of its cases
passes.  Cases whose graph inputs or outputs are sequences or optionals are skipped.

Scoring is strict: every graph input is a run-time argument, shape operands (axes, pads, scales,
sizes, k, split, starts/ends, Range bounds...) included; nothing is pinned to the case's values.
Comparison: output count, then shape, then dtype (equal), then values (float32/64: rtol 1e-3,
atol 1e-5; float16: rtol 4e-3, atol 1e-3, a few units in the last place of its 11-bit mantissa;
bfloat16: rtol 2e-2, atol 1e-2; float8/float4: exact; NaN equal to NaN; everything else exact).
Tensors travel in the form refcomp's runtime stores them (spec/graph.md, "Element types"):
bfloat16 as its uint16 bit patterns, float8/float4 as uint8 bit patterns, int4/uint4/int2/uint2
one value per int8/uint8, strings as object arrays of str; an output's dtype is equal when it is
the storage type of the expected element type.

With --specialize a case that fails to import because an input feeds a shape operand is retried
with its integer inputs fixed to the case's values; such passes are a second, "pinned" column and
never count toward the strict headline.

    python benchmarks/onnx_conformance.py                 # table per op type, then the strict totals
    python benchmarks/onnx_conformance.py --json          # last line: {"op_types_passing": N, ...}
    python benchmarks/onnx_conformance.py --ops Relu,Add  # only those op types
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
from collections import defaultdict

import numpy as np


def node_test_root() -> str:
    import onnx

    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data", "node")


def case_op_types(root: str) -> dict[str, str]:
    """case name -> op type (expanded cases map to their base case's op type)."""
    import onnx

    base: dict[str, str] = {}
    names = sorted(os.listdir(root))
    for name in names:
        if "_expanded" in name:
            continue
        model = onnx.load(os.path.join(root, name, "model.onnx"), load_external_data=False)
        base[name] = model.graph.node[-1].op_type if model.graph.node else "?"
    result = {}
    for name in names:
        if "_expanded" in name:
            stem = name.split("_expanded")[0]
            if stem in base:
                result[name] = base[stem]
                continue
            model = onnx.load(os.path.join(root, name, "model.onnx"), load_external_data=False)
            result[name] = model.graph.node[-1].op_type if model.graph.node else "?"
        else:
            result[name] = base[name]
    return result


def load_tensors(folder: str, prefix: str) -> list[np.ndarray]:
    import onnx
    from onnx import numpy_helper

    tensors = []
    for path in sorted(glob.glob(os.path.join(folder, f"{prefix}_*.pb")), key=lambda p: int(p.rsplit("_", 1)[1][:-3])):
        proto = onnx.TensorProto()
        with open(path, "rb") as f:
            proto.ParseFromString(f.read())
        tensors.append(numpy_helper.to_array(proto))
    return tensors


TOLERANCE = {"float16": (4e-3, 1e-3), "bfloat16": (2e-2, 1e-2)}  # (rtol, atol) where not float32's


def _runtime_array(value: np.ndarray) -> np.ndarray:
    """The array as refcomp's runtime takes it (bfloat16 as its uint16 bits; float8/float4 as uint8
    bits, int4/int2 one value per int8 and strings as str objects: refcomp.ast.dtype.storage_array)."""
    from refcomp.ast.dtype import storage_array

    return value.view(np.uint16) if value.dtype.name == "bfloat16" else storage_array(value)


def _typed_output(actual: np.ndarray, expected: np.ndarray) -> np.ndarray:
    """refcomp's storage-form output read as the expected array's storage-only element type
    (float8/float4 bits, int4/int2 values, str objects) when its storage type is that type's."""
    from refcomp.ast.dtype import dtype as to_dtype, typed_array

    try:
        wanted = to_dtype(expected.dtype)
    except ValueError:
        return actual
    if wanted.is_storage_only and not wanted.is_string and actual.dtype == wanted.numpy():
        return typed_array(actual, wanted.name)
    return actual


def compare(actual, expected) -> str | None:
    """None when actual matches expected, else the reason."""
    if len(actual) != len(expected):
        return f"{len(actual)} outputs, expected {len(expected)}"
    for k, (a, e) in enumerate(zip(actual, expected)):
        a, e = np.asarray(a), np.asarray(e)
        if e.dtype.name == "bfloat16" and a.dtype == np.uint16:
            a = a.view(e.dtype)
        a = _typed_output(a, e)
        if e.dtype.kind in "OUS":  # strings: compared as str, whatever their numpy spelling
            e = _runtime_array(e)
            if a.dtype.kind in "US":
                a = _runtime_array(a)
        if a.shape != e.shape:
            return f"output {k}: shape {a.shape}, expected {e.shape}"
        if a.dtype != e.dtype:
            return f"output {k}: dtype {a.dtype}, expected {e.dtype}"
        if e.dtype.name.startswith(("float8", "float4")):  # minifloats: the same values exactly, NaN = NaN
            if not np.array_equal(a.astype(np.float64), e.astype(np.float64), equal_nan=True):
                return f"output {k}: values differ"
        elif e.dtype.kind == "f" or e.dtype.name == "bfloat16":
            rtol, atol = TOLERANCE.get(e.dtype.name, (1e-3, 1e-5))
            a, e = a.astype(np.float64), e.astype(np.float64)
            if not np.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True):
                return f"output {k}: values differ (max abs error {np.nanmax(np.abs(a - e)):.3g})"
        elif not np.array_equal(a, e):
            return f"output {k}: values differ"
    return None


def run_case(folder: str, target: str = "c", specialize: bool = False) -> tuple[str, str]:
    """(status, detail) for one case: status is pass, import, build, run, wrong or skip.

    specialize: when import fails because an integer input feeds a shape/axes/pads operand, import
    again with the integer inputs fixed to the case's values (status "pass_specialized" if it then passes);
    the first input is fixed only when it is a scalar or, as a last resort, a short integer vector.
    """
    import onnx

    import refcomp
    from refcomp.frontend import from_onnx

    model = onnx.load(os.path.join(folder, "model.onnx"))
    if any(not vi.type.HasField("tensor_type") for vi in list(model.graph.input) + list(model.graph.output)):
        return "skip", "sequence or optional input/output"
    data = os.path.join(folder, "test_data_set_0")
    inputs, expected = load_tensors(data, "input"), load_tensors(data, "output")
    initializers = {t.name for t in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in initializers]
    fixed: dict = {}
    try:
        mod = from_onnx(model)
    except Exception as exc:  # the importer's own errors, and any crash, are an import failure
        if not (specialize and "known at import time" in str(exc)):
            return "import", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        # integer inputs, and tiny ones (a float depth or pad value), are the shape-like operands
        # (the first input, the data, only when it is a scalar, as Range's start is)
        fixed = {vi.name: value for k, (vi, value) in enumerate(zip(graph_inputs, inputs))
                 if value.ndim == 0 or (k > 0 and (value.dtype.kind in "iu" or (value.ndim <= 1 and value.size <= 8)))}
        try:
            mod = from_onnx(model, const_inputs=fixed)
        except Exception as exc2:
            # last, a first input that is itself a short integer vector (ConstantOfShape's shape)
            first = graph_inputs[0].name if graph_inputs else None
            if not ("known at import time" in str(exc2) and first and first not in fixed
                    and inputs[0].dtype.kind in "iu" and inputs[0].ndim == 1 and inputs[0].size <= 8):
                return "import", f"{type(exc2).__name__}: {str(exc2).splitlines()[0]}"
            fixed[first] = inputs[0]
            try:
                mod = from_onnx(model, const_inputs=fixed)
            except Exception as exc3:
                return "import", f"{type(exc3).__name__}: {str(exc3).splitlines()[0]}"
    try:
        ex = refcomp.graph.build(mod, target=target)
    except Exception as exc:
        return "build", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    try:
        args = [_runtime_array(value) for vi, value in zip(graph_inputs, inputs) if vi.name not in fixed]
        out = refcomp.runtime.VirtualMachine(ex)["main"](*args)
    except Exception as exc:
        return "run", f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    out = list(out) if isinstance(out, tuple) else [out]
    reason = compare(out, expected)
    if reason is not None:
        return "wrong", reason
    return ("pass_specialized", "integer inputs fixed") if fixed else ("pass", "")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="ONNX backend node tests through refcomp")
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    parser.add_argument("--ops", default="", help="comma-separated op types to run (default: all)")
    parser.add_argument("--target", default="c", choices=["c", "interpret"])
    parser.add_argument("--claimed-only", action="store_true",
                        help="only run op types the importer converts or expands (others count as failing)")
    parser.add_argument("--verbose", "-v", action="store_true", help="print every failing case")
    parser.add_argument("--write-passing", default="", metavar="PATH",
                        help="write the names of passing cases (one per line) to PATH")
    parser.add_argument("--specialize", action="store_true",
                        help="also retry cases whose integer inputs feed shape operands with those inputs fixed "
                             "(a second, pinned column; the headline stays strict)")
    args = parser.parse_args(argv)
    from refcomp.frontend.onnx import supported_ops
    from refcomp.frontend.onnx.functions import has_function_body

    root = node_test_root()
    op_of = case_op_types(root)
    wanted = set(filter(None, args.ops.split(",")))
    claimed = set(supported_ops())
    per_op: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    failures = []
    passed_cases = []
    start = time.perf_counter()
    for name, op_type in sorted(op_of.items()):
        if wanted and op_type not in wanted:
            continue
        if args.claimed_only and op_type not in claimed and not has_function_body(op_type):
            status, detail = "import", "not claimed by the importer"
        else:
            status, detail = run_case(os.path.join(root, name), args.target, args.specialize)
        per_op[op_type][status] += 1
        if status == "pass":
            passed_cases.append(name)
        if status not in ("pass", "pass_specialized", "skip"):
            failures.append((name, status, detail))
    elapsed = time.perf_counter() - start
    good = ("pass", "pass_specialized", "skip")
    strict = sorted(o for o, c in per_op.items() if c.get("pass", 0) and all(k in ("pass", "skip") for k in c))
    pinned = sorted(o for o, c in per_op.items() if (c.get("pass", 0) or c.get("pass_specialized", 0))
                    and all(k in good for k in c))
    tests_total = sum(sum(c.values()) - c.get("skip", 0) for c in per_op.values())
    strict_passed = sum(c.get("pass", 0) for c in per_op.values())
    pinned_passed = strict_passed + sum(c.get("pass_specialized", 0) for c in per_op.values())
    print(f"{'op type':<28} {'pass':>5} {'pinned':>6} {'fail':>5} {'skip':>5}")
    for o in sorted(per_op):
        c = per_op[o]
        fail = sum(v for k, v in c.items() if k not in good)
        mark = "  ok" if o in strict else "  ok (pinned)" if o in pinned else ""
        print(f"{o:<28} {c.get('pass', 0):>5} {c.get('pass_specialized', 0):>6} {fail:>5} {c.get('skip', 0):>5}{mark}")
    if args.verbose:
        for name, status, detail in failures:
            print(f"  {name}: {status}: {detail}")
    print(f"strict: op types with every case passing {len(strict)} of {len(per_op)}; "
          f"cases passed {strict_passed} of {tests_total} ({elapsed:.0f} s)")
    if args.specialize:
        print(f"pinned (integer inputs fixed where import needed them): op types {len(pinned)}, "
              f"cases {pinned_passed}")
    if args.write_passing:
        with open(args.write_passing, "w") as f:
            f.write("".join(f"{n}\n" for n in passed_cases))
    if args.json:
        summary = {"op_types_passing": len(strict), "tests_passed": strict_passed, "tests_total": tests_total,
                   "per_op": {o: dict(c) for o, c in sorted(per_op.items())}}
        if args.specialize:
            summary["pinned"] = {"op_types_passing": len(pinned), "tests_passed": pinned_passed}
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
