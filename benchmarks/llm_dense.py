"""The dense layers of an LLM decode / draft / verify step: refcomp's model build (every layer's
weights graph constants, the products on refcomp's GEMM on panels packed once at load) against the
same graph functions with the weights as arguments, the products on OpenBLAS's sgemm (which packs
each weight on every call): the route of calls of more than FEW_ROWS rows before packing once.

The shipped byte-level Llama (src/refcomp/llm/data/byte-llama: 4 layers, hidden 256, 8 query and
2 key/value heads of 32, MLP 688); per layer attn_in, attn_out and mlp_down, then head, on `rows`
token rows (B = 32 at T = 1 / 4 is 32 / 128 rows), each call timed on its own (hot: the weights in
cache), and the whole dense part of a step (the sum). Checked first: the two builds' logits agree.
One thread by default; CPU time of this thread (--threads 1), wall time otherwise; best of
alternating passes (harness.interleaved_best_times).

    python benchmarks/llm_dense.py                        # rows 1, 32, 128, 160
    python benchmarks/llm_dense.py --rows 32,128 --json
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (before numpy)

import argparse  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from refcomp.llm import model as llm_model  # noqa: E402
from refcomp.llm.loading import DEFAULT_MODEL, load_model  # noqa: E402
from refcomp.loops.intrin.cpu import describe  # noqa: E402


def sgemm_functions(model) -> dict:
    """The dense functions with the weights as arguments, products on sgemm (graph.build's default)."""
    ex = llm_model._build(llm_model.dense_module(model.config), "c", blas=True)
    fns = ex.compiled
    layers = [{name: llm_model._with_weights(fns[name], tuple(w[k] for k in llm_model.LAYER_WEIGHTS[name]))
               for name in llm_model.LAYER_FUNCTIONS} for w in model._layers]
    head = llm_model._with_weights(fns["head"], tuple(model._head[k] for k in llm_model.HEAD_WEIGHTS))
    return {"layers": layers, "head": head}


def calls(fns: dict, x, cos, sin, attn) -> dict:
    """name -> a function making that call for every layer (the inputs fixed, so each is hot)."""
    layers = fns["layers"]
    h_act = [layer["attn_out"](x, attn) for layer in layers]
    return {"attn_in": lambda: [layer["attn_in"](x, cos, sin) for layer in layers],
            "attn_out": lambda: [layer["attn_out"](x, attn) for layer in layers],
            "mlp_down": lambda: [layer["mlp_down"](*ha) for layer, ha in zip(layers, h_act)],
            "head": lambda: fns["head"](x)}


def step(fns: dict, x, cos, sin, attn):
    for layer in fns["layers"]:
        layer["attn_in"](x, cos, sin)
        x = layer["mlp_down"](*layer["attn_out"](x, attn))
    return fns["head"](x)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--rows", default="1,32,128,160")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--passes", type=int, default=30)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    print(f"ISA: {describe()}")
    model, _ = load_model(args.model, threads=args.threads)
    start = time.perf_counter()
    ours = model._functions(llm_model.FEW_ROWS + 1)
    print(f"model build (every layer's weights constants): {time.perf_counter() - start:.1f} s; "
          f"products on sgemm: {model._many_calls_blas}")
    theirs = sgemm_functions(model)
    clock = time.thread_time if args.threads == 1 else time.perf_counter
    c = model.config
    rng = np.random.default_rng(0)
    cases = {}
    for rows in (int(r) for r in args.rows.split(",")):
        x = rng.standard_normal((rows, 1, c.hidden_size)).astype(np.float32)
        angles = rng.uniform(0, 6.3, (rows, 1, 1, c.dim_head)).astype(np.float32)
        cos, sin = np.cos(angles), np.sin(angles)
        attn = rng.standard_normal((rows, 1, c.num_attention_heads * c.dim_head)).astype(np.float32)
        got, want = step(ours, x, cos, sin, attn), step(theirs, x, cos, sin, attn)
        err = float(np.abs(got - want).max())
        if err > 1e-3 * max(1.0, float(np.abs(want).max())):
            raise SystemExit(f"rows {rows}: the builds' logits differ by {err}")
        ours_calls, their_calls = calls(ours, x, cos, sin, attn), calls(theirs, x, cos, sin, attn)
        print(f"rows {rows} (logits agree to {err:.1e}); ms for all {c.num_hidden_layers} layers, "
              f"{'thread CPU' if args.threads == 1 else 'wall'} time, best of {args.passes}:")
        for part in list(ours_calls) + ["step"]:
            fns = ([lambda: step(ours, x, cos, sin, attn), lambda: step(theirs, x, cos, sin, attn)] if part == "step"
                   else [ours_calls[part], their_calls[part]])
            mine, base = harness.interleaved_best_times(fns, args.passes, clock=clock)
            print(f"  {part:9s} refcomp {1e3 * mine:7.3f}  sgemm route {1e3 * base:7.3f}  x{base / mine:.2f}")
            if part == "step":
                cases[f"dense_step_rows{rows}"] = {"refcomp": 1e3 * mine, "baseline": 1e3 * base, "unit": "ms",
                                                   "ratio": base / mine}
    if args.json:
        print(json.dumps({"cases": cases}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
