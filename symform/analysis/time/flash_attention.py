"""HBM traffic of attention: the standard implementation versus FlashAttention.

Counts follow Dao et al. 2022, *FlashAttention: Fast and Memory-Efficient
Exact Attention with IO-Awareness* (arXiv:2205.14135), line by line:
Algorithm 0 (standard forward), Algorithm 3 (standard backward), Algorithm 1
and 2 (FlashAttention forward), Algorithm 4 (FlashAttention backward) and
Algorithm 5 (block-sparse forward). Theorem 2, Theorem 5 and Proposition 4
state the orders Θ(Nd + N²) and Θ(N²d²/M) that these exact counts reduce to.

Units, explicitly:

- every count is in **elements** (matrix entries) for **one attention head
  of one sequence**, as in the paper; multiply by the bytes per element and
  by batch × heads for a layer;
- ``sram`` (the paper's M) is the on-chip SRAM in **elements**, not bytes;
  :func:`sram_elements` converts a size in bytes.

The paper's N is both the number of queries and of keys. Decoding with a
cache has fewer queries than keys, so the general functions take
``queries`` and ``keys`` separately (the outer loop runs over key blocks, the
inner loop over query rows); with ``queries = keys = N`` they are the paper's
counts. The softmax statistics ℓ and m are counted as elements like the rest.
"""

from __future__ import annotations

import sympy

from ...engine.errors import EvaluationError

# The paper's own letters, for the closed forms in docs and tests.
N = sympy.Symbol("N", positive=True, integer=True)
d = sympy.Symbol("d", positive=True, integer=True)
M = sympy.Symbol("M", positive=True, integer=True)
sigma = sympy.Symbol("sigma", positive=True)

Size = int | sympy.Expr

#: On-chip SRAM of one A100 streaming multiprocessor, the device of the paper's
#: measurements ("192KB of on-chip SRAM per each of 108 streaming multiprocessors").
PAPER_SRAM_BYTES = 192 * 1024

#: The on-chip memory the estimates take as the paper's M: FlashAttention-2 and its successors (the kernels of
#: PyTorch's SDPA, cuDNN, Transformer Engine and the serving engines) run the query tiles as the outer loop, and
#: the tiles of one head's keys and values that the query tiles running at once on every SM re-read come from the
#: L2 cache they share, not from HBM; 40 MiB is the A100's L2, the smallest of the GPUs symform's estimates are
#: fitted on (docs/roofline.md, "FlashAttention IO").
DEFAULT_SRAM_BYTES = 40 * 1024 * 1024


def sram_elements(sram_bytes: int, element_bytes: int = 2) -> int:
    """The paper's M: how many elements of ``element_bytes`` each fit in ``sram_bytes`` of SRAM."""
    if sram_bytes <= 0 or element_bytes <= 0:
        raise EvaluationError(
            f"SRAM bytes ({sram_bytes}) and bytes per element ({element_bytes}) must be positive"
        )
    return sram_bytes // element_bytes


def column_block(d: Size, sram: Size) -> sympy.Expr:
    """B_c = ⌈M / 4d⌉: rows of K and V per block, so that K_j, V_j, Q_i and O_i fit in SRAM together."""
    return sympy.ceiling(sympy.sympify(sram) / (4 * d))


def row_block(d: Size, sram: Size) -> sympy.Expr:
    """B_r = min(⌈M / 4d⌉, d): rows of Q and O per block; the cap keeps the B_r × B_c score block within M."""
    return sympy.Min(column_block(d, sram), d)


def column_passes(keys: Size, d: Size, sram: Size) -> sympy.Expr:
    """T_c = ⌈keys / B_c⌉: how many times FlashAttention's outer loop sweeps over Q and O."""
    return sympy.ceiling(sympy.sympify(keys) / column_block(d, sram))


# --- standard attention (S and P materialised in HBM) -----------------------------


