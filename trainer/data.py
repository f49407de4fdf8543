"""Training data without downloads: synthetic tokens, or a local text file read as bytes.

Byte-level tokenization: token = byte value (vocab 256), so any model with vocab >= 256 can
read any text file. Every rank draws its own batches from a seeded generator.

Synthetic tokens follow a Zipf law (p(k) ~ 1/(k+1), as word frequencies do) rather than a
uniform one: a uniform stream has nothing to learn (its loss stays at ln(vocab)), a skewed
one lets the loss fall within a few steps, so a short run shows that training works.
"""

from __future__ import annotations

from pathlib import Path

import torch

from planner.errors import PlanError

BYTE_VOCAB = 256


def load_text_tokens(path: str | Path) -> torch.Tensor:
    p = Path(path)
    if not p.is_file():
        raise PlanError("data", f"{p}: file not found (use 'synthetic' or a local text file)")
    raw = p.read_bytes()
    if len(raw) < 2:
        raise PlanError("data", f"{p}: too short to train on")
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8).to(torch.int64)


class Batches:
    """Endless (inputs, targets) batches of shape (micro_batch, seq_len)."""

    def __init__(self, source: str, vocab: int, micro_batch: int, seq_len: int, seed: int):
        self.micro_batch, self.seq_len, self.vocab = micro_batch, seq_len, vocab
        self.gen = torch.Generator().manual_seed(seed)
        self.zipf = 1.0 / torch.arange(1, vocab + 1, dtype=torch.float64)
        self.tokens: torch.Tensor | None = None
        if source != "synthetic":
            if vocab < BYTE_VOCAB:
                raise PlanError("data", f"byte-level text needs vocab >= {BYTE_VOCAB} (model has {vocab})")
            self.tokens = load_text_tokens(source)
            if len(self.tokens) < seq_len + 2:
                # repeat a short file so that one window fits
                self.tokens = self.tokens.repeat(-(-(seq_len + 2) // len(self.tokens)))

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        b, s = self.micro_batch, self.seq_len
        if self.tokens is None:
            seq = torch.multinomial(self.zipf, b * (s + 1), replacement=True, generator=self.gen).view(b, s + 1)
        else:
            starts = torch.randint(0, len(self.tokens) - s - 1, (b,), generator=self.gen)
            seq = torch.stack([self.tokens[i : i + s + 1] for i in starts.tolist()])
        return seq[:, :-1].contiguous(), seq[:, 1:].contiguous()
