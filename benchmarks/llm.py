"""LLM decoding benchmark: refcomp against PyTorch eager, and MagicDec against refcomp's own
autoregressive decoding, on the shipped byte-level Llama (src/refcomp/llm/data/byte-llama).

Cases (any B and S may be asked for with --cases; the defaults are the issue's):
* `decode_b{B}_s{S}_vs_torch`: greedy decoding of B prompts of S tokens.  Time per generated token
  (prefill excluded) of transformers' LlamaForCausalLM with its KV cache (the same weights, float32,
  --threads threads) divided by refcomp's.  Checked first: the logits of a prompt prefix agree.
* `magicdec_b{B}_s{S}`: greedy MagicDec self-speculation (refcomp.llm.speculative.magicdec_generate)
  against greedy autoregressive decoding of the same prompts with the same model, whose KV pages are
  `attention.speculative_kv_dtype`'s (bfloat16 where AMX computes both attention products, else
  float16; --kv-dtype overrides).  magicdec_generate
  plans on its own first tokens (a pilot of plain steps each draft predicts, then one round of every
  gamma), fixes K, and re-plans gamma, or plain steps, every few rounds from its running estimates;
  its decode time includes the pilot and the re-planning.  The entry carries alpha (measured in the
  run), the first choice's gamma, K and prediction (`predicted_prior`), `gammas_used`, `switches`,
  the `schedule` ([mode, rounds or steps], 0 plain steps), per mode its sequence-rounds, tokens,
  milliseconds and acceptance by position, and `predicted`: the analytic model's speedup from the
  run's own measurements (T_T per sequence-step from the autoregressive decoding; per mode its
  draft and verify seconds per sequence-round, and its sequence-rounds as tokens / Omega of its
  acceptance by position).  Checked: the two decodings emit the same tokens.  Ratio =
  autoregressive time per token / magicdec's.
* `memory_b{B}_s{S}`: the KV cache of B sequences of S tokens: bytes per token, the planned bytes
  (float16 pages, beside float32's), the peak resident memory after filling it and decoding a few
  steps, and that decode step's time.
The KV cache's bytes per token and the peak resident memory are printed after each magicdec case.

Prompts are the Python standard library's source text encoded by the byte tokenizer, each sequence
starting at a different offset.  The model is the compiled one (refcomp.llm.model) when the package
has it, else the numpy ReferenceLlama; the output says which.

    python benchmarks/llm.py --quick                      # two small cases
    python benchmarks/llm.py --cases magicdec_b32_s4096 --json
    python benchmarks/llm.py --cases magicdec_b32_s4096 --single-thread-cpu --json   # one thread, CPU time
    python benchmarks/llm.py --json                       # every default case (long)
"""
from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402,F401  (before numpy: it sets up OpenBLAS, OpenMP and malloc for the timings)

import argparse  # noqa: E402
import fnmatch  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import resource  # noqa: E402
import sysconfig  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from refcomp.llm import analytic  # noqa: E402
from refcomp.llm.generate import generate  # noqa: E402
from refcomp.llm.checkpoint import load_checkpoint  # noqa: E402
from refcomp.llm.loading import DEFAULT_MODEL, load_model  # noqa: E402
from refcomp.llm import speculative  # noqa: E402
from refcomp.loops.intrin.cpu import describe  # noqa: E402

DECODE_CASES = [f"decode_b{b}_s{s}_vs_torch" for s in (1024, 4096) for b in (1, 8, 32)]
MAGICDEC_CASES = [f"magicdec_b{b}_s{s}" for s in (1024, 4096, 8192) for b in (1, 8, 32, 64)]
MEMORY_CASES = ["memory_b64_s8192"]
QUICK_CASES = ["decode_b1_s256_vs_torch", "magicdec_b2_s512"]
CASE = re.compile(r"(decode|magicdec|memory)_b(\d+)_s(\d+)(_vs_torch)?")


