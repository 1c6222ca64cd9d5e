"""Serving as engines run it: paged KV pool, engine steps, scheduling, speculative decoding, the throughput-latency curve."""
