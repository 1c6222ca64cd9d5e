"""symform: symbolic cost formulas for transformer models.

>>> import symform
>>> model = symform.load("qwen3-32b")
>>> model.evaluate("params")
32762123264
>>> symform.derive(model, "params", assume="standard", leading=True).result
12*d_model**2*n_layers
"""

import importlib
import importlib.machinery
import importlib.util
import sys

# The names users reach for, loaded on first use: ``symform --help`` and ``symform models`` never import sympy.
_EXPORTS = {
    "ConfigError": "engine.errors",
    "DeclarationError": "engine.errors",
    "EvaluationError": "engine.errors",
    "ExpressionError": "engine.errors",
    "SymformError": "engine.errors",
    "Derivation": "engine.graph.derive",
    "derive": "engine.graph.derive",
    "leading_order": "engine.graph.derive",
    "presets": "engine.language.families",
    "supported_model_types": "engine.language.families",
    "Formula": "engine.algebra.formula",
    "Model": "engine.graph.model",
    "quantity_names": "engine.graph.model",
    "load": "engine.graph.model",
    "vocabulary": "engine.language.vocabulary",
    "device_names": "analysis.devices.hardware",
    "load_device": "analysis.devices.hardware",
    "sweep": "analysis.sweeps.sweeps",  # symform.sweep(model, quantities, grid=...)
    "SweepResult": "analysis.sweeps.sweeps",
}
_RENAMED = {"load": ("Model", "load"), "vocabulary": ("default_vocabulary",)}

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

# Every module sits on one of three floors (docs/architecture.md): the engine, the
# analyses built on it, and the interfaces that present them. The flat names that
# users import (`symform.analysis.memory.memory`, `from symform.analysis.devices.hardware import ...`) stay valid: they
# name the same module objects, loaded on first use, so a command pays only for what it
# uses and `import symform` stays close to `import sympy`.
_FLOORS = ("engine", "analysis", "interface")


def _floor_of(module: str) -> str | None:
    """The floor whose package holds ``module`` (module names are unique across floors: a test checks)."""
    if not module.isidentifier():
        return None
    for floor in _FLOORS:
        if importlib.util.find_spec(f"{__name__}.{floor}.{module}") is not None:
            return floor
    return None


class _FlatNames:
    """Resolves ``symform.<module>`` to ``symform.<floor>.<module>``: one module object under both names.
    A meta path finder and its loader by their methods (importlib.abc's base classes would import
    importlib.resources, a tenth of the start-up of a command answered from kept results)."""

    def __init__(self) -> None:
        self.own_specs: dict[str, importlib.machinery.ModuleSpec] = {}

    def find_spec(self, fullname, path=None, target=None):
        package, _, module = fullname.partition(".")
        if package != __name__ or "." in module or module in globals() or module in _EXPORTS or _floor_of(module) is None:
            return None  # `symform.derive` stays the function: its module is symform.engine.graph.derive
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        module = spec.name.partition(".")[2]
        real = importlib.import_module(f".{_floor_of(module)}.{module}", __name__)
        self.own_specs[real.__name__] = real.__spec__
        return real

    def exec_module(self, module):
        # Already executed under its floor's name. The import system stamped the flat name's
        # spec and loader on it: give back its own (reload and tracebacks use them).
        module.__spec__ = self.own_specs[module.__name__]
        module.__loader__ = module.__spec__.loader


sys.meta_path.append(_FlatNames())


def __getattr__(name: str):
    if name == "__version__":  # read on first use: a checkout's pyproject.toml or the installed metadata
        from .engine.store.data import version

        return version()
    if name in _EXPORTS:
        value = importlib.import_module(f".{_EXPORTS[name]}", __name__)
        for attribute in _RENAMED.get(name, (name,)):
            value = getattr(value, attribute)
        globals()[name] = value  # looked up once
        return value
    if not name.startswith("__") and _floor_of(name) is not None:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'symform' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
