"""The papers' cost formulas as theorems about symform's expressions.

Each test writes a paper's formula in symform's symbols, by hand from the paper
(or the code) it cites, and shows with sympy that symform's declared expression
equals it under the paper's stated assumptions, or equals it plus an exact
difference term written out here and explained. Nothing is evaluated at a point:
the equalities hold for every size. Korthikanti et al.'s activation forms
(34·s·b·h + 5·a·s²·b per layer, 34·s·b·h with selective and 2·s·b·h with full
recomputation) are theorems in tests/test_memory.py.
"""

from __future__ import annotations

from functools import cache

import sympy

from symform import Model
from symform.engine.graph.structure import active_form, structure, without_flags

HALF = sympy.Rational(1, 2)


@cache
def model(name: str, **conventions) -> Model:
    return Model.load(name, conventions=conventions or None)


def symbols(m: Model, names: str) -> list[sympy.Symbol]:
    return [m.vocabulary[n] for n in names.split()]


def expression(m: Model, quantity: str, **options) -> sympy.Expr:
    return without_flags(m.expression(quantity, **options).expr, m.values)


def vanishes(expr: sympy.Expr) -> bool:
    return sympy.expand(expr) == 0


def test_kaplan_forward_is_2n_plus_2_n_nctx_d_plus_what_it_leaves_out():
    """Kaplan et al. 2020, Table 1: C_fwd ≈ 2N + 2·n_layer·n_ctx·d_attn per token, N the non-embedding
    parameters, GPT-2 with d_attn = d_model and d_ff = 4·d_model. symform also counts the weighted sum A·V
    (another 2·n·s·d) and the de-embedding (2·d·V, in Kaplan's table but not his sum), and no multiply-add
    for the 13 bias and LayerNorm parameters of width d per layer and the final LayerNorm's 2."""
    m = model("gpt2-xl")
    d, n, s, b, vocab, s_max = symbols(m, "d_model n_layers seq batch vocab max_positions")
    params = expression(m, "params", assume="standard")
    non_embedding = params - vocab * d - s_max * d
    per_token = expression(m, "forward_flops", assume="standard") / (b * s)
    kaplan = 2 * non_embedding + 2 * n * s * d
    assert vanishes(per_token - kaplan - 2 * d * (n * s + vocab - 13 * n - 2))


def test_palm_training_is_6n_plus_12_l_h_q_t_less_what_does_no_matmul():
    """PaLM (Chowdhery et al. 2022, Appendix B): 6N + 12·L·H·Q·T training FLOPs per token, H·Q = d (heads ×
    head width), T the sequence, no causal discount. With GPT-2 (tied head) the difference is 6 FLOPs for every
    parameter no matmul uses: the learned positions and the biases and norms."""
    m = model("gpt2-xl")
    d, n, s, b, s_max, h, d_h = symbols(m, "d_model n_layers seq batch max_positions n_heads d_head")
    params = expression(m, "params", assume="standard")
    per_token = expression(m, "train_step_flops", assume="standard") / (b * s)
    palm = 6 * params + 12 * n * h * (d / h) * s
    assert vanishes(per_token - palm + 6 * d * (s_max + 13 * n + 2))


def test_narayanan_96_bslh2_with_full_recomputation_is_exact():
    """Narayanan et al. 2021 (§5.1): 96·B·s·l·h²·(1 + s/6h + V/16lh) per iteration with full activation
    recomputation: forward, backward, and the layers' forward once more (the logits are not recomputed)."""
    m = model("gpt2-xl")
    d, n, s, b, vocab = symbols(m, "d_model n_layers seq batch vocab")
    layers = next(block for block in structure(m, "forward_flops", assume="standard").blocks if block.name == "layers")
    step = expression(m, "train_step_flops", assume="standard") + layers.total
    narayanan = 96 * b * s * n * d**2 * (1 + s / (6 * d) + vocab / (16 * n * d))
    assert vanishes(step - narayanan)


def test_chinchilla_forward_counts_the_embedding_and_softmax_that_symform_does_not():
    """Hoffmann et al. 2022, Appendix F, forward FLOPs of one sequence: embeddings 2·s·V·d, QKV 6·s·d²,
    QKᵀ 2·s²·d, softmax 3·h·s², AV 2·s²·d, output 2·s·d², MLP 4·s·d·d_ff, logits 2·s·d·V (and backward twice
    that, so 6ND plus attention in training). symform counts no FLOPs for a lookup nor, by default
    (count_elementwise = 0), for element-wise work: exactly the embedding and the softmax apart."""
    m = model("gpt2-xl")
    d, n, s, b, vocab, h = symbols(m, "d_model n_layers seq batch vocab n_heads")
    forward = expression(m, "forward_flops", assume="standard").xreplace({b: 1})
    chinchilla = n * (6 * s * d**2 + 2 * s**2 * d + 3 * h * s**2 + 2 * s**2 * d + 2 * s * d**2 + 4 * s * d * 4 * d) + 2 * s * vocab * d + 2 * s * d * vocab
    assert vanishes(forward - chinchilla + 2 * s * d * vocab + 3 * h * n * s**2)
    training = expression(m, "train_step_flops", assume="standard").xreplace({b: 1})
    assert vanishes(training - 3 * forward)


