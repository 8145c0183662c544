"""A numpy statement of paged attention (refcomp.llm.attention's semantics), and pages filled from a history."""
import numpy as np


def slot_of(position, sinks, ring):
    return position if position < sinks else sinks + (position - sinks) % ring


def fill_pages(history_k, history_v, lengths, table, page_size, sinks, ring, pages):
    """Pages (k transposed within a page, v plain) holding positions [0, lengths[b]) of each sequence."""
    batch, _, heads, dim = history_k.shape
    k_pages = np.full((pages, heads, dim, page_size), np.nan, np.float32)
    v_pages = np.full((pages, heads, page_size, dim), np.nan, np.float32)
    for b in range(batch):
        for p in range(int(lengths[b])):
            slot = slot_of(p, sinks, ring)
            page, offset = table[b, slot // page_size], slot % page_size
            k_pages[page, :, :, offset] = history_k[b, p]
            v_pages[page, :, offset, :] = history_v[b, p]
    return k_pages, v_pages


def attention(q, k, v, history_k, history_v, start, sinks, window):
    """out[b, t, h] = softmax over the visible positions of q . K / sqrt(D), times V."""
    batch, steps, q_heads, dim = q.shape
    group = q_heads // k.shape[2]
    out = np.zeros_like(q, dtype=np.float64)
    for b in range(batch):
        keys = np.concatenate([history_k[b, :start[b]], k[b]]).astype(np.float64)
        values = np.concatenate([history_v[b, :start[b]], v[b]]).astype(np.float64)
        for t in range(steps):
            pos = int(start[b]) + t
            visible = [p for p in range(pos + 1) if p < sinks or p > pos - window]
            for h in range(q_heads):
                scores = keys[visible, h // group] @ q[b, t, h].astype(np.float64) / np.sqrt(dim)
                weights = np.exp(scores - scores.max())
                out[b, t, h] = weights @ values[visible, h // group] / weights.sum()
    return out.astype(np.float32)
