"""symform: symbolic cost formulas for transformer models.

>>> import symform
>>> model = symform.load("qwen3-32b")
>>> model.evaluate("params")
32762123264
>>> symform.derive(model, "params", assume="standard", leading=True).result
12*d_model**2*n_layers
"""

from .derive import Derivation, derive, leading_order
from .errors import ConfigError, DeclarationError, EvaluationError, ExpressionError, SymformError
from .families import presets, supported_model_types
from .formula import Formula
from .model import Model, quantity_names
from .vocabulary import default_vocabulary as vocabulary

load = Model.load

__all__ = [
    "ConfigError",
    "DeclarationError",
    "Derivation",
    "EvaluationError",
    "ExpressionError",
    "Formula",
    "Model",
    "SymformError",
    "derive",
    "device_names",
    "leading_order",
    "load",
    "load_device",
    "presets",
    "quantity_names",
    "supported_model_types",
    "sweep",
    "vocabulary",
]

# Modules for the other verbs load on first use (symform.memory, symform.timing, ...): a
# command pays only for what it uses, and `import symform` stays close to `import sympy`.
_MODULES = (
    "collectives", "parallel_comm", "scaling", "flash_attention", "roofline", "timing", "scaling_laws",
    "memory", "planner", "plots", "notebook", "sweeps",
)  # fmt: skip


def __getattr__(name: str):
    import importlib

    if name in _MODULES:
        return importlib.import_module(f".{name}", __name__)
    if name in ("device_names", "load_device"):
        return getattr(importlib.import_module(".hardware", __name__), name)
    if name in ("sweep", "SweepResult"):  # symform.sweep(model, quantities, grid=...)
        return getattr(importlib.import_module(".sweeps", __name__), name)
    raise AttributeError(f"module 'symform' has no attribute {name!r}")
