"""What every family's oracle tests assert of a tiny config: symform's count beside the real module's.

The expected values are PyTorch's (tests/oracle.py builds and runs transformers' modules); these helpers only
put symform's number beside them, once, for every family test file.
"""

from __future__ import annotations

import torch
from oracle import build, build_for_training, input_ids, saved_for_backward

from symform.engine.graph.model import Model


def eager(config: dict) -> Model:
    """symform's count of what eager attention computes: full seq x seq score maps in local layers too."""
    return Model.from_config(config, name="tiny").with_conventions(windowed=0)


def check_tiny_params(config: dict) -> None:
    assert Model.from_config(config).evaluate("params") == sum(p.numel() for p in build(config, eager_experts=True).parameters())


def check_saved_activations(config: dict, dtype: torch.dtype, batch: int = 2, seq: int = 8) -> None:
    """Every tensor autograd keeps for backward in a training forward, against the eager accounting (the oracle
    runs PyTorch's CPU kernels)."""
    kept = saved_for_backward(build_for_training(config, dtype, experts_implementation="eager"), input_ids(config, batch, seq))
    act_bytes = torch.tensor([], dtype=dtype).element_size()
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": act_bytes, "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept
