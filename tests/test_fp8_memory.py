"""Activations under FP8 training: what each framework's linears keep for backward, derived by hand from the
frameworks' own sources."""

from __future__ import annotations

from symform import load
from symform.analysis.memory.settings import Layout
from symform.analysis.memory.memory import Training, training_memory
from symform.analysis.time.memory_validation import timed_precision

# Llama 3.1 8B: d 4096, 32 layers, 32 query heads of 128, d_ff 14,336; one sequence of 16 tokens (a small step)
ROWS = 16


def activations(framework: str, precision: str) -> float:
    setup = Training(precision=precision, recompute="none", flash=True, layout=Layout(), framework=framework)
    return training_memory(load("llama-3.1-8b"), batch=1, seq=ROWS, setup=setup).values["activations"]


def test_transformer_engine_keeps_each_linear_input_at_one_byte_and_flash_keeps_its_bf16_output():
    """Transformer Engine (transformer_engine/pytorch/module/linear.py at d0067d0d, _linear_forward: under FP8
    ``inputmat.update_usage(rowwise_usage=False, columnwise_usage=True)``, then ``saved_inputmat = inputmat``;
    layernorm_linear.py: ``ln_out.update_usage(rowwise_usage=False)`` and ``prepare_for_saving(inputmat, ..., ln_out_to_save,
    mu, rsigma)``) keeps each linear's input as its column-wise FP8 copy, one byte per element instead of bf16's two.
    Per token and layer the four kept inputs are QKV's (4096), the output projection's (32·128 = 4096), fc1's (4096)
    and fc2's (14,336): 26,624 bytes fewer. The output projection's FP8 copy is no longer the tensor FlashAttention
    saves (flash_attn keeps q, k, v, out, softmax_lse), so the kernel's bf16 output, 2·32·128 = 8,192 bytes, is kept
    besides. The output head keeps its 4096-wide input at one byte too: 4,096 bytes fewer per token."""
    per_token = 32 * ((4096 + 4096 + 4096 + 14336) - 2 * 32 * 128) + 4096
    assert per_token == 593_920
    assert activations("megatron", "mixed") - activations("megatron", "fp8") == ROWS * per_token


def test_deepseek_v3s_recipe_keeps_the_same_fp8_inputs():
    """DeepSeek-V3 §3.3.3 caches the linears' inputs in FP8: its recipe (fp8-deepseek-v3) counts them as fp8 does."""
    assert activations("megatron", "fp8-deepseek-v3") == activations("megatron", "fp8")


def test_torchao_float8_keeps_bf16_inputs():
    """torchao's Float8Linear (torchtitan's float8): matmul_with_hp_or_float8_args.forward calls
    ``ctx.save_for_backward(input_hp, weight_hp_t)``, the high-precision input, and casts again in backward: its
    activations under fp8 are bf16's."""
    assert activations("torchtitan", "fp8") == activations("torchtitan", "mixed")


def test_a_timed_run_in_fp8_is_counted_in_fp8():
    assert timed_precision({"dtype": "fp8"}) == "fp8"
    assert timed_precision({"dtype": "bf16"}) == timed_precision({}) == "mixed"
    assert timed_precision({"dtype": "fp8", "precision": "fp8-deepseek-v3"}) == "fp8-deepseek-v3"
