"""Communication: collectives' alpha-beta costs, what each kind of parallelism sends, bubbles and speedups."""
