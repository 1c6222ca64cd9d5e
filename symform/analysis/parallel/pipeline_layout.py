"""A pipeline's stages as a framework places them, and how much longer its slowest device's share takes.

Megatron-Core's ``pipeline_model_parallel_layout`` names what each stage holds, one letter a layer: ``E`` the
embedding, ``t`` a transformer layer, ``m`` a multi-token-prediction module, ``L`` the loss (the final norm, the
output layer and the loss); ``|`` ends a stage, ``(...)*N`` and ``x*N`` repeat, commas are cosmetic
(megatron/core/transformer/pipeline_parallel_layer_layout.py, ``parse_str_to_list``). Stage ``v·p + d`` runs on
device ``d`` of ``p`` as its chunk ``v``. Megatron-Bridge's DeepSeek-V3 recipe on 16 stages, for instance, is
``Etttt|(tttt|)*14tmL``: the embedding beside four layers, fourteen stages of four, one layer with the
multi-token-prediction module and the loss last.

Every micro-batch passes every device, so in 1F1B's steady state the device with the most work paces the rest:
the step is the balanced one times the slowest device's share over the mean share (:func:`pace`).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Mapping

from ...engine.errors import ConfigError

LETTERS = {"E": "the embedding", "t": "a transformer layer", "m": "a multi-token-prediction module", "L": "the loss (final norm, output layer, loss)"}
# the model's top-level parts each letter stands for; every other part (the embedding, a vision or audio tower)
# goes with E, on the first stage, where Megatron-Core builds the embedding and the encoders
PARTS = {"t": ("layers",), "m": ("mtp",), "L": ("final_norm", "lm_head", "loss")}
MOST_LETTERS = 10_000  # a layout names each layer once: far fewer than this; more is a typo or hostile input
_GROUP = re.compile(r"\(([^()]*)\)\*(\d+)")
_SINGLE = re.compile(r"(.)\*(\d+)")


def parse(text: str, stages: int) -> tuple[str, ...]:
    """The layout's stages, each a string of letters, checked: ``stages`` of them (pipeline × chunks), only the
    known letters, the embedding first and the loss last."""
    if not isinstance(text, str):
        raise ConfigError(f"the pipeline layout is {type(text).__name__}, not text; give it as Megatron-Core writes it, e.g. 'Etttt|(tttt|)*14tmL'")
    if not text.strip():
        raise ConfigError("the pipeline layout is empty; give one as Megatron-Core writes it, e.g. 'Etttt|(tttt|)*14tmL'")
    if len(text) > MOST_LETTERS:
        raise ConfigError(f"the pipeline layout is {len(text):,} characters long; a layout names each layer once, so give one of at most {MOST_LETTERS:,}")
    flat = _unrolled(text.replace(",", "").replace(" ", ""))
    found = tuple(flat.split("|"))
    unknown = sorted(set(flat) - set(LETTERS) - {"|"})
    if unknown:
        raise ConfigError(f"the pipeline layout {_short(text)} has {''.join(unknown)!r}, which is no layer; use E, t, m, L, '|' between stages and (...)*N or x*N to repeat")
    if len(found) != stages:
        raise ConfigError(f"the pipeline layout {_short(text)} has {len(found)} stages where the pipeline has {stages} (pipeline × chunks); give one '|'-separated stage for each")
    if flat.count("E") != 1 or not flat.startswith("E") or flat.count("L") != 1 or not flat.endswith("L"):
        raise ConfigError(f"the pipeline layout {_short(text)} must begin with the embedding (E) and end with the loss (L), each once, as Megatron-Core requires")
    if "m" in flat and "t" in flat[flat.index("m") :]:
        raise ConfigError(f"the pipeline layout {_short(text)} places a transformer layer (t) after a multi-token-prediction module (m); the modules follow the last layer")
    return found


def _unrolled(text: str) -> str:
    """``(...)*N`` and then ``x*N`` written out, one pass each as Megatron-Core does (no nesting), refused before the
    text outgrows MOST_LETTERS."""
    for pattern in (_GROUP, _SINGLE):
        grown = [len(text)]

        def repeated(match: re.Match) -> str:
            body, digits = match.group(1), match.group(2).lstrip("0") or "0"
            times = int(digits) if len(digits) <= len(str(MOST_LETTERS)) else MOST_LETTERS + 1
            grown[0] += len(body) * times - len(match.group(0))
            if grown[0] > MOST_LETTERS:
                raise ConfigError(f"the pipeline layout unrolls to more than {MOST_LETTERS:,} letters; a layout names each layer once, so check its repeat counts")
            return body * times

        text = pattern.sub(repeated, text)
    if "(" in text or ")" in text or "*" in text:
        raise ConfigError(f"the pipeline layout {_short(text)} has a repeat it cannot read; write (...)*N or x*N with N a whole number, without nesting")
    return text


def _short(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def counts(stages: tuple[str, ...]) -> dict[str, int]:
    """How many of each letter the layout holds."""
    return {letter: sum(stage.count(letter) for stage in stages) for letter in LETTERS}


def pace(stages: tuple[str, ...], pipeline: int, work: Mapping[str, Fraction]) -> Fraction:
    """The slowest device's work over the mean device's: ``work`` is each letter's (one layer's for ``t`` and ``m``).
    1 when every device holds the same."""
    per_device = [Fraction(0)] * pipeline
    for index, stage in enumerate(stages):
        per_device[index % pipeline] += sum((work[letter] for letter in stage), Fraction(0))
    total = sum(per_device, Fraction(0))
    return max(per_device) * pipeline / total if total else Fraction(1)
