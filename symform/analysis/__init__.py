"""Analyses built on the engine's expressions: memory, hardware, rooflines, communication, time, plans and sweeps.

They import the engine, never an interface: what they return is data, not text.
"""
