"""The byte-level tokenizer of the shipped model: token = byte of the UTF-8 text (vocabulary 256)."""
from __future__ import annotations

import codecs
from typing import Iterable

import numpy as np

from ..errors import ArgumentError

VOCAB_SIZE = 256


def encode(text: str) -> np.ndarray:
    """int64 token ids of `text`'s UTF-8 bytes."""
    if not isinstance(text, str):
        raise ArgumentError(f"tokenizer: encode takes a str, got {type(text).__name__}")
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.int64)


def decode(tokens: Iterable[int]) -> str:
    """The text of a whole token sequence; bytes that are not valid UTF-8 become U+FFFD."""
    return _to_bytes(tokens).decode("utf-8", errors="replace")


class StreamDecoder:
    """Decodes tokens as they arrive, holding back the bytes of an unfinished multi-byte character."""

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, tokens: Iterable[int]) -> str:
        return self._decoder.decode(_to_bytes(tokens))

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


def _to_bytes(tokens: Iterable[int]) -> bytes:
    values = [int(t) for t in tokens]
    bad = [t for t in values if not 0 <= t < VOCAB_SIZE]
    if bad:
        raise ArgumentError(f"tokenizer: token ids must lie in [0, {VOCAB_SIZE}), got {bad[:5]}")
    return bytes(values)
