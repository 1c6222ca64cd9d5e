"""What the oracle tests of an image-text family assert when symform counts its weights and its text (the towers
whose image inputs it does not model yet): the whole checkpoint class's numel, the text-only forward's FLOPs, the
cache and what autograd keeps in a text-only training step, each against transformers' own module."""

from __future__ import annotations

import torch
import transformers
from oracle import MATMULS, check_cache_bytes, count_forward, global_counts, hf_config, input_ids, saved_for_backward

from symform.engine.graph.model import Model


def build_image_text(config: dict, dtype=torch.float32):
    """The checkpoint class (tower, projector and language model) in ``dtype``, eager attention, on the CPU."""
    torch.manual_seed(0)
    return transformers.AutoModelForImageTextToText.from_config(hf_config(config), attn_implementation="eager", dtype=dtype).eval()


def meta_image_text_params(config: dict) -> int:
    with torch.device("meta"):
        module = transformers.AutoModelForImageTextToText.from_config(hf_config(config))
    return sum(p.numel() for p in module.parameters())


def check_defaults(config: dict, family: str) -> None:
    """A config of transformers' defaults (sub-configs absent or given) reads as the family, at numel()'s count."""
    model = Model.from_config(config)
    assert model.spec.family == family
    assert model.evaluate("params") == meta_image_text_params(config)


def check_tiny_params(config: dict, towers: dict[str, tuple[str, ...]]) -> None:
    """The whole class's parameters, and each of symform's parts against the modules of ``real.model`` it stands for."""
    real = build_image_text(config)
    model = Model.from_config(config)
    assert model.evaluate("params") == sum(p.numel() for p in real.parameters())
    parts = model.evaluate_breakdown("params")
    for part, modules in towers.items():
        assert parts[part] == sum(_numel(getattr(real.model, name)) for name in modules), part


def _numel(module_or_tensor) -> int:
    if isinstance(module_or_tensor, torch.nn.Parameter):  # a bare learned tensor (LLaVA-NeXT's image_newline)
        return module_or_tensor.numel()
    return sum(p.numel() for p in module_or_tensor.parameters())


def check_text_forward_flops(config: dict, shapes=((2, 7), (1, 30))) -> None:
    real = build_image_text(config)
    model = Model.from_config(config)
    for batch, seq in shapes:
        counter = count_forward(real, input_ids(config["text_config"], batch, seq))
        assert set(global_counts(counter)) <= MATMULS
        assert model.evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops(), (batch, seq)


def check_text_cache(config: dict, seq: int = 9) -> None:
    check_cache_bytes(config, build_image_text(config), seq)


def check_text_saved_activations(config: dict, dtype: torch.dtype, batch: int = 2, seq: int = 12) -> None:
    real = build_image_text(config, dtype).train()
    kept = saved_for_backward(real, input_ids(config["text_config"], batch, seq))
    act_bytes = torch.tensor([], dtype=dtype).element_size()
    model = Model.from_config(config, accounting="eager", conventions={"act_bytes": act_bytes, "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept
