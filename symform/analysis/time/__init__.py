"""Time: rooflines, FlashAttention's IO, expert routing, step-time bounds and estimates, calibration and utilisation."""
