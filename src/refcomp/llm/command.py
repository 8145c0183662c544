"""`refcomp generate`: text generation from the command line, streaming tokens, then tokens/s."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..errors import ArgumentError, RefcompError
from . import tokenizer
from .cache import KV_DTYPES
from .generate import generate
from .checkpoint import checkpoint_config
from .loading import DEFAULT_MODEL, load_model
from .sampling import SamplingParams
from .speculative import MAGICDEC_GAMMAS, SpeculativeConfig, magicdec_generate, schedule_text, speculative_generate


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="refcomp generate",
        description="Generate text with a Llama-architecture model and the byte-level tokenizer; tokens are "
                    "printed as they come, then tokens/s on standard error.")
    p.add_argument("--model", default=None, metavar="DIR",
                   help="a Hugging Face checkpoint directory (config.json + model.safetensors) with a 256-token "
                        "byte vocabulary (default: the shipped byte-llama)")
    p.add_argument("--prompt", required=True, metavar="TEXT")
    p.add_argument("--max-new-tokens", type=int, default=200, metavar="N")
    p.add_argument("--temperature", type=float, default=0.0, metavar="T", help="0 (the default): greedy")
    p.add_argument("--top-k", type=int, default=0, metavar="K", help="0 (the default): no top-k cut")
    p.add_argument("--top-p", type=float, default=1.0, metavar="P", help="1.0 (the default): no nucleus cut")
    p.add_argument("--seed", type=int, default=0, metavar="S")
    p.add_argument("--speculative", nargs="?", const="fixed", choices=("fixed", "auto"), default=None,
                   help="MagicDec self-speculative decoding: with --gamma and --budget (fixed, the default), or "
                        "'auto': gamma and K chosen from measurements of the decode's own first tokens and "
                        "re-chosen as it runs, plain decoding where no speedup is predicted")
    p.add_argument("--gamma", type=int, default=4, metavar="G", help="draft tokens per round (default 4)")
    p.add_argument("--budget", type=int, default=256, metavar="K",
                   help="the draft's streaming KV budget in tokens, sinks + window (default 256)")
    p.add_argument("--kv-dtype", choices=KV_DTYPES, default=None,
                   help="the compiled model's KV cache pages (default float16; bfloat16 is what a speculative "
                        "verify is cheapest on where the CPU has AMX-BF16)")
    p.add_argument("--reference", action="store_true", help="run the numpy reference model, not the compiled one")
    return p


def _check_context(prompt: int, new_tokens: int, speculation: int, context: int) -> None:
    """ArgumentError unless the prompt, the new tokens and a speculative round's extra positions fit
    in the model's context (the decoders check the same; here it is before the model is built)."""
    if prompt + new_tokens + speculation > context:
        extra = f" and {speculation} positions of speculation" if speculation else ""
        room = context - new_tokens - speculation
        fits = f"at most {room} bytes of prompt fit" if room > 0 else "no prompt fits; lower --max-new-tokens"
        raise ArgumentError(f"--prompt is {prompt} tokens (bytes) long; with {new_tokens} new tokens{extra} it "
                            f"exceeds the model's context of {context} tokens (max_position_embeddings): {fits}")


def main(argv: list[str]) -> int:
    args = parser().parse_args(argv)
    try:
        params = SamplingParams(args.temperature, args.top_k, args.top_p)
        spec = SpeculativeConfig.with_budget(args.gamma, args.budget) if args.speculative == "fixed" else None
        # what needs no model is checked before the model is loaded and its kernels built (a minute cold)
        if args.max_new_tokens <= 0:
            raise ArgumentError(f"--max-new-tokens must be a positive integer, got {args.max_new_tokens}")
        if not args.prompt:
            raise ArgumentError("--prompt is empty; at least one character is needed")
        if args.kv_dtype is not None and args.reference:
            raise ArgumentError("--kv-dtype sets the compiled model's KV pages; the reference model keeps float32")
        path = Path(args.model) if args.model else DEFAULT_MODEL
        config = checkpoint_config(path)
        if config.vocab_size != tokenizer.VOCAB_SIZE:
            raise RefcompError(f"refcomp generate reads text with the byte-level tokenizer (256 tokens); "
                               f"this model's vocabulary has {config.vocab_size}")
        prompt = tokenizer.encode(args.prompt)
        speculation = {"fixed": args.gamma, "auto": max(MAGICDEC_GAMMAS)}.get(args.speculative, 0)
        _check_context(len(prompt), args.max_new_tokens, speculation, config.max_position_embeddings)
        options = {} if args.kv_dtype is None else {"kv_dtype": args.kv_dtype}
        if not args.reference:
            # the text starts only once the model is built: say why nothing shows yet
            print("refcomp generate: building the model's kernels first (a minute or two the first time; "
                  "later runs take them from the build cache)", file=sys.stderr, flush=True)
        model, kind = load_model(path, compiled=not args.reference, **options)
        prepare = getattr(model, "prepare", None)
        if prepare is not None:
            # the compiled model builds a call's functions on its first use: build the prompt's and a
            # decode step's now, so that the prefill and tokens/s printed below time the model only
            prepare((len(prompt), 1))
        decoder = tokenizer.StreamDecoder()

        def show(new: list[list[int]]) -> None:
            sys.stdout.write(decoder.feed(new[0]))
            sys.stdout.flush()

        sys.stdout.write(args.prompt)
        if args.speculative == "auto":
            result = magicdec_generate(model, [prompt], args.max_new_tokens, params=params, seed=args.seed,
                                       on_tokens=show)
        elif spec is None:
            result = generate(model, [prompt], args.max_new_tokens, params=params, seed=args.seed, on_tokens=show)
        else:
            result = speculative_generate(model, [prompt], args.max_new_tokens, spec=spec, params=params,
                                          seed=args.seed, on_tokens=show)
        sys.stdout.write(decoder.flush() + "\n")
        sys.stdout.flush()
    except RefcompError as exc:
        print(f"refcomp generate: {exc}", file=sys.stderr)
        return 1
    name = str(args.model) if args.model else DEFAULT_MODEL.name
    line = (f"{result.new_tokens} tokens, {result.tokens_per_second:.1f} tokens/s decoding "
            f"(prefill {result.prefill_seconds:.2f} s) with {name} on the {kind} model")
    if "reason" in result.extra:
        # the pilot's steps and rounds ran to make the decision, so they come before it: a plan
        # that declined still shows the speculative rounds it measured, as the pilot's
        pilot, after = (schedule_text(result.extra[key]) for key in ("plan_schedule", "schedule"))
        line += (f"; pilot before the decision: {pilot}; {result.extra['reason']}; after it: K {result.extra['K']}, "
                 f"schedule {after or 'none (no tokens left)'} ({result.extra['switches']} switches)")
    elif "rounds" in result.extra:
        line += (f"; speculative: gamma {result.extra['gamma']}, K {result.extra['K']}, "
                 f"acceptance {result.extra['alpha']:.2f}, {result.extra['rounds']} rounds")
    print(line, file=sys.stderr)
    return 0
