"""refcomp.export: a whole model as standalone C99 for embedded targets (spec/export.md).

    result = refcomp.export.export_c("model.onnx", "out/", bounds={"batch": 4})
    # out/: model.h model.c model_weights.c main.c test_data.h Makefile memory_report.txt ...
    # make -C out test [TARGET=arm-none-eabi | TARGET=aarch64-linux-gnu]

The model is built with portable schedules (no intrinsics) for strict C99, its graph function
compiled to one C function (spec/graph_c.md) whose intermediates live in one caller-owned arena
planned at the upper bounds of the symbolic dims; kernel scratch comes from the same arena, so the
code never allocates.  The command line is `refcomp export-c`.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..errors import BuildError
from .c_model import CModelWriter, check_name
from .harness import main_source, test_data
from .plan import ExportPlan, make_plan
from .report import code_size, memory_report
from .source import load_module, with_bounds
from .targets import CORTEX_M_LINKER_SCRIPT, CORTEX_M_STARTUP, makefile

__all__ = ["ExportResult", "export_c"]

WEIGHT_MODES = ("const", "blob")


@dataclass
class ExportResult:
    """What export_c wrote and the sizes it planned."""

    out_dir: Path
    files: list[str]
    arena_bytes: int
    weight_bytes: int
    code_bytes: int | None
    report: str
    inputs: list[np.ndarray] = field(default_factory=list)
    outputs: list[np.ndarray] = field(default_factory=list)
    plan: ExportPlan | None = None


# The most bytes of random inputs export_c records for the test harness by default (test_data.h
# holds them as C text, several times larger): bounds above it need inputs= of a smaller size.
MAX_RECORDED_BYTES = 64 << 20


def _recorded_inputs(plan: ExportPlan, inputs: Any, seed: int) -> list[np.ndarray]:
    names = [s.name for s in plan.inputs]
    if inputs is None:
        sizes = [(spec, int(np.prod(spec.max_dims, dtype=object))
                  * (2 if spec.dtype == "bfloat16" else np.dtype(spec.dtype).itemsize)) for spec in plan.inputs]
        if sum(size for _, size in sizes) > MAX_RECORDED_BYTES:
            spec, size = max(sizes, key=lambda item: item[1])
            raise BuildError(f"export_c: the test harness records random inputs at the bounds, and input "
                             f"{spec.name} of shape {tuple(spec.max_dims)} alone is {size} bytes (at most "
                             f"{MAX_RECORDED_BYTES} in all); lower the bounds, or record smaller inputs "
                             f"(API: inputs=...)")
        rng = np.random.default_rng(seed)
        out = []
        for spec in plan.inputs:
            shape = spec.max_dims
            if spec.dtype in ("float32", "float64", "float16"):
                out.append(rng.standard_normal(shape).astype(spec.dtype))
            elif spec.dtype == "bool":
                out.append(rng.integers(0, 2, shape).astype(bool))
            elif spec.dtype == "bfloat16":
                out.append((rng.standard_normal(shape).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16))
            else:
                out.append(rng.integers(0, 4, shape).astype(spec.dtype))
        return out
    if isinstance(inputs, Mapping):
        missing = [n for n in names if n not in inputs]
        if missing:
            raise BuildError(f"export_c: inputs has no array for {missing[0]!r} (inputs: {', '.join(names)})")
        inputs = [inputs[n] for n in names]
    inputs = list(inputs)
    if len(inputs) != len(names):
        raise BuildError(f"export_c: expected {len(names)} recorded inputs ({', '.join(names)}), got {len(inputs)}")
    out = []
    for spec, value in zip(plan.inputs, inputs):
        array = np.ascontiguousarray(value)
        want = np.dtype("uint16") if spec.dtype == "bfloat16" else np.dtype(spec.dtype)
        if array.dtype != want or array.ndim != len(spec.dims):
            raise BuildError(f"export_c: recorded input {spec.name}: expected {spec.dtype} of rank {len(spec.dims)}, "
                             f"got {array.dtype} of shape {array.shape}")
        if any(d > m for d, m in zip(array.shape, spec.max_dims)):
            raise BuildError(f"export_c: recorded input {spec.name} of shape {array.shape} is above the bounds "
                             f"(at most {spec.max_dims})")
        out.append(array)
    return out


def export_c(model: Any, out_dir: str | os.PathLike, bounds: Mapping[str, int] | None = None, *,
             weights: str = "const", openmp: bool = False, inputs: Sequence[np.ndarray] | Mapping | None = None,
             name: str = "model", seed: int = 0, schedule: bool = True, quiet: bool = True) -> ExportResult:
    """Write model as standalone C99 into out_dir (created if needed); see the module docstring.

    model: an IRModule or graph Function (main), or the path of an .onnx or script file.
    bounds: {symbolic dim: upper bound}, added to those the model declares; every symbolic dim of
    the inputs needs one.  weights: "const" (const arrays in <name>_weights.c) or "blob"
    (<name>_weights.bin, loaded by the caller).  openmp: keep the kernels' parallel loops as
    OpenMP pragmas (host and aarch64 builds).  inputs: the recorded inputs of the test harness
    (default: random at the bounds, from seed).  name: the prefix of the API and the files.
    schedule: False exports plain loop nests (no default schedules): the least working memory
    (no packed weight copies in kernel scratch) and code, slower on convolutions.
    """
    if weights not in WEIGHT_MODES:
        raise BuildError(f"export_c: weights must be one of {', '.join(WEIGHT_MODES)}, got {weights!r}")
    check_name(name)
    out = Path(out_dir)
    if out.exists() and not out.is_dir():
        raise BuildError(f"export_c: the output directory {str(out)!r} is an existing file; give a directory "
                         f"(it is created if needed)")
    mod, used = with_bounds(load_module(model), bounds)
    plan = make_plan(mod, used, openmp=bool(openmp), schedule=schedule)
    writer = CModelWriter(plan, name, weights)
    recorded = _recorded_inputs(plan, inputs, seed)
    from ..runtime.vm import VirtualMachine

    result = VirtualMachine(plan.executable, executor="vm")["main"](*recorded)
    outputs = [np.asarray(r) for r in (result if isinstance(result, (tuple, list)) else [result])]
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise BuildError(f"export_c: cannot create the output directory {str(out)!r}: {error.strerror}") from error
    files = {f"{name}.h": writer.header(), f"{name}.c": writer.source(),
             "main.c": main_source(plan, writer), "test_data.h": test_data(plan, recorded, outputs),
             "Makefile": makefile(name, weights == "blob", bool(openmp)),
             "cortex_m_startup.c": CORTEX_M_STARTUP, "cortex_m.ld": CORTEX_M_LINKER_SCRIPT}
    if weights == "const":
        files[f"{name}_weights.c"] = writer.weights_source()
    for file, text in files.items():
        (out / file).write_text(text, encoding="utf-8")
    written = sorted(files)
    if weights == "blob":
        (out / f"{name}_weights.bin").write_bytes(writer.weights_blob())
        written.append(f"{name}_weights.bin")
    sizes = code_size(out, name)
    report = memory_report(plan, name, sizes)
    (out / "memory_report.txt").write_text(report, encoding="utf-8")
    written.append("memory_report.txt")
    if not quiet:
        print(report, end="")
    return ExportResult(out, sorted(written), plan.arena_bytes, plan.weight_bytes,
                        sizes["text"] if sizes else None, report, recorded, outputs, plan)
