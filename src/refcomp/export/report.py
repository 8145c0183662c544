"""The memory report of an export: arena bytes (intermediates + kernel scratch, at the bounds),
weight bytes, code size (`size` of the model's object compiled for the host) and, per kernel, its
calls, stack arrays and arena scratch."""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from .plan import ExportPlan
from .targets import STRICT


def code_size(out_dir: Path, name: str, cc: str | None = None, opt: str = "-O2") -> dict[str, int] | None:
    """text/data/bss of <name>.c compiled for the host (None when no compiler or `size` is found)."""
    cc = cc or os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc or not shutil.which("size"):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        obj = Path(tmp) / f"{name}.o"
        done = subprocess.run([cc, *STRICT.split(), opt, "-c", "-o", str(obj), str(out_dir / f"{name}.c")],
                              capture_output=True, text=True)
        if done.returncode != 0:
            return None
        out = subprocess.run(["size", str(obj)], capture_output=True, text=True)
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or len(lines) < 2:
        return None
    text, data, bss = (int(v) for v in lines[1].split()[:3])
    return {"text": text, "data": data, "bss": bss}


def memory_report(plan: ExportPlan, name: str, sizes: dict[str, int] | None) -> str:
    lines = [f"memory report of {name} (at the declared bounds: "
             f"{', '.join(f'{k} <= {v}' for k, v in plan.size_vars) or 'no symbolic dims'})",
             f"  arena            {plan.arena_bytes:>12} bytes  (intermediates {plan.graph_arena_bytes}, "
             f"kernel scratch {plan.scratch_bytes})",
             f"  weights          {plan.weight_bytes:>12} bytes  ({len(plan.constants)} tensors, const data)"]
    if sizes is None:
        lines.append("  code             (not measured: no host C compiler or `size`)")
    else:
        lines.append(f"  code             {sizes['text']:>12} bytes  (`size` of {name}.o for the host, -O2: "
                     f"text {sizes['text']}, data {sizes['data']}, bss {sizes['bss']})")
    inputs = sum(s.max_elems * _itemsize(s.dtype) for s in plan.inputs)
    outputs = sum(s.max_elems * _itemsize(s.dtype) for s in plan.outputs)
    lines.append(f"  inputs, outputs  {inputs:>12} + {outputs} bytes at the bounds (caller's buffers)")
    lines.append(f"  kernels          {len(plan.kernels)} ({sum(k.calls for k in plan.kernels)} calls)")
    width = max((len(k.name) for k in plan.kernels), default=6)
    lines.append(f"    {'kernel':<{width}}  calls  stack bytes  arena scratch bytes")
    for k in plan.kernels:
        lines.append(f"    {k.name:<{width}}  {k.calls:>5}  {k.stack_bytes:>11}  {k.scratch_bytes:>19}")
    return "\n".join(lines) + "\n"


def _itemsize(dtype: str) -> int:
    import numpy as np

    return 2 if dtype == "bfloat16" else np.dtype(dtype).itemsize
