"""Memory: training and serving budgets, frameworks, quantization, offload, fine-tuning, their validations and the oracle check."""
