"""What routed experts keep when they run as grouped GEMMs, not as transformers' eager loop over experts.

- transformers' experts_implementation="grouped_mm" (its default): the `grouped_mm` accounting equals the bytes
  autograd keeps, to the byte, on the CPU (torch._grouped_mm has a CPU kernel in torch >= 2.9).
- Megatron-Core's TEGroupedMLP and NeMo Automodel's GroupedExpertsDeepEP (grouped_experts = 1): derived by hand
  from their source below, since neither runs here.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the PyTorch oracles need torch (pip install '.[test,oracle]')")
from oracle import TINY, build_for_training, input_ids, saved_for_backward
from test_activations import DTYPES, FAMILIES

from symform import Model
from symform.analysis.memory.frameworks import frameworks

GROUPED_MM_FAMILIES = ["qwen2_moe", "qwen3_moe", "qwen3_moe, normalised top-k", "mixtral", "deepseek_v3", "gpt_oss, window 16 on layer 0"]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("family", GROUPED_MM_FAMILIES)
@pytest.mark.parametrize(("batch", "seq"), [(2, 8), (1, 11)])
def test_the_grouped_mm_accounting_equals_what_transformers_grouped_mm_experts_keep(family, dtype, batch, seq):
    config = {**TINY, **FAMILIES[family]}
    kept = saved_for_backward(build_for_training(config, dtype, experts_implementation="grouped_mm"), input_ids(config, batch, seq))
    model = Model.from_config(config, accounting="grouped_mm", conventions={"act_bytes": DTYPES[dtype], "cpu_kernels": 1})
    assert model.evaluate("saved_activations", batch=batch, seq=seq) == kept


def test_grouped_mm_keeps_less_than_eager_experts():
    """Per routed token, grouped_mm keeps one d_model-wide copy fewer (the weighted output is scattered, not
    index_added) and one int64 index more (token index, sort permutation and its inverse against torch.where's
    two); the int32 offsets per expert once per layer."""
    config = {**TINY, **FAMILIES["qwen3_moe"]}
    d, k, e, layers, batch, seq = 64, 2, 4, 2, 2, 8
    eager = Model.from_config(config, accounting="eager").evaluate("saved_activations", batch=batch, seq=seq)
    grouped = Model.from_config(config, accounting="grouped_mm").evaluate("saved_activations", batch=batch, seq=seq)
    assert eager - grouped == layers * (batch * seq * k * (2 * d - 8) - 4 * e)


def megatron_grouped_bytes_per_routed_token(d_model, d_ff, act_bytes=2, linear_input_bytes=2):
    """Megatron-LM at commit d98e8a64, MoE layer with the alltoall dispatcher, grouped GEMM, permute fusion and
    bias_activation_fusion (Megatron-Bridge's MoE recipes):
    - moe/moe_utils.py permute -> fused_permute: keeps its int32 row map only (not counted);
    - moe/experts.py TEGroupedMLP.forward: linear_fc1(permuted_local_hidden_states, ...) keeps its input, d_model
      (Transformer Engine GroupedLinear; column-wise FP8 under fp8 recipes);
    - bias_act_func -> weighted_bias_swiglu_impl(intermediate_parallel, bias, permuted_probs);
      fusions/fused_bias_swiglu.py WeightedSwiGLUFunction.forward: ctx.save_for_backward(input_for_backward,
      weights): fc1's output, 2·d_ff, and the probability (fp32: counted at 4 bytes);
    - linear_fc2 keeps its input, d_ff;
    - token_dispatcher.py token_unpermutation: unpermute(...) without probs -> fused_unpermute(merging_probs=None):
      keeps the row map only."""
    return linear_input_bytes * (d_model + d_ff) + act_bytes * 2 * d_ff + 4


def eager_bytes_per_routed_token(d_model, d_ff, act_bytes=2):
    """transformers' eager experts (qwen3_moe): torch.where's two int64 indices, the gathered weight, gate_proj's
    input, silu's input, the product's two inputs, down_proj's input, the weighted output and its index_add copy."""
    return 2 * 8 + act_bytes * (1 + d_model + d_ff + 2 * d_ff + d_ff + 2 * d_model)


@pytest.mark.parametrize("fp8", [0, 1])
def test_fused_grouped_experts_keep_what_megatron_cores_grouped_mlp_saves(fp8):
    config = {**TINY, **FAMILIES["qwen3_moe"]}
    d, d_ff, k, layers, batch, seq = 64, 32, 2, 2, 2, 8
    count = {
        g: Model.from_config(config, conventions={"grouped_experts": g, "fp8_linears": fp8}).evaluate("saved_activations", batch=batch, seq=seq)
        for g in (0, 1)
    }
    eager_linear_inputs = fp8 * (2 - 1) * (d + d_ff)  # fp8_linears keeps gate_proj's and down_proj's inputs in one byte
    per_token = eager_bytes_per_routed_token(d, d_ff) - eager_linear_inputs - megatron_grouped_bytes_per_routed_token(d, d_ff, linear_input_bytes=2 - fp8)
    assert count[0] - count[1] == layers * batch * seq * k * per_token


def test_megatron_and_automodel_run_grouped_experts_and_eager_does_not():
    fw = frameworks()
    assert fw["megatron"].convention_values("mixed")["grouped_experts"] == 1
    assert fw["automodel"].convention_values("mixed")["grouped_experts"] == 1
    assert "grouped_experts" not in fw["eager"].convention_values("mixed")
