"""A whole-sequence numpy Llama forward with StreamingLLM visibility, for the model tests."""
import numpy as np


def _rms(x, w, eps):
    return x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w


def _rotary(x, positions, theta):
    d = x.shape[-1]
    inv = 1.0 / theta ** (np.arange(0, d, 2) / d)
    angles = positions[:, None] * inv
    cos, sin = np.cos(np.concatenate([angles, angles], -1)), np.sin(np.concatenate([angles, angles], -1))
    rotated = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
    return x * cos[:, None, :] + rotated * sin[:, None, :]


def logits(config, weights, tokens, sinks=0, window=None):
    """Logits (T, V) of one sequence of tokens (T,), each position attending to the positions
    p <= pos with p < sinks or p > pos - window (every earlier position when window is None)."""
    c, w = config, {k: v.astype(np.float64) for k, v in weights.items()}
    steps, d = len(tokens), c.dim_head
    group = c.num_attention_heads // c.num_key_value_heads
    positions = np.arange(steps, dtype=np.float64)
    visible = np.tril(np.ones((steps, steps), bool))
    if window is not None:
        pos, p = np.meshgrid(np.arange(steps), np.arange(steps), indexing="ij")
        visible &= (p < sinks) | (p > pos - window)
    x = w["model.embed_tokens.weight"][tokens]
    for layer in range(c.num_hidden_layers):
        pre = f"model.layers.{layer}."
        h = _rms(x, w[pre + "input_layernorm.weight"], c.rms_norm_eps)
        q = (h @ w[pre + "self_attn.q_proj.weight"].T).reshape(steps, -1, d)
        k = (h @ w[pre + "self_attn.k_proj.weight"].T).reshape(steps, -1, d)
        v = (h @ w[pre + "self_attn.v_proj.weight"].T).reshape(steps, -1, d)
        q, k = _rotary(q, positions, c.rope_theta), _rotary(k, positions, c.rope_theta)
        out = np.empty_like(q)
        for head in range(q.shape[1]):
            scores = q[:, head] @ k[:, head // group].T / np.sqrt(d)
            scores = np.where(visible, scores, -np.inf)
            probs = np.exp(scores - scores.max(-1, keepdims=True))
            out[:, head] = (probs / probs.sum(-1, keepdims=True)) @ v[:, head // group]
        x = x + out.reshape(steps, -1) @ w[pre + "self_attn.o_proj.weight"].T
        h = _rms(x, w[pre + "post_attention_layernorm.weight"], c.rms_norm_eps)
        gate, up = h @ w[pre + "mlp.gate_proj.weight"].T, h @ w[pre + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ w[pre + "mlp.down_proj.weight"].T
    head = w["model.embed_tokens.weight"] if c.tie_word_embeddings else w["lm_head.weight"]
    return (_rms(x, w["model.norm.weight"], c.rms_norm_eps) @ head.T).astype(np.float32)
