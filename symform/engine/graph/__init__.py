"""The component graph and Model: composition, evaluation, size checks, block forms and derivations."""