def stdlib_text() -> np.ndarray:
    """The stdlib's .py sources as byte tokens (int64), sorted by path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks = []
    for path in sorted(root.rglob("*.py")):
        if "site-packages" in path.parts or "__pycache__" in path.parts:
            continue
        try:
            chunks.append(path.read_bytes())
        except OSError:
            continue
    return np.frombuffer(b"\n".join(chunks), dtype=np.uint8).astype(np.int64)


def prompts_from(text: np.ndarray, batch: int, length: int) -> list[np.ndarray]:
    starts = (np.arange(batch) * ((len(text) - length) // max(batch, 1))).astype(np.int64)
    return [text[s:s + length] for s in starts]


def torch_model(model_dir: Path, threads: int):
    import torch
    from transformers import LlamaConfig as HFConfig, LlamaForCausalLM

    torch.set_num_threads(threads)
    config, weights = load_checkpoint(model_dir)
    hf = LlamaForCausalLM(HFConfig(**{k: v for k, v in config.to_hf().items() if k != "architectures"}))
    state = {k: torch.from_numpy(np.asarray(v, dtype=np.float32).copy()) for k, v in weights.items()}
    hf.load_state_dict(state, strict=False)
    return hf.eval()


def torch_decode(hf, prompts: list[np.ndarray], new_tokens: int) -> tuple[np.ndarray, float, int]:
    """Greedy decoding with transformers' KV cache; (tokens, decode seconds, tokens decoded)."""
    import inspect

    import torch
    from transformers import DynamicCache

    # transformers 5 names the cache argument `cache`; earlier versions `past_key_values`
    key = "cache" if "cache" in inspect.signature(hf.forward).parameters else "past_key_values"
    ids = torch.from_numpy(np.stack(prompts))
    out = []
    with torch.inference_mode():
        cache = DynamicCache()
        logits = hf(input_ids=ids, use_cache=True, logits_to_keep=1, **{key: cache}).logits[:, -1]
        nxt = logits.argmax(-1, keepdim=True)
        out.append(nxt)
        start = time.perf_counter()
        for _ in range(new_tokens - 1):
            logits = hf(input_ids=nxt, use_cache=True, **{key: cache}).logits[:, -1]
            nxt = logits.argmax(-1, keepdim=True)
            out.append(nxt)
        seconds = time.perf_counter() - start
    return torch.cat(out, 1).numpy(), seconds, (new_tokens - 1) * len(prompts)


def check_against_torch(model, hf, prompts: list[np.ndarray]) -> float:
    """Max |logit difference| of refcomp and torch on the first 64 tokens of each prompt."""
    import torch

    head = np.stack([p[:64] for p in prompts[:4]])
    ours = model.forward(head, model.new_cache(head.shape[0], head.shape[1]))
    with torch.inference_mode():
        theirs = hf(input_ids=torch.from_numpy(head)).logits.numpy()
    return float(np.abs(ours - theirs).max())


def run_decode(model, hf, text, batch, length, new_tokens) -> dict:
    prompts = prompts_from(text, batch, length)
    diff = check_against_torch(model, hf, prompts)
    if diff > 1e-2:
        raise SystemExit(f"refcomp's logits differ from torch's by {diff:.3g}: not timing a wrong model")
    generate(model, prompts, 2)  # warm-up: the first decode step of a batch size builds its kernels
    ours = generate(model, prompts, new_tokens)
    torch_decode(hf, prompts, 2)  # the same warm-up for torch
    theirs, seconds, decoded = torch_decode(hf, prompts, new_tokens)
    agree = float(np.mean(ours.as_array() == theirs))
    r_ms = 1e3 * ours.decode_seconds / ours.decoded
    t_ms = 1e3 * seconds / decoded
    print(f"  refcomp {r_ms:.3f} ms/token ({ours.tokens_per_second:.0f} tokens/s), torch {t_ms:.3f} ms/token, "
          f"ratio {t_ms / r_ms:.2f}; max |logit diff| {diff:.2e}; greedy tokens agree {agree:.1%}", flush=True)
    return {"refcomp": r_ms, "baseline": t_ms, "unit": "ms/token", "ratio": t_ms / r_ms,
            "max_logit_diff": diff, "token_agreement": agree}


