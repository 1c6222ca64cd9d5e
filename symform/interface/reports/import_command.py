"""``symform import CONFIG|TYPE``: a declaration file for a transformers causal LM that no bundled family reads.

transformers (the ``oracle`` extra) builds the model on the meta device; symform maps its modules to primitives,
groups its layers and binds every size to the config's fields (symform/analysis/memory/module_import.py). The file
loads as any declaration does (``symform params OUT.toml``) and ``symform check OUT.toml`` sets it beside the
real module.
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
from pathlib import Path

from ...engine.errors import ConfigError


def import_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="CONFIG|TYPE", help="a config.json (or a folder holding one), or a model type transformers knows (its config class's defaults)")
    p.add_argument("--out", metavar="FILE.toml", help="write the declaration there (default: print it)")
    p.add_argument("--name", help="the model's name in the declaration (default: the model type)")
    p.add_argument("--json", action="store_true", help="print a JSON summary (and the declaration under 'text' without --out)")


def import_command(args: argparse.Namespace) -> str:
    from ...analysis.memory.declaration_text import declaration_text
    from ...analysis.memory.module_import import fit

    config, origin = _source(args.source)
    name = args.name or str(config.get("model_type"))
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", name):
        raise ConfigError(f"--name {name[:40]!r}: give letters, digits, '_', '-' or '.' (at most 100)")
    fitted = fit(config, origin)
    text, bound = declaration_text(fitted, name, origin)
    confirm(text, fitted, origin)
    if args.out:
        _write(Path(args.out), text)
    if args.json:
        summary = {"model": name, "class": fitted.model_class, "parameters": fitted.parameters, "fields": {f: fitted.config[f] for f in bound}, "builds": fitted.builds, "out": args.out}
        return json.dumps(summary if args.out else {**summary, "text": text})
    if args.out:
        return f"wrote {args.out}: {fitted.model_class}, {fitted.parameters:,} parameters, sizes bound to {', '.join(bound) or 'no field'}"
    return text.rstrip("\n")


def confirm(text: str, fitted, origin: str) -> None:
    """The declaration, loaded as any file is, counts PyTorch's parameters at the config and at a second config
    with every field the probes changed doubled (where transformers builds that one); else it is refused rather than written:
    a size that follows a field at the probes' sizes and another beyond them would be a silent wrong number."""
    from ...analysis.memory.module_import import ImportRefused, meta_parameters
    from ...engine.graph.model import Model
    from ...engine.language.userfile import load_declaration_file

    second = {**fitted.config, **{f: 2 * fitted.config[f] for f in fitted.varied}}
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "imported.toml"
        path.write_text(text, encoding="utf-8")
        for config, expected, what in ((fitted.config, fitted.parameters, "at its config"), (second, None, f"with {', '.join(fitted.varied)} doubled")):
            expected = expected if expected is not None else meta_parameters(config)
            if expected is None:
                continue  # transformers refuses the doubled sizes: nothing to set beside
            spec, library = load_declaration_file(path, config=config)
            ours = int(Model(spec, library=library).evaluate("params"))
            if ours != expected:
                raise ImportRefused(f"{origin}: {what}, the imported declaration counts {ours:,} parameters where PyTorch counts {expected:,}; a size follows config fields the fit could not tell apart, so it is refused rather than written")


def _source(source: str) -> tuple[dict, str]:
    """A config file's contents, or a model type's defaults (a type is a bare name, not a path)."""
    from ...engine.language.families import load_config_file

    path = Path(source)
    if re.fullmatch(r"[a-z0-9_]{1,64}", source) and not path.exists():
        return {"model_type": source}, source
    config = load_config_file(path)
    if not isinstance(config, dict):
        raise ConfigError(f"{source}: a config must be a JSON object, got {type(config).__name__}")
    return config, source


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as e:
        raise ConfigError(f"{path}: cannot write ({e.strerror or type(e).__name__}); give a writable path for --out") from None
