"""Vision towers under fused attention kernels: a tower's attention cores keep what a FlashAttention kernel keeps
(queries, keys, values and the fp32 log-sum-exp of each score row) in place of eager attention's score and
probability matrices, as transformers' vision attention does under flash_attention_2 or sdpa.

The expected bytes are derived here from the checkpoint's vision_config, never from symform's declarations."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import symform
from symform.analysis.memory.memory import Training, training_memory

PRESETS = Path(__file__).resolve().parents[1] / "formulas" / "presets"
BATCH, SEQ, SIZE = 2, 4096, 448


def visual_bytes(name: str, flash: bool) -> int:
    model = symform.load(name).with_conventions(images=1, image_height=SIZE, image_width=SIZE)
    report = training_memory(model, batch=BATCH, seq=SEQ, setup=Training(flash=flash, framework="eager"))
    return report.activations_by_component["visual"]


def test_qwen2_vl_tower_keeps_q_k_v_and_the_log_sum_exp_in_place_of_the_score_matrices():
    vision = json.loads((PRESETS / "qwen2-vl-7b.json").read_text())["vision_config"]
    width, heads, layers = vision["embed_dim"], vision["num_heads"], vision["depth"]
    patches = (SIZE // vision["patch_size"]) ** 2  # one image's patches, attended among themselves
    act = 2  # bf16
    # eager attention of one image in one layer (transformers' Qwen2VLVisionAttention, softmax in fp32 and cast back):
    # Q and K for the scores, the fp32 probabilities, their bf16 copy and V for the product
    eager = act * 2 * width * patches + 4 * heads * patches**2 + act * heads * patches**2 + act * width * patches
    # one FlashAttention kernel: Q, K and V, and one fp32 log-sum-exp per head and query
    flash = act * 3 * width * patches + 4 * heads * patches
    assert visual_bytes("qwen2-vl-7b", False) - visual_bytes("qwen2-vl-7b", True) == BATCH * layers * (eager - flash)


@pytest.mark.parametrize("name", ["qwen2.5-vl-3b", "qwen3-vl-8b", "gemma-3-4b", "llama-4-scout", "llava-1.5-7b", "mistral-small-3.1-24b", "gemma-4-31b-it"])
def test_fused_kernels_keep_less_of_every_tower_than_eager_attention(name):
    size = {"gemma-3-4b": 896, "llama-4-scout": 336, "llava-1.5-7b": 336, "gemma-4-31b-it": 768}.get(name, SIZE)
    model = symform.load(name).with_conventions(images=1, image_height=size, image_width=size)
    kept = {flash: training_memory(model, batch=1, seq=SEQ, setup=Training(flash=flash, framework="eager")).activations_by_component["visual"] for flash in (False, True)}
    assert kept[True] < kept[False]


def test_the_roofline_runs_a_tower_core_as_one_flashattention_kernel():
    """Under flash, a vision tower's cores move FlashAttention's bytes (Algorithms 1 and 4 of Dao et al. 2022, for
    each image's patches among themselves), as the language model's do; a training step also recomputes Q·Kᵀ."""
    from symform.analysis.time import flash_attention as fa
    from symform.analysis.time.roofline import roofline

    vision = json.loads((PRESETS / "qwen2-vl-7b.json").read_text())["vision_config"]
    width, heads, layers = vision["embed_dim"], vision["num_heads"], vision["depth"]
    patches, head = (SIZE // vision["patch_size"]) ** 2, vision["embed_dim"] // vision["num_heads"]
    model = symform.load("qwen2-vl-7b").with_conventions(images=1, image_height=SIZE, image_width=SIZE)
    sram = fa.DEFAULT_SRAM_BYTES // 2  # bf16 elements
    for phase, moved in (("prefill", fa.flash_forward(patches, patches, head, sram)), ("train", fa.flash_forward(patches, patches, head, sram) + fa.flash_backward(patches, patches, head, sram))):
        fused = roofline(model, "h100-sxm", phase=phase, batch=BATCH, seq=SEQ, depth=None, flash=True).components
        cores = [path for path in fused if path.startswith("visual/") and path.endswith("/core")]
        assert len(cores) == 1, cores
        assert fused[cores[0]].bytes == 2 * BATCH * layers * heads * moved
    eager = roofline(model, "h100-sxm", phase="train", batch=BATCH, seq=SEQ, depth=1).components["visual"]
    flash = roofline(model, "h100-sxm", phase="train", batch=BATCH, seq=SEQ, depth=1, flash=True).components["visual"]
    assert flash.flops - eager.flops == BATCH * layers * 2 * heads * patches * head * patches  # Q·Kᵀ once more in backward
    assert flash.bytes < eager.bytes


def test_the_step_time_model_times_every_tower_core_as_an_attention_kernel():
    """Qwen2.5-VL's windowed cores (whole, bottom, right and corner windows) are attention kernels to the step-time
    model, as the language model's core is, not GEMMs at the language model's rows."""
    from symform.analysis.time import estimate

    model = symform.load("qwen2.5-vl-3b").with_conventions(images=1, image_height=SIZE, image_width=SIZE)
    kinds = {k.path: k.kind for k in estimate.kernels(model, "train", workload={"batch": 1, "seq": SEQ}, attention="sdpa")}
    windows = [p for p in kinds if p.startswith("visual/") and p.rsplit("/", 1)[-1].endswith(("windows", "window"))]
    assert windows and all(kinds[p] == "attention" for p in windows), {p: kinds[p] for p in windows}
    assert kinds["layers/attn/core"] == "attention" and kinds["visual/window_blocks/attn/qkv"] == "gemm"
