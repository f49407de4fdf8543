"""A share of the blocks recomputed, as a runs file writes partial activation checkpointing
(planner/run_columns.checkpointing_of uses this): "1/2 of layers", "50% of layers", "every 4th layer",
"8 of 32 layers", "1/4". The planner's knob is `checkpoint_fraction` with checkpointing "blocks"
(whole blocks fully recomputed, the rest keep their activations: torchtitan's and fms-fsdp's form).
"""

from __future__ import annotations

import re

_OF = r"(\d+)\s*(?:/|of|out\s+of)\s*(\d+)(?:\s*(?:of\s+)?(?:the\s+)?(?:layers?|blocks?))?"


def partial_fraction(raw: str) -> float | None:
    """The share of blocks recomputed that `raw` states, in (0, 1]; None where it states none."""
    text = raw.lower()
    m = re.search(_OF, text)
    if m and 0 < int(m.group(1)) <= int(m.group(2)):
        return int(m.group(1)) / int(m.group(2))
    m = re.search(r"(\d+(?:\.\d+)?)\s*%", text)
    if m and 0 < float(m.group(1)) <= 100:
        return float(m.group(1)) / 100
    m = re.search(r"every\s+(\d+)\s*(?:st|nd|rd|th)?\s*(?:layers?|blocks?)", text)
    if m and int(m.group(1)) > 0:
        return 1 / int(m.group(1))
    return None
