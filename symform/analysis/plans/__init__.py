"""Plans: the fastest training layouts that fit, the cheapest serving layouts under latency targets."""
