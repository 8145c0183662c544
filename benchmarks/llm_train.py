"""Train the small byte-level Llama that refcomp.llm ships (src/refcomp/llm/data/byte-llama/).

The corpus is the Python standard library's own source (every machine with Python has it offline):
every `.py` file under the running interpreter's stdlib directory, sorted by path, test packages
left out, concatenated as UTF-8 bytes.  The last 2% of the bytes are held out for the validation loss.
The vocabulary is the 256 byte values, so token = byte (refcomp.llm.tokenizer).

The model is transformers' `LlamaForCausalLM`, so parameter names are Hugging Face's.  Training is
seeded (torch, numpy and the batch order) and single-threaded by default.  The result is written as
`config.json` + `model.safetensors` (fp16) + `README.md` with the command, data, steps and losses.

    python benchmarks/llm_train.py --steps 280 --out src/refcomp/llm/data/byte-llama
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

CONFIG = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 256, "hidden_size": 256, "intermediate_size": 688, "num_hidden_layers": 4,
    "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
    "max_position_embeddings": 16384, "rms_norm_eps": 1e-5, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
    "bos_token_id": None, "eos_token_id": None, "pad_token_id": None, "torch_dtype": "float16",
}


def stdlib_corpus() -> tuple[bytes, int]:
    """The stdlib's .py sources (tests excluded), sorted by relative path, and the number of files."""
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).parts
        if any(part in ("test", "tests", "idle_test", "site-packages", "__pycache__") for part in rel):
            continue
        files.append(path)
    chunks = []
    for path in files:
        try:
            chunks.append(path.read_bytes())
        except OSError:
            continue
    return b"\n".join(chunks), len(files)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=280)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--max-minutes", type=float, default=25.0,
                        help="stop early (and say so in the README) when training takes longer; 0: no limit")
    parser.add_argument("--stop-at", type=int, default=0,
                        help="stop after this many steps of the --steps schedule (0: run it all); reproduces "
                             "a run that --max-minutes stopped")
    parser.add_argument("--init", default=None, metavar="DIR",
                        help="start from this checkpoint (e.g. to extend a model trained on short sequences "
                             "to long ones); its README is kept as the earlier stage")
    parser.add_argument("--out", default="src/refcomp/llm/data/byte-llama")
    args = parser.parse_args(argv)

    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)

    corpus, n_files = stdlib_corpus()
    data = np.frombuffer(corpus, dtype=np.uint8)
    split = int(len(data) * 0.98)
    train, valid = data[:split], data[split:]
    print(f"corpus: {n_files} files, {len(data)} bytes (python {sys.version.split()[0]})", flush=True)

    hf_config = LlamaConfig(**{k: v for k, v in CONFIG.items() if k not in ("architectures", "torch_dtype")})
    model = LlamaForCausalLM(hf_config)
    earlier = None
    if args.init:
        from safetensors.torch import load_file

        state = {k: v.to(torch.float32) for k, v in load_file(str(Path(args.init) / "model.safetensors")).items()}
        model.load_state_dict(state, strict=False)
        readme = Path(args.init) / "README.md"
        earlier = readme.read_text() if readme.is_file() else None
    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters: {n_params}", flush=True)
    decay = [p for n, p in model.named_parameters() if p.ndim >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95))
    warmup = max(1, args.steps // 20)

    def lr_at(step: int) -> float:
        if step < warmup:
            return args.lr * (step + 1) / warmup
        progress = (step - warmup) / max(1, args.steps - warmup)
        return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))

    def batch_of(source: np.ndarray, starts: np.ndarray) -> torch.Tensor:
        rows = np.stack([source[s:s + args.seq + 1] for s in starts]).astype(np.int64)
        return torch.from_numpy(rows)

    def valid_loss() -> float:
        model.eval()
        vrng = np.random.default_rng(1234)
        starts = vrng.integers(0, len(valid) - args.seq - 1, size=32)
        with torch.no_grad():
            rows = batch_of(valid, starts)
            logits = model(input_ids=rows[:, :-1]).logits
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                     rows[:, 1:].reshape(-1))
        model.train()
        return float(loss)

    start = time.time()
    steps_done = 0
    losses: list[float] = []
    model.train()
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = lr_at(step)
        rows = batch_of(train, rng.integers(0, len(train) - args.seq - 1, size=args.batch))
        logits = model(input_ids=rows[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(float(loss.detach()))
        steps_done = step + 1
        elapsed = time.time() - start
        if step % 25 == 0 or step == args.steps - 1:
            print(f"step {step} loss {np.mean(losses[-25:]):.4f} lr {lr_at(step):.2e} {elapsed:.0f}s", flush=True)
        if step % 200 == 199:
            save(model, args, steps_done, losses, None, n_files, len(data), n_params, elapsed, earlier, partial=True)
        if args.stop_at and steps_done >= args.stop_at:
            break
        if 0 < args.max_minutes * 60 < elapsed:
            print(f"stopping after {steps_done} steps: --max-minutes {args.max_minutes} reached", flush=True)
            break
    vloss = valid_loss()
    print(f"validation loss {vloss:.4f} nats/byte ({vloss / math.log(2):.3f} bits/byte)", flush=True)
    save(model, args, steps_done, losses, vloss, n_files, len(data), n_params, time.time() - start, earlier,
         partial=False)
    return 0


def save(model, args, steps_done, losses, vloss, n_files, n_bytes, n_params, elapsed, earlier, *,
         partial: bool) -> None:
    import torch
    from safetensors.torch import save_file

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {name: t.detach().to(torch.float16).contiguous() for name, t in model.state_dict().items()}
    save_file(tensors, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(CONFIG, indent=2) + "\n")
    final = float(np.mean(losses[-50:])) if losses else float("nan")
    command = "python benchmarks/llm_train.py " + " ".join(
        f"--{k.replace('_', '-')} {v}" for k, v in vars(args).items())
    readme = f"""# byte-llama

A byte-level Llama-architecture model trained by refcomp's `benchmarks/llm_train.py`, shipped so that
speculative-decoding acceptance rates and speedups are measured on a model that has learned something.

- Architecture: LlamaForCausalLM, {CONFIG['num_hidden_layers']} layers, hidden {CONFIG['hidden_size']},
  {CONFIG['num_attention_heads']} heads ({CONFIG['num_key_value_heads']} key/value heads, head_dim {CONFIG['head_dim']}),
  intermediate {CONFIG['intermediate_size']}, vocabulary 256 (token = byte), untied head,
  max_position_embeddings {CONFIG['max_position_embeddings']}; {n_params} parameters; stored in fp16.
- Data: the Python {sys.version.split()[0]} standard library's `.py` sources (test packages excluded), {n_files} files,
  {n_bytes} bytes, sorted by path and concatenated; last 2% held out.
- Training: {steps_done} steps{' (interrupted checkpoint)' if partial else ''}{'' if steps_done == args.steps else f' of a {args.steps}-step schedule'} of {args.batch} x {args.seq} bytes,
  AdamW (lr {args.lr}, warmup then cosine to 10%, weight decay 0.1, clip 1.0), seed {args.seed},
  {args.threads} CPU thread(s), {elapsed / 60:.1f} minutes.
- Final training loss (mean of the last 50 steps): {final:.4f} nats/byte.
- Validation loss (32 held-out windows of {args.seq} bytes): {'n/a' if vloss is None else f'{vloss:.4f} nats/byte ({vloss / math.log(2):.3f} bits/byte)'}.

Command{'' if steps_done == args.steps or args.stop_at else f' (to reproduce these {steps_done} steps: add --stop-at {steps_done} --max-minutes 0)'}:

    {command}
"""
    if earlier:
        body = earlier[earlier.index("- Architecture"):] if "- Architecture" in earlier else earlier
        readme += "\n## The earlier stage (the checkpoint --init started from)\n\n" + body.lstrip("\n").replace(
            "\nCommand", "\nIts command")
    (out / "README.md").write_text(readme)


if __name__ == "__main__":
    raise SystemExit(main())