def standard_forward(queries: Size, keys: Size, d: Size) -> sympy.Expr:
    """Algorithm 0: read Q, K, write S; read S, write P; read P, V, write O."""
    scores = queries * d + keys * d + queries * keys
    softmax = 2 * queries * keys
    output = queries * keys + keys * d + queries * d
    return sympy.expand(scores + softmax + output)


def standard_backward(queries: Size, keys: Size, d: Size) -> sympy.Expr:
    """Algorithm 3: dV = Pᵀ·dO, dP = dO·Vᵀ, dS from P and dP, dQ = dS·K, dK = dSᵀ·Q (each reads its inputs, writes its output)."""
    d_values = queries * keys + queries * d + keys * d
    d_probabilities = queries * d + keys * d + queries * keys
    d_scores = 3 * queries * keys
    d_queries = queries * keys + keys * d + queries * d
    d_keys = queries * keys + queries * d + keys * d
    return sympy.expand(d_values + d_probabilities + d_scores + d_queries + d_keys)


# --- FlashAttention (tiled, S and P stay on chip) -----------------------------------


def flash_forward(
    queries: Size, keys: Size, d: Size, sram: Size, *, density: Size = 1
) -> sympy.Expr:
    """Algorithm 1/2 (Algorithm 5 with ``density`` < 1: only that fraction of score blocks is visited).

    Initialise O, ℓ, m in HBM; load every K_j, V_j once; for each visited
    (i, j) block read Q_i, O_i, ℓ_i, m_i and write O_i, ℓ_i, m_i back.
    """
    initialise = queries * d + 2 * queries
    keys_and_values = 2 * keys * d
    per_pass = (queries * d + queries * d + 2 * queries) + (queries * d + 2 * queries)
    return (
        initialise + keys_and_values + density * column_passes(keys, d, sram) * per_pass
    )


def flash_backward(
    queries: Size, keys: Size, d: Size, sram: Size, *, density: Size = 1
) -> sympy.Expr:
    """Algorithm 4 (skipping empty blocks as Algorithm 5 does when ``density`` < 1).

    Initialise dQ, dK, dV in HBM; load every K_j, V_j once; for each visited
    block read Q_i, O_i, dO_i, dQ_i, ℓ_i, m_i and write dQ_i; write each dK_j,
    dV_j once.
    """
    initialise = queries * d + 2 * keys * d
    keys_and_values = 2 * keys * d
    per_pass = (4 * queries * d + 2 * queries) + queries * d
    gradients_out = 2 * keys * d
    return (
        initialise
        + keys_and_values
        + gradients_out
        + density * column_passes(keys, d, sram) * per_pass
    )


# --- the paper's square case ---------------------------------------------------------


def standard_accesses(n: Size = N, head_dim: Size = d) -> dict[str, sympy.Expr]:
    """Standard attention on N queries and keys: forward 4Nd + 4N², backward 8Nd + 7N² elements."""
    forward, backward = (
        standard_forward(n, n, head_dim),
        standard_backward(n, n, head_dim),
    )
    return {
        "forward": forward,
        "backward": backward,
        "total": sympy.expand(forward + backward),
    }


def flash_accesses(
    n: Size = N, head_dim: Size = d, sram: Size = M, *, density: Size = 1
) -> dict[str, sympy.Expr]:
    """FlashAttention on N queries and keys: forward 3Nd + 2N + T_c(3Nd + 4N), backward 7Nd + T_c(5Nd + 2N)."""
    forward = flash_forward(n, n, head_dim, sram, density=density)
    backward = flash_backward(n, n, head_dim, sram, density=density)
    return {"forward": forward, "backward": backward, "total": forward + backward}


def leading_ratio(pass_: str = "total") -> sympy.Expr:
    """FlashAttention ÷ standard HBM accesses as N → ∞ with T_c ≈ 4Nd/M: (3d² + 4d)/M forward, (32d² + 24d)/(11M) both passes."""
    smooth = {sympy.ceiling(N / sympy.ceiling(M / (4 * d))): 4 * N * d / M}
    flash = flash_accesses()[pass_].xreplace(smooth)
    return sympy.simplify(sympy.limit(flash / standard_accesses()[pass_], N, sympy.oo))
