"""Tile and wave quantisation of a GEMM's output over a device's SMs (the ``waves`` GEMM model of
symform.analysis.estimate)."""

from __future__ import annotations

import math
from collections.abc import Sequence


def wave_efficiency(batches: float, rows: float, width: float, tile_m: int, tile_n: int, sms: int) -> float:
    """The fraction of the SMs' tile slots that do useful work for a product with a ``batches`` × ``rows`` ×
    ``width`` output. The output is cut into ⌈rows/tile_m⌉·⌈width/tile_n⌉ tiles per batch, each SM working
    on one at a time; a grid of fewer tiles than SMs has its reduction split among ⌊sms/tiles⌋ of them
    (split-K), so ⌈tiles·split/sms⌉ waves of ``sms`` slots run, each slot 1/split of a tile's work."""
    tiles = math.ceil(batches) * math.ceil(rows / tile_m) * math.ceil(width / tile_n)
    split = max(1, sms // tiles)
    waves = math.ceil(tiles * split / sms)
    return batches * rows * width * split / (waves * sms * tile_m * tile_n)


def best_tile_efficiency(batches: float, rows: float, width: float, tiles: Sequence[tuple[int, int]], sms: int) -> float:
    """:func:`wave_efficiency` at the tile that keeps most of the SMs busy: the library's choice among the
    tile shapes it has kernels for (cuBLAS's heuristics and autotuners choose per problem size)."""
    return max(wave_efficiency(batches, rows, width, tile_m, tile_n, sms) for tile_m, tile_n in tiles)
