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
from .hardware import device_names, load_device
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
    "vocabulary",
]

from . import collectives as collectives  # docs/parallelism.md
from . import parallel_comm as parallel_comm
from . import scaling as scaling
from . import flash_attention as flash_attention  # docs/roofline.md
from . import roofline as roofline
from . import timing as timing  # docs/time.md
from . import scaling_laws as scaling_laws  # compute-optimal N and D, training time and cost
from .sweep import SweepResult, sweep  # symform.sweep is the function; the module is sys.modules["symform.sweep"]
