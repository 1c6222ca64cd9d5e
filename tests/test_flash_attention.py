"""FlashAttention's HBM accesses against Dao et al. 2022 (arXiv:2205.14135), line by line and in order of growth."""

import pytest
import sympy
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.time import flash_attention as fa
from symform.analysis.time.flash_attention import M, N, d
from symform.analysis.time.roofline import phase_work, roofline

GPT2_MEDIUM = {
    "n": 1024,
    "head_dim": 64,
    "heads": 16,
    "batch": 64,
}  # the paper's Fig. 2 setting
A100_SRAM_ELEMENTS = (
    192 * 1024 // 2
)  # "192KB of on-chip SRAM" per SM, in 2-byte elements


def test_sram_is_counted_in_elements():
    assert fa.sram_elements(192 * 1024, 2) == 98_304
    assert fa.sram_elements(192 * 1024, 4) == 49_152


def test_block_sizes_follow_algorithm_1():
    # B_c = ceil(M/4d), B_r = min(ceil(M/4d), d)
    assert fa.column_block(64, 98_304) == 384
    assert fa.row_block(64, 98_304) == 64
    assert fa.row_block(64, 1000) == 4  # ceil(1000/256)
    assert fa.column_passes(1024, 64, 98_304) == 3  # ceil(1024/384)


def test_standard_attention_counts_each_line_of_algorithms_0_and_3():
    n, head = 1024, 64
    forward = (2 * n * head + n * n) + (n * n + n * n) + (n * n + n * head + n * head)
    backward = (
        (n * n + n * head + n * head)  # dV = Pᵀ dO
        + (2 * n * head + n * n)  # dP = dO Vᵀ
        + (2 * n * n + n * n)  # dS
        + (n * n + n * head + n * head)  # dQ = dS K
        + (n * n + n * head + n * head)  # dK = dSᵀ Q
    )
    counts = fa.standard_accesses(n, head)
    assert counts["forward"] == forward
    assert counts["backward"] == backward
    assert fa.standard_accesses()["total"] == 11 * N**2 + 12 * N * d


def test_flash_counts_each_line_of_algorithms_1_and_4():
    n, head, t_c = 1024, 64, 3
    forward = (
        (n * head + 2 * n)
        + 2 * n * head
        + t_c * ((2 * n * head + 2 * n) + (n * head + 2 * n))
    )
    backward = (
        (3 * n * head)
        + 2 * n * head
        + t_c * (4 * n * head + 2 * n + n * head)
        + 2 * n * head
    )
    counts = fa.flash_accesses(n, head, A100_SRAM_ELEMENTS)
    assert counts["forward"] == forward
    assert counts["backward"] == backward


def test_leading_orders_are_theorem_2s():
    # Θ(N²d²/M): the ratio to standard attention's Θ(N²) tends to a multiple of d²/M
    assert sympy.simplify(fa.leading_ratio("forward") - (3 * d**2 + 4 * d) / M) == 0
    assert (
        sympy.simplify(fa.leading_ratio("total") - (32 * d**2 + 24 * d) / (11 * M)) == 0
    )
    assert sympy.limit(fa.standard_accesses()["total"] / N**2, N, sympy.oo) == 11


@settings(max_examples=200, deadline=None)
@given(
    head=st.integers(16, 256),
    sram_factor=st.integers(4, 64),
    length_factor=st.integers(4, 256),
)
def test_flash_moves_less_than_standard_when_n_is_much_larger_than_d(
    head, sram_factor, length_factor
):
    sram = (
        sram_factor * head * head
    )  # M ≥ 4d²: the exact counts need this constant (see the next test)
    n = max(
        length_factor * head, sram // head
    )  # N ≫ d and M ≤ Nd, as Theorem 2 assumes
    flash, standard = fa.flash_accesses(n, head, sram), fa.standard_accesses(n, head)
    assert flash["forward"] < standard["forward"]
    assert flash["backward"] < standard["backward"]


