"""Small random transformers Llama models, saved as Hugging Face checkpoints, and their logits."""
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")


def random_llama(tmp_path, *, tied=False, seed=0, hidden=64, layers=2, heads=4, kv_heads=2, vocab=300,
                 intermediate=96, max_positions=512):
    """A seeded random LlamaForCausalLM saved with save_pretrained under tmp_path; (model, path)."""
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(
        vocab_size=vocab, hidden_size=hidden, intermediate_size=intermediate, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=max_positions,
        rms_norm_eps=1e-5, rope_theta=10000.0, tie_word_embeddings=tied, attn_implementation="eager")
    model = transformers.LlamaForCausalLM(config).eval()
    with torch.no_grad():  # init's small std makes every logit nearly equal; spread them
        for p in model.parameters():
            p.normal_(0.0, 0.2 if p.ndim > 1 else 1.0)
    path = tmp_path / f"llama_{'tied' if tied else 'untied'}_{seed}"
    model.save_pretrained(path, safe_serialization=True)
    return model, path


def hf_logits(model, tokens, past=None):
    """(logits float32 numpy, the KV cache to pass next) of transformers' model on int tokens (B, T)."""
    with torch.no_grad():
        out = model(input_ids=torch.as_tensor(tokens, dtype=torch.long), cache=past, use_cache=True)
    return out.logits.float().numpy(), out.cache