def predicted_from_run(result, t_row: float) -> tuple[float, float, dict]:
    """The speedup the analytic model predicts from a magicdec run's own measurements: per mode (the
    pilot, plain steps, each gamma) its rows, tokens, draft and verify seconds and acceptance by
    position; T_T per sequence-step t_row from the autoregressive decoding.  A gamma's sequence-rounds
    are its tokens / omega_by_position(its acceptance by position) (the model), costed at its measured
    draft and verify seconds per sequence-round; plain steps and the pilot's target steps at t_row,
    the pilot's draft forwards at their measured seconds.  Returns (predicted speedup, tokens per
    sequence-round the model gives for the rounds, per-mode summary)."""
    cost = 0.0
    tokens = rounds_model = 0.0
    summary = {}
    for label, mode in result.extra["modes"].items():
        entry = {"rows": mode["rows"], "tokens": mode["tokens"], "ms": 1e3 * mode["seconds"]}
        if label in ("pilot", "0"):
            cost += mode["tokens"] * t_row + mode["draft_seconds"]
        else:
            judged = np.maximum(np.asarray(mode["judged"]), 1)
            by_position = np.asarray(mode["accepted"]) / judged
            omega = float(analytic.omega_by_position(by_position))
            modelled = mode["tokens"] / omega
            cost += modelled * (mode["draft_seconds"] + mode["verify_seconds"]) / mode["rows"]
            tokens += mode["tokens"]
            rounds_model += modelled
            entry.update(alpha_by_position=[round(float(x), 4) for x in by_position], omega=omega)
        summary[label] = entry
    total = sum(mode["tokens"] for mode in result.extra["modes"].values())
    return total * t_row / cost, (tokens / rounds_model if rounds_model else float("nan")), summary


