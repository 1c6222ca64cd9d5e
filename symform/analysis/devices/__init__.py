"""Devices and systems from hardware/, and what a run costs on them in money and energy."""
