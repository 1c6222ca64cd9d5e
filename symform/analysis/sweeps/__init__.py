"""Sweeps: quantities over grids and samples (eager and lazy), generated array kernels, scaling laws."""
