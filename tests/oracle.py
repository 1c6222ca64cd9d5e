"""The oracles shared by the tests that compare symform with PyTorch and transformers.

Everything here builds or runs transformers' own models; nothing calls symform,
so expected values never come from the code under test.
"""

from __future__ import annotations

import copy
import inspect
import json
import weakref

import pytest

# without the oracle extra, every test module built on these oracles is skipped at collection, as a whole
torch = pytest.importorskip("torch", reason="the PyTorch oracles need torch (pip install '.[test,oracle]')")
transformers = pytest.importorskip("transformers", reason="the PyTorch oracles need transformers (pip install '.[test,oracle]')")
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from checks import preset_dict  # noqa: E402,F401: tests import it from here too

ABSENT = object()  # in a change set: remove the field

# the sizes of the tiny models the FLOP oracles run on the CPU (families add their own fields)
TINY = {
    "hidden_size": 64,
    "intermediate_size": 96,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 101,
    "max_position_embeddings": 64,
}


def changed(config: dict, changes: dict) -> dict:
    """A copy of ``config`` with ``changes`` applied (ABSENT removes a field)."""
    result = copy.deepcopy(config)
    for field, value in changes.items():
        if value is ABSENT:
            result.pop(field, None)
        else:
            result[field] = value
    return result


# Fields a published config.json writes as a number that transformers' strict config classes now type as bool:
# Llama 4 Scout's file has attn_temperature_tuning 4 (any non-zero turns tuning on); no shape depends on it.
_PUBLISHED_AS_NUMBERS = {"llama4_text": ("attn_temperature_tuning",)}


def hf_config(config: dict):
    config = copy.deepcopy(config)
    for part in (config, config.get("text_config") or {}):
        for field in _PUBLISHED_AS_NUMBERS.get(part.get("model_type"), ()):
            if isinstance(part.get(field), int) and not isinstance(part[field], bool):
                part[field] = bool(part[field])
    return transformers.AutoConfig.for_model(**config)


def meta_model(config: dict):
    """transformers' model for ``config`` on the meta device: shapes, no memory. The checkpoint class its
    ``architectures`` names where that is an image-text-to-text class (Qwen3.5's, Qwen3-VL's: the vision tower
    too), a sequence-to-sequence class, or where transformers builds no causal LM for the config, else the causal LM."""
    hf = hf_config(config)
    image_text = set(transformers.models.auto.modeling_auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.values())
    # an encoder-decoder checkpoint (PEGASUS, Marian) whose type has a causal LM too: the class its file names
    seq2seq = set(transformers.models.auto.modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES.values())
    with torch.device("meta"):
        if set(config.get("architectures") or ()) & image_text:
            return transformers.AutoModelForImageTextToText.from_config(hf)
        if set(config.get("architectures") or ()) & seq2seq:
            return getattr(transformers, config["architectures"][0])._from_config(hf)
        if type(hf) in transformers.MODEL_FOR_CAUSAL_LM_MAPPING:
            return transformers.AutoModelForCausalLM.from_config(hf)
        return getattr(transformers, config["architectures"][0])._from_config(hf)


def meta_params(config: dict) -> int:
    """``numel()`` summed over parameters(); a tied weight is yielded, and counted, once."""
    return sum(p.numel() for p in meta_model(config).parameters())


def build(config: dict, *, eager_experts: bool = False):
    """A float32 CPU model with eager attention (the counter cannot see the CPU SDPA kernel) and,
    for mixture-of-experts models, eager experts (nor the grouped-matmul expert kernel)."""
    torch.manual_seed(0)
    options = {"experts_implementation": "eager"} if eager_experts else {}
    model = transformers.AutoModelForCausalLM.from_config(hf_config(config), attn_implementation="eager", dtype=torch.float32, **options)
    assert model.config._attn_implementation == "eager"
    assert all(p.dtype == torch.float32 for p in model.parameters())
    return model.eval()


