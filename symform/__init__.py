"""symform: symbolic cost formulas for transformer models.

>>> import symform
>>> model = symform.load("qwen3-32b")
>>> model.evaluate("params")
32762123264
>>> symform.derive(model, "params", assume="standard", leading=True).result
12*d_model**2*n_layers

The names below are symform's public API, each importable as ``symform.<name>``. Every other
object lives in its module under one path only (``symform.analysis.memory.memory``,
docs/architecture.md), never under a second, shorter alias.
"""

# name -> (module under symform, attribute there). Loaded on first use: ``import symform``,
# ``symform --help`` and ``symform models`` never import sympy.
_EXPORTS = {
    # errors users catch
    "SymformError": ("engine.errors", "SymformError"),
    "ConfigError": ("engine.errors", "ConfigError"),
    "DeclarationError": ("engine.errors", "DeclarationError"),
    "EvaluationError": ("engine.errors", "EvaluationError"),
    "ExpressionError": ("engine.errors", "ExpressionError"),
    # models and their expressions
    "load": ("engine.graph.model", "Model.load"),
    "Model": ("engine.graph.model", "Model"),
    "quantity_names": ("engine.graph.model", "quantity_names"),
    "Formula": ("engine.algebra.formula", "Formula"),
    "derive": ("engine.graph.derive", "derive"),
    "Derivation": ("engine.graph.derive", "Derivation"),
    "leading_order": ("engine.graph.derive", "leading_order"),
    "presets": ("engine.language.families", "presets"),
    "supported_model_types": ("engine.language.families", "supported_model_types"),
    "vocabulary": ("engine.language.vocabulary", "default_vocabulary"),
    # devices
    "load_device": ("analysis.devices.hardware", "load_device"),
    "device_names": ("analysis.devices.hardware", "device_names"),
    "run_cost": ("analysis.devices.cost", "run_cost"),
    # memory
    "training_memory": ("analysis.memory.memory", "training_memory"),
    "inference_memory": ("analysis.memory.memory", "inference_memory"),
    "Layout": ("analysis.memory.settings", "Layout"),
    "Training": ("analysis.memory.memory", "Training"),
    "Inference": ("analysis.memory.memory", "Inference"),
    "FineTune": ("analysis.memory.finetune", "FineTune"),
    # time
    "training_time": ("analysis.time.timing", "training_time"),
    "inference_time": ("analysis.time.phase_time", "inference_time"),
    "prefill_time": ("analysis.time.phase_time", "prefill_time"),
    "decode_time": ("analysis.time.phase_time", "decode_time"),
    "training_estimate": ("analysis.time.estimate", "training_estimate"),
    # plans and sweeps
    "plan": ("analysis.plans.planner", "plan"),
    "sweep": ("analysis.sweeps.sweeps", "sweep"),
    "SweepResult": ("analysis.sweeps.sweep_quantities", "SweepResult"),
    "lazy_sweep": ("analysis.sweeps.lazy_sweeps", "lazy_sweep"),
    # notebooks
    "breakdown": ("interface.papers.notebook", "breakdown"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name == "__version__":  # read on first use: a checkout's pyproject.toml or the installed metadata
        from .engine.store.data import version

        return version()
    if name not in _EXPORTS:
        raise AttributeError(f"module 'symform' has no attribute {name!r}")
    from importlib import import_module

    module, path = _EXPORTS[name]
    value = import_module(f"{__name__}.{module}")
    for attribute in path.split("."):
        value = getattr(value, attribute)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