def test_training_per_token_is_6_n_active_plus_attention():
    """Chinchilla's 6ND plus attention, with N the active parameters: for a tied dense model the multiple is
    exact at leading order and the attention term is 12·n·s·d per token."""
    m = model("qwen3-0.6b")
    d, n, s, tokens = symbols(m, "d_model n_layers seq tokens")
    form = active_form(m, "train_flops", assume="standard")
    assert form.multiple == 6 * tokens and form.difference == 0
    assert vanishes(form.attention - 12 * n * s * d * tokens)


def test_deepseek_v2_kv_cache_per_token_is_dc_plus_dhr_times_l():
    """DeepSeek-V2 §2.1.4, Table 1: MLA caches (d_c + d_h^R)·l elements per token, 9/2·d_h·l with d_c = 4·d_h
    and d_h^R = d_h/2; MHA caches 2·n_h·d_h·l and GQA 2·n_g·d_h·l."""
    m = model("deepseek-v3")
    n, b, s, r_kv, d_rope, d_nope = symbols(m, "n_layers batch seq kv_lora_rank d_rope d_nope")
    kv_bytes = 2
    per_token = expression(m, "kv_cache").xreplace({b: 1, s: 1}) / kv_bytes
    assert vanishes(per_token - (r_kv + d_rope) * n)
    assert vanishes(expression(m, "kv_cache", assume="standard").xreplace({b: 1, s: 1}) / kv_bytes - sympy.Rational(9, 2) * d_nope * n)
    gqa = model("mixtral-8x7b")
    n, b, s, h_kv, d_h = symbols(gqa, "n_layers batch seq n_kv_heads d_head")
    assert vanishes(expression(gqa, "kv_cache").xreplace({b: 1, s: 1}) / kv_bytes - 2 * h_kv * d_h * n)


def _megatron_attention(d, s, heads, q_rank, kv_rank, d_nope, d_rope, d_v):
    """Megatron-LM training.py, num_floating_point_operations, multi_latent_attention branch, per token and
    layer (its forward_backward_expansion_factor 3 times fma_expansion_factor 2)."""
    q_term = q_rank * (d + heads * (d_nope + d_rope) + 1)
    return 6 * (q_term + kv_rank * (d + heads * (d_nope + d_v) + 1) + d * d_rope + heads * d_v * d + s * heads * (d_nope + d_rope) / 2 + s * heads * d_v / 2)


def test_megatron_num_floating_point_operations_for_mla_and_moe():
    """Megatron-LM's FLOP count (dense-first MoE with shared experts and latent attention, causal half,
    SwiGLU factor 3, logits 6·d·V) against symform's training step with causal = 1/2: symform also counts the
    router (6·d·E per token in each expert layer); Megatron counts the q and kv norms as r_q + r_kv
    multiply-adds per layer, which symform leaves to element-wise work."""
    m = model("deepseek-v3", causal=HALF)
    d, n, n_dense, vocab, s, b, d_ff, d_e, e, k, e_s, heads, r_q, r_kv, d_nope, d_rope, d_v = symbols(
        m, "d_model n_layers n_dense_layers vocab seq batch d_ff d_ff_expert n_experts top_k n_shared_experts n_heads q_lora_rank kv_lora_rank d_nope d_rope d_v"
    )
    per_token = expression(m, "train_step_flops").xreplace({b: 1}) / s
    mlp = 6 * d * (3 * d_ff * n_dense + 3 * d_e * k * (n - n_dense) + 3 * e_s * d_e * (n - n_dense))
    megatron = mlp + n * _megatron_attention(d, s, heads, r_q, r_kv, d_nope, d_rope, d_v) + 6 * d * vocab
    router, norms = 6 * d * e * (n - n_dense), 6 * n * (r_q + r_kv)
    assert vanishes(per_token - megatron - router + norms)


def test_megatron_num_floating_point_operations_for_gqa():
    """The same function's MHA/GQA branch: 6·(d·(q + 2·kv) + q·s + q·d) per token and layer, q = h·d_h,
    kv = h_kv·d_h, plus SwiGLU 18·d·d_ff and logits 6·d·V: equal to symform's with causal = 1/2."""
    m = model("llama-3.1-8b", causal=HALF)
    d, n, vocab, s, b, d_ff, h, h_kv, d_h = symbols(m, "d_model n_layers vocab seq batch d_ff n_heads n_kv_heads d_head")
    per_token = expression(m, "train_step_flops").xreplace({b: 1}) / s
    q, kv = h * d_h, h_kv * d_h
    megatron = n * (6 * (d * (q + 2 * kv) + q * s / 2 * 2 + q * d) + 18 * d * d_ff) + 6 * d * vocab
    assert vanishes(per_token - megatron)
