"""An uneven pipeline split as a runs file states it (planner/runs.py uses this; the model is
planner/stage_split.py).

Spellings read: columns `first_stage_layers` / `last_stage_layers` (also Megatron-Core's
`decoder_first_pipeline_num_layers` / `decoder_last_pipeline_num_layers`); in the notes
"first stage 7 layers, last 7", "first/last stage: 7 layers", "--decoder-first-pipeline-num-layers 7",
"decoder_first_pipeline_num_layers=7", "--account-for-embedding-in-pipeline-split",
"account_for_loss_in_pipeline_split", and Llama 3's "one layer less on the first and last stages"
("uneven pp: 1 layer less on first and last"), which is the embedding and the loss each taking a
block's place (Llama Team 2024, sec. 3.3.2; Megatron-Core's two accounting flags).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from planner import run_text

_N = r"(\d+)"
_NOT_LESS = r"(?!\s*(?:each\s*)?(?:less|fewer))"  # "1 block less" is the one-less rule below, not a count
_FIRST = (r"decoder[\s_-]*first[\s_-]*pipeline[\s_-]*num[\s_-]*layers\s*[=:]?\s*" + _N,
          r"first[\s_-]*(?:pipeline[\s_-]*)?stage[\s_-]*(?:num[\s_-]*)?layers\s*[=:]\s*" + _N,
          r"first\s*(?:pipeline\s*)?stage\s*(?:has|holds|with|[=:])?\s*" + _N + r"\s*(?:transformer\s*)?(?:layers?|blocks?)" + _NOT_LESS,
          r"first\s*(?:/|and)\s*last\s*(?:pipeline\s*)?stages?\s*(?:have|hold|with|[=:])?\s*" + _N +
          r"\s*(?:transformer\s*)?(?:layers?|blocks?)" + _NOT_LESS)
_LAST = (r"decoder[\s_-]*last[\s_-]*pipeline[\s_-]*num[\s_-]*layers\s*[=:]?\s*" + _N,
         r"last[\s_-]*(?:pipeline[\s_-]*)?stage[\s_-]*(?:num[\s_-]*)?layers\s*[=:]\s*" + _N,
         r"last\s*(?:pipeline\s*)?stage\s*(?:has|holds|with|[=:])?\s*" + _N + r"\s*(?:transformer\s*)?(?:layers?|blocks?)" + _NOT_LESS,
         r"first\s*(?:/|and)\s*last\s*(?:pipeline\s*)?stages?\s*(?:have|hold|with|[=:])?\s*" + _N +
         r"\s*(?:transformer\s*)?(?:layers?|blocks?)" + _NOT_LESS,
         # "first stage 7 layers, last 7"
         r"first\s*(?:pipeline\s*)?stage\s*\d+\s*(?:layers?|blocks?)\s*[,;]?\s*(?:and\s*)?(?:the\s*)?last\s*(?:stage\s*)?" + _N)
_EMBEDDING = r"account[\s_-]*for[\s_-]*embedding[\s_-]*in[\s_-]*pipeline[\s_-]*split"
_LOSS = r"account[\s_-]*for[\s_-]*loss[\s_-]*in[\s_-]*pipeline[\s_-]*split"
# Llama 3: "we reduce one Transformer layer each from the first and the last stages"
_ONE_LESS = (r"(?:1|one)\s*(?:transformer\s*)?(?:layer|block)s?\s*(?:less|fewer)\s*(?:on|in|from|for)\s*(?:the\s*)?"
             r"first\s*and\s*(?:the\s*)?last",
             r"reduce[sd]?\s*(?:1|one)\s*(?:transformer\s*)?(?:layer|block)s?\s*each\s*from\s*the\s*first\s*and\s*"
             r"(?:the\s*)?last",
             # "first and last stage one layer fewer", "first/last stages: 1 block less each"
             r"first\s*(?:/|and)\s*(?:the\s*)?last\s*(?:pipeline\s*)?stages?\s*(?:have|has|hold|get|with|[=:])?\s*"
             r"(?:1|one)\s*(?:transformer\s*)?(?:layer|block)s?\s*(?:less|fewer)")


@dataclass(frozen=True)
class RowSplit:
    first_stage_layers: int = 0
    last_stage_layers: int = 0
    embedding_in_split: bool = False
    loss_in_split: bool = False

    @property
    def given(self) -> bool:
        return bool(self.first_stage_layers or self.last_stage_layers or self.embedding_in_split or self.loss_in_split)

    def knobs(self) -> dict:
        return {"first_stage_layers": self.first_stage_layers, "last_stage_layers": self.last_stage_layers,
                "embedding_in_split": self.embedding_in_split, "loss_in_split": self.loss_in_split}


def _count(row, columns: tuple[str, ...], patterns: tuple[str, ...], text: str) -> int:
    given = run_text._int_column(row, columns)
    if given is not None:
        return given
    return run_text._int_in(text, patterns) or 0


def split_of(row, pp: int, notes: list[str]) -> RowSplit:
    """The row's uneven split; the even one (all zeros) without pipeline stages or where nothing says."""
    if pp <= 1:
        return RowSplit()
    text = row.get("notes") or ""
    first = _count(row, ("first_stage_layers", "decoder_first_pipeline_num_layers"), _FIRST, text)
    last = _count(row, ("last_stage_layers", "decoder_last_pipeline_num_layers"), _LAST, text)
    one_less = any(re.search(p, text, re.I) for p in _ONE_LESS)
    embedding = bool(re.search(_EMBEDDING, text, re.I)) or one_less
    loss = bool(re.search(_LOSS, text, re.I)) or one_less
    split = RowSplit(first, last, embedding and not (first or last), loss and not (first or last))
    if split.given:
        words = f"first stage {first} blocks, last {last}" if first or last else \
            "the embedding and the loss each take a block's place in the split" if embedding and loss else \
            f"the {'embedding' if embedding else 'loss'} takes a block's place in the split"
        notes.append(f"uneven pipeline: {words}")
    return split