def save_tiny_qwen3(directory):
    """transformers' own save_pretrained of a tiny bf16 Qwen3 with an untied head (config.json + model.safetensors)."""
    config = {"model_type": "qwen3", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
              "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 101, "max_position_embeddings": 64, "tie_word_embeddings": False}
    torch.manual_seed(0)
    module = transformers.AutoModelForCausalLM.from_config(hf_config(config), dtype=torch.bfloat16)
    module.save_pretrained(directory)
    return module


def input_ids(config: dict, batch: int, seq: int):
    generator = torch.Generator().manual_seed(batch * 1000 + seq)
    return torch.randint(0, config["vocab_size"], (batch, seq), generator=generator)


def image_token_ids(batch: int, seq: int, images: int, per_image: int, tokens: tuple[int, int, int]):
    """batch random sequences of seq tokens (seeded by seq), each holding ``images`` images of ``per_image``
    placeholder tokens wrapped in start/end tokens; ``tokens`` = (image, start, end) ids."""
    image, start, end = tokens
    generator = torch.Generator().manual_seed(seq)
    ids = torch.randint(0, 100, (batch, seq), generator=generator)
    for b in range(batch):
        at = 1
        for _ in range(images):
            ids[b, at] = start
            ids[b, at + 1 : at + 1 + per_image] = image
            ids[b, at + 1 + per_image] = end
            at += per_image + 2
        assert at <= seq, "the sequence must hold the image tokens"
    return ids, generator


def check_params_per_tower(config: dict, real, towers: dict[str, tuple[str, ...]] | None = None) -> None:
    """symform's parameters equal the real multimodal module's numel, whole and for each tower: symform's part ->
    the modules of real.model it stands for (by default the vision tower `visual`)."""
    from symform.engine.graph.model import Model

    model = Model.from_config(config)
    assert model.evaluate("params") == sum(p.numel() for p in real.parameters())
    parts = model.evaluate_breakdown("params")
    for part, modules in (towers or {"visual": ("visual",)}).items():
        assert parts[part] == sum(p.numel() for name in modules for p in getattr(real.model, name).parameters()), part


def cached_bytes(model, batch: int, seq: int) -> int:
    """Bytes of every tensor the model's cache holds after one forward of batch x seq tokens (vocabulary 101);
    0-dimensional tensors are bookkeeping (a sliding layer's window), not cached tokens."""
    with torch.no_grad():
        cache = model(input_ids=input_ids(model.config.to_dict() | {"vocab_size": 101}, batch, seq), use_cache=True).past_key_values
    return sum(t.numel() * t.element_size() for layer in cache.layers for t in vars(layer).values() if isinstance(t, torch.Tensor) and t.dim() > 0)


def count_forward(model, ids) -> FlopCounterMode:
    with torch.no_grad(), FlopCounterMode(display=False) as counter:
        model(input_ids=ids)
    return counter


def count_forward_backward(model, ids) -> FlopCounterMode:
    model.zero_grad(set_to_none=True)
    with FlopCounterMode(display=False) as counter:
        model(input_ids=ids).logits.sum().backward()
    return counter


def global_counts(counter: FlopCounterMode) -> dict[str, int]:
    return {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}


def top_level_counts(counter: FlopCounterMode) -> dict[str, int]:
    """The counter's forward FLOPs of a decoder's top-level modules, named as symform's depth-1 breakdown."""
    counts = counter.get_flop_counts()
    (top,) = [name for name in counts if name != "Global" and "." not in name]
    layers = sum(sum(ops.values()) for name, ops in counts.items() if name.startswith(f"{top}.model.layers.") and name.count(".") == 3)
    modules = {
        "embed": sum(counts.get(f"{top}.model.embed_tokens", {}).values()),
        "layers": layers,
        "final_norm": sum(counts.get(f"{top}.model.norm", {}).values()),
        "lm_head": sum(counts[f"{top}.lm_head"].values()),
    }
    # what the top module runs outside its children: the loss (no counted operator in it)
    return {**modules, "loss": counter.get_total_flops() - sum(modules.values())}


def build_for_training(config: dict, dtype=torch.bfloat16, **options):
    """A CPU model in training mode, every parameter in ``dtype``, eager attention (``options``: e.g. eager experts)."""
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(hf_config(config), attn_implementation="eager", dtype=dtype, **options)
    assert model.config._attn_implementation == "eager"
    return model.train()


def saved_for_backward(model, ids, labels=None, **inputs) -> int:
    """Bytes of the distinct storages autograd still holds for backward after one training forward (loss
    included; the labels are ``ids`` unless given; ``inputs``, further arguments such as a next-sentence label;
    a model whose forward takes no labels, an encoder without a head, computes no loss), parameters left out:
    they are weights, not activations. A graph built and dropped within the
    forward (a router's one-hot mask, DoRA's detached B·A) packs tensors too; they are freed with it and the
    allocator may hand their address to a later tensor, so only tensors still alive count."""
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    packed: list[tuple[weakref.ref, int, int]] = []

    def pack(tensor):
        # a detached alias: a node that saves its own output (exp, sigmoid) would otherwise hold that output, whose
        # grad_fn is the node, a cycle nothing frees, and a graph the forward drops would still look kept
        alias = tensor.detach()
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters:
            packed.append((weakref.ref(alias), storage.data_ptr(), storage.nbytes()))
        return alias

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        if _takes_labels(model):
            output = model(input_ids=ids, labels=ids if labels is None else labels, **inputs).loss
        else:
            # every output alive, as a user's training keeps them (BERT's pooled output beside the hidden states)
            output = model(input_ids=ids, **inputs)
    assert (output if isinstance(output, torch.Tensor) else output.last_hidden_state).requires_grad
    return sum({ptr: size for alive, ptr, size in packed if alive() is not None}.values())


def saved_with_images(config: dict, given: dict, dtype) -> int:
    """saved_for_backward of the whole image-text checkpoint class in training mode, every parameter and the pixels
    in ``dtype``, eager attention and eager experts; ``given``: the token ids and what a processor hands the model
    beside them (pixel rows, grids or patch positions), or the ids alone for a text-only forward."""
    torch.manual_seed(0)
    options = dict(attn_implementation="eager", experts_implementation="eager", dtype=dtype)
    model = transformers.AutoModelForImageTextToText.from_config(hf_config(config), **options).train()
    inputs = {name: value.to(dtype) if name.startswith("pixel") else value for name, value in given.items()}
    return saved_for_backward(model, inputs.pop("input_ids"), **inputs)


def _takes_labels(model) -> bool:
    """A head that computes a loss (peft's wrapper passes them on through **kwargs); a bare encoder takes none."""
    forward = getattr(model, "get_base_model", lambda: model)().forward
    return "labels" in inspect.signature(forward).parameters


# -- the checks every family's oracle tests make ---------------------------------------------------------------

MATMULS = {"aten.mm", "aten.addmm", "aten.bmm", "aten.baddbmm"}  # all the counter counts in a decoder: no element-wise work (baddbmm: BLOOM's ALiBi scores)


def check_forward_flops(symbolic, model, config: dict, shapes) -> None:
    """symform's forward FLOPs equal the counter's at each (batch, seq), the counter having seen matrix products only."""
    for batch, seq in shapes:
        counter = count_forward(model, input_ids(config, batch, seq))
        assert set(global_counts(counter)) <= MATMULS
        assert symbolic.evaluate("forward_flops", batch=batch, seq=seq) == counter.get_total_flops(), (batch, seq, global_counts(counter))


def check_train_step_flops(symbolic, model, config: dict, batch: int = 2, seq: int = 7) -> None:
    """A forward and a backward: the counter's backward is two matrix products per forward one, as symform's bwd_mult = 2."""
    both = count_forward_backward(model, input_ids(config, batch, seq)).get_total_flops()
    assert symbolic.evaluate("train_step_flops", batch=batch, seq=seq) == both


def check_cache_bytes(config: dict, model, seq: int) -> None:
    """The KV cache (float32 here) equals the bytes of the tensors transformers' cache holds after a forward of 2 x seq."""
    from symform.engine.graph.model import Model

    expected = cached_bytes(model, 2, seq)
    # transformers' caches are the eager accounting's: Falcon's key/value heads broadcast to the query heads
    # (kv_broadcast = 1), DeepSeek-V3.2's indexer keys at kv_bytes (fp8_index_keys = 0); engines keep neither
    assert Model.from_config(config, accounting="eager").with_conventions(kv_bytes=4).evaluate("kv_cache", batch=2, seq=seq) == expected


def check_saved_config_reads_the_same(config: dict, directory, quantities=("forward_flops", "saved_activations", "kv_cache")) -> None:
    """The config transformers writes (save_pretrained) costs what the one written by hand does."""
    from symform.engine.graph.model import Model

    hf_config(config).save_pretrained(directory)
    saved, by_hand = Model.load(directory / "config.json"), Model.from_config(config)
    workload = {"batch": 2, "seq": 9, "past": 7}
    for quantity in quantities:
        assert saved.evaluate(quantity, **workload) == by_hand.evaluate(quantity, **workload), quantity
