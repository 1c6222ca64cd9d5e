"""One leaf's work on one device, as the point estimate times it: FLOPs, bytes, launches, GEMM shapes, and for a
routed expert's projection its experts and expert-parallel degree (symform.analysis.time.estimate, grouped_gemm)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Kernel:
    """One leaf's work on one device: FLOPs, HBM bytes, how many launches it stands for, and its GEMM rows."""

    path: str
    kind: str  # "gemm", "attention" or "elementwise"
    flops: float
    bytes: float
    calls: float
    rows: float
    # a matrix product's shape on this device, from its declaration: (batches, m, n, k) of the forward
    # product (output rows, output width, reduction); None where the leaf declares none
    shape: tuple[float, float, float, float] | None = None
    # how often each product runs per forward call: (forward, input gradient, weight gradient); training
    # runs all three, a fine-tuning step none of a frozen weight's gradient and only the forward of a leaf
    # autograd never records
    passes: tuple[float, float, float] = (1.0, 0.0, 0.0)
    routed: tuple[float, float] | None = None  # a routed expert's projection: (experts, per token) (grouped_gemm)
    expert_degree: int | None = None  # a training step's expert-parallel degree: its experts run as grouped GEMMs

    @property
    def products(self) -> tuple[tuple[float, float, float], ...]:
        """The output grids (batches, rows, width) of the products the calls run: the forward's, and in
        training the input gradient's (m × k) and the weight gradient's (k × n), where they run at all."""
        return tuple(grid for grid, _ in self._weighted_products())

    @property
    def product_weights(self) -> tuple[float, ...]:
        """How often each of :attr:`products` runs, per forward call."""
        return tuple(weight for _, weight in self._weighted_products())

    def _weighted_products(self) -> list[tuple[tuple[float, float, float], float]]:
        if self.shape is None:
            return []
        b, m, n, k = self.shape
        return [(grid, w) for grid, w in zip(((b, m, n), (b, m, k), (b, k, n)), self.passes) if w > 0]

    @property
    def leaf(self) -> str:
        return self.path.rsplit("/", 1)[-1]