def run_magicdec(model, text, batch, length, new_tokens, budgets, gammas, clock=time.perf_counter) -> dict:
    prompts = prompts_from(text, batch, length)
    budgets = [k for k in budgets if k < length] or [max(2, length // 4)]
    auto = generate(model, prompts, new_tokens, clock=clock)
    fast = speculative.magicdec_generate(model, prompts, new_tokens, budgets=budgets, gammas=gammas, clock=clock)
    extra = fast.extra
    print(f"  plan ({speculative.schedule_text(extra['plan_schedule'])}: a plain step, a round of the pilot gamma with the smallest K, two plain "
          f"steps; unless no gamma could pay, a round per other K and one of each other gamma): {extra['reason']}; "
          f"{extra['plan_seconds']:.2f} s of the decode", flush=True)
    # the analytic model's inputs as the two decodings measured them: T_T per sequence-step from the
    # autoregressive decoding (every sequence in every step: equal prompts), per mode of the
    # speculative run its own draft and verify seconds per sequence-round and acceptance by position
    t_row = auto.decode_seconds / max(auto.steps * batch, 1)
    predicted, per_round_model, modes = predicted_from_run(fast, t_row)
    spec_rows = sum(m["rows"] for label, m in extra["modes"].items() if label not in ("pilot", "0"))
    spec_tokens = sum(m["tokens"] for label, m in extra["modes"].items() if label not in ("pilot", "0"))
    per_round = spec_tokens / spec_rows if spec_rows else float("nan")
    print(f"  schedule {speculative.schedule_text(extra['schedule'])}; {extra['switches']} switches; gammas used {extra['gammas_used']}; "
          f"tokens per round and sequence {per_round:.2f} (model {per_round_model:.2f})", flush=True)
    for label, mode in modes.items():
        name = {"pilot": "pilot", "0": "plain steps"}.get(label, f"gamma {label}")
        detail = (f", acceptance by position {mode['alpha_by_position']}" if "alpha_by_position" in mode else "")
        print(f"    {name}: {mode['rows']} sequence-{'steps' if label in ('pilot', '0') else 'rounds'}, "
              f"{mode['tokens']} tokens, {mode['ms']:.0f} ms{detail}", flush=True)
    a_ms = 1e3 * auto.decode_seconds / auto.decoded
    s_ms = 1e3 * fast.decode_seconds / fast.decoded
    identical = auto.tokens == fast.tokens
    print(f"  autoregressive {a_ms:.3f} ms/token, magicdec {s_ms:.3f} ms/token (pilot and re-planning included): "
          f"speedup {a_ms / s_ms:.2f} (predicted {predicted:.2f} from the runs' times and acceptance; at the plan "
          f"{extra['predicted']:.2f} with gamma {extra['gamma']}, K {extra['K']}, pilot alpha {extra['alpha_pilot']:.3f}; "
          f"alpha in the run {extra['alpha']:.3f}); identical tokens: {'yes' if identical else 'NO'}", flush=True)
    per_token = model.new_cache(1, 1).nbytes_per_token()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"  KV cache: {per_token} bytes per token, {per_token * batch * length / 2**20:.1f} MiB for B={batch}, "
          f"S={length}; peak resident memory so far {peak:.0f} MiB", flush=True)
    return {"refcomp": s_ms, "baseline": a_ms, "unit": "ms/token", "ratio": a_ms / s_ms,
            "declined": extra["declined"], "alpha": extra["alpha"], "gamma": extra["gamma"], "K": extra["K"],
            "predicted": predicted, "alpha_pilot": extra["alpha_pilot"], "predicted_prior": extra["predicted"],
            "gammas_used": extra["gammas_used"], "switches": extra["switches"],
            "schedule": [list(s) for s in extra["schedule"]], "plan_schedule": [list(s) for s in extra["plan_schedule"]],
            "modes": modes, "plan_ms": 1e3 * extra["plan_seconds"],
            "identical": identical, "kv_bytes_per_token": per_token, "peak_rss_mib": peak,
            "t_target_ms": 1e3 * t_row * batch, "tokens_per_round": per_round, "tokens_per_round_model": per_round_model,
            "rounds": extra["rounds"], "steps": extra["steps"]}


def run_memory(model, text, batch, length, steps: int = 3) -> dict:
    """The KV cache of `batch` sequences of `length` tokens: bytes per token, the planned bytes of
    the cache (float16 pages, and what float32 pages would take), and the peak resident memory after
    filling it and decoding `steps` tokens (timed: the decode step at that size).  The compiled
    model's cache is filled by writing its pages directly (a prefill of this size takes minutes and
    is not what is measured here); the reference model's by prefilling."""
    cache = model.new_cache(batch, length + steps)
    per_token = cache.nbytes_per_token()
    if hasattr(cache, "reserve"):
        from refcomp.llm.cache import PagedKVCache

        start = cache.reserve(length)
        rng = np.random.default_rng(0)
        used = np.unique(cache.table[cache.table >= 0])
        for pool in (cache.k_pool, cache.v_pool):  # every page written: resident, as after a prefill
            for layer in range(pool.shape[0]):  # in pieces of 64 pages: the temporaries stay small
                for first in range(0, len(used), 64):
                    part = used[first:first + 64]
                    values = 0.1 * rng.standard_normal(pool[layer, part].shape, dtype=np.float32)
                    if pool.dtype == np.uint16 and cache.dtype == "bfloat16":  # bit patterns (truncated)
                        values = (values.view(np.uint32) >> 16).astype(np.uint16)
                    pool[layer, part] = values
        cache.commit(length)
        assert int(start.max()) == 0
        planned = cache.nbytes()
        planned32 = PagedKVCache.planned_nbytes(model.config, batch, length + steps, page_size=cache.page_size)
    else:
        prompts = np.stack(prompts_from(text, batch, length))
        for s in range(0, length, 512):
            model.forward(prompts[:, s:s + 512], cache)
        planned = planned32 = per_token * batch * (length + steps)
    tokens = np.stack(prompts_from(text, batch, 1))
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        tokens = model.forward(tokens, cache)[:, -1].argmax(-1)[:, None]
        times.append(time.perf_counter() - t0)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    mib = 2 ** 20
    print(f"  KV cache: {per_token} bytes per token; planned {planned / mib:.0f} MiB for B={batch}, S={length} "
          f"(float32 pages: {planned32 / mib:.0f} MiB); peak resident memory {peak:.0f} MiB; decode step "
          f"{1e3 * min(times):.1f} ms (fastest of {steps})", flush=True)
    return {"refcomp": planned / mib, "baseline": planned32 / mib, "unit": "MiB of KV cache",
            "ratio": planned32 / planned, "kv_bytes_per_token": per_token, "peak_rss_mib": peak,
            "decode_step_ms": 1e3 * min(times)}


def select(patterns: str | None, quick: bool) -> list[str]:
    if quick:
        return QUICK_CASES
    if not patterns:
        return DECODE_CASES + MAGICDEC_CASES + MEMORY_CASES
    names = []
    for pat in patterns.split(","):
        pat = pat.strip()
        matched = [c for c in DECODE_CASES + MAGICDEC_CASES + MEMORY_CASES if fnmatch.fnmatch(c, pat)]
        if not matched and CASE.fullmatch(pat):
            matched = [pat]
        if not matched:
            raise SystemExit(f"--cases: {pat!r} names no case (decode_b{{B}}_s{{S}}_vs_torch, magicdec_b{{B}}_s{{S}}, "
                             f"memory_b{{B}}_s{{S}})")
        names += [m for m in matched if m not in names]
    return names


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK_CASES)}, 8 new tokens")
    parser.add_argument("--cases", help="comma-separated names or glob patterns (e.g. 'magicdec_b32_*')")
    parser.add_argument("--model", default=str(DEFAULT_MODEL))
    parser.add_argument("--reference", action="store_true", help="time the numpy reference model")
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--single-thread-cpu", action="store_true",
                        help="one thread, the magicdec cases timed in process CPU time (steadier on a shared machine)")
    parser.add_argument("--kv-dtype", choices=("float32", "float16", "bfloat16"),
                        help="the compiled model's KV pages for every case (default: float16, the model's; the magicdec cases "
                             "take speculative_kv_dtype's, bfloat16 where AMX applies, on both their sides)")
    parser.add_argument("--budgets", default="64,128,256,512", help="draft budgets K to choose from")
    parser.add_argument("--gammas", default="1,2,3,4,5,6", help="draft lengths gamma to choose from")
    args = parser.parse_args(argv)
    names = select(args.cases, args.quick)
    new_tokens = 8 if args.quick else args.new_tokens
    budgets = [int(x) for x in args.budgets.split(",")]
    clock = time.perf_counter
    if args.single_thread_cpu:
        args.threads, clock = 1, time.process_time
    gammas = [int(x) for x in args.gammas.split(",")]

    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(args.threads)
    except ImportError:
        pass
    print(f"ISA: {describe()}")
    options = {} if args.reference else {"threads": args.threads}
    models: dict = {}

    def model_for(kind_: str):
        """The model a case runs on: the default pages (float16) for the cases checked against
        torch, MagicDec's cases on the pages its verify is cheapest on (speculative_kv_dtype:
        bfloat16 with AMX), both of their sides on the same model; --kv-dtype for every case."""
        dtype = args.kv_dtype
        if dtype is None and kind_ == "magicdec" and not args.reference:
            from refcomp.llm.attention import speculative_kv_dtype
            from refcomp.llm.cache import DEFAULT_PAGE_SIZE
            from refcomp.llm.checkpoint import read_config

            dtype = speculative_kv_dtype(read_config(args.model).dim_head, DEFAULT_PAGE_SIZE)
        if dtype not in models:
            extra = {} if dtype is None or args.reference else {"kv_dtype": dtype}
            model, kind = load_model(args.model, compiled=not args.reference, **options, **extra)
            pages = f", {model.kv_dtype} KV pages" if hasattr(model, "kv_dtype") else ""
            print(f"model: {args.model} on the {kind} model ({'refcomp.llm.model' if kind == 'compiled' else 'numpy'}), "
                  f"{args.threads} threads{pages}", flush=True)
            models[dtype] = model
        return models[dtype]

    text = stdlib_text()
    hf = None
    cases = {}
    for name in names:
        kind_, b, s, _ = CASE.fullmatch(name).groups()
        batch, length = int(b), int(s)
        model = model_for(kind_)
        print(f"{name}:", flush=True)
        if kind_ == "decode":
            if hf is None:
                hf = torch_model(Path(args.model), args.threads)
            cases[name] = run_decode(model, hf, text, batch, length, new_tokens)
        elif kind_ == "memory":
            cases[name] = run_memory(model, text, batch, length)
        else:
            cases[name] = run_magicdec(model, text, batch, length, new_tokens, budgets, gammas, clock)
    if args.json:
        print(json.dumps({"cases": cases}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