def test_at_sram_of_only_d_squared_flash_forward_moves_more():
    # the constant behind Θ: forward wins only for M > 3d² + 4d as N → ∞
    head, n = 64, 1 << 16
    assert (
        fa.flash_accesses(n, head, head * head)["forward"]
        > fa.standard_accesses(n, head)["forward"]
    )
    assert (
        fa.flash_accesses(n, head, 4 * head * head)["forward"]
        < fa.standard_accesses(n, head)["forward"]
    )


def test_block_sparse_scales_the_quadratic_term_by_the_density():
    dense = fa.flash_forward(N, N, d, M)
    sparse = fa.flash_forward(N, N, d, M, density=fa.sigma)
    assert sympy.expand(sparse.subs(fa.sigma, 1) - dense) == 0
    assert (
        sympy.expand(sparse.subs(fa.sigma, 0) - (3 * N * d + 2 * N)) == 0
    )  # Θ(Nd): O must still be written
    n, head = 4096, 64
    half = fa.flash_forward(
        n, n, head, A100_SRAM_ELEMENTS, density=sympy.Rational(1, 2)
    )
    full = fa.flash_forward(n, n, head, A100_SRAM_ELEMENTS)
    assert half < full < 2 * half + 1


def test_gpt2_medium_traffic_against_figure_2():
    # Fig. 2 reports 40.3 GB (standard, with masking and dropout) → 4.4 GB (FlashAttention)
    heads = GPT2_MEDIUM["heads"] * GPT2_MEDIUM["batch"]
    standard = (
        2
        * heads
        * fa.standard_accesses(GPT2_MEDIUM["n"], GPT2_MEDIUM["head_dim"])["total"]
    )
    flash = (
        2
        * heads
        * fa.flash_accesses(
            GPT2_MEDIUM["n"], GPT2_MEDIUM["head_dim"], A100_SRAM_ELEMENTS
        )["total"]
    )
    assert 4.4e9 * 0.9 < flash < 4.4e9 * 1.15
    assert standard < 40.3e9  # Algorithm 0 has no masking or dropout passes
    assert standard / flash > 4


@pytest.fixture(scope="module")
def llama():
    return symform.load("llama-3-8b")


def test_flash_in_a_model_replaces_only_the_attention_cores_traffic(llama):
    batch, seq = 4, 2048
    eager = roofline(llama, "h100-sxm", phase="prefill", batch=batch, seq=seq, depth=3)
    flash = roofline(
        llama, "h100-sxm", phase="prefill", batch=batch, seq=seq, depth=3, flash=True
    )
    assert flash.total.flops == eager.total.flops
    assert flash.total.bytes < eager.total.bytes
    assert (
        flash.components["layers/mlp/down_proj"].bytes
        == eager.components["layers/mlp/down_proj"].bytes
    )
    v = llama.values
    sram = fa.DEFAULT_SRAM_BYTES // 2
    per_head = fa.flash_forward(seq, seq, v["d_head"], sram)
    # a grouped-query kernel loads each key/value head once for the query heads sharing it
    shared_loads = (v["n_heads"] - v["n_kv_heads"]) * 2 * seq * v["d_head"]
    assert (
        flash.components["layers/attn/core"].bytes
        == 2 * batch * v["n_layers"] * (v["n_heads"] * per_head - shared_loads)
    )


def test_flash_training_step_recomputes_the_scores(llama):
    batch, seq = 2, 1024
    eager = roofline(llama, "h100-sxm", phase="train", batch=batch, seq=seq)
    flash = roofline(llama, "h100-sxm", phase="train", batch=batch, seq=seq, flash=True)
    v = llama.values
    scores = (
        2 * batch * v["n_heads"] * seq * v["d_head"] * seq * v["n_layers"]
    )  # Q·Kᵀ once more in backward
    assert flash.total.flops - eager.total.flops == scores


def test_flash_decode_reads_the_cache_once_per_query_head(llama):
    work = phase_work(llama, "decode", depth=3, flash=True).components[
        "layers/attn/core"
    ]
    assert llama.vocabulary["past"] in work.bytes.free_symbols
