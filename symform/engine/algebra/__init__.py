"""Expressions as numbers: multiplied-out sums, Horner forms, exact evaluation, compiled functions, Formula."""
