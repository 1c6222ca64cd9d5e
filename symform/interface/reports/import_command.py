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
    from ...analysis.memory.module_import import fit

    config, origin = _source(args.source)
    name = args.name or str(config.get("model_type"))
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,100}", name):
        raise ConfigError(f"--name {name[:40]!r}: give letters, digits, '_', '-' or '.' (at most 100)")
    fitted = fit(config, origin)
    text, bound, not_exact = imported(fitted, name, origin)
    if args.out:
        _write(Path(args.out), text)
    exact = [q for q in QUANTITIES if q not in not_exact]
    if args.json:
        summary = {"model": name, "class": fitted.model_class, "parameters": fitted.parameters, "fields": {f: fitted.config[f] for f in bound}, "builds": fitted.builds, "exact": exact, "not_exact": not_exact, "out": args.out}
        return json.dumps(summary if args.out else {**summary, "text": text})
    if args.out:
        inexact = "".join(f"\n  not exact: {q}: {why}" for q, why in not_exact.items())
        return f"wrote {args.out}: {fitted.model_class}, {fitted.parameters:,} parameters, sizes bound to {', '.join(bound) or 'no field'}; exact in {', '.join(exact)}{inexact}"
    return text.rstrip("\n")


QUANTITIES = ("params", "forward_flops", "kv_cache", "recurrent_state")  # what an imported declaration is set beside PyTorch in
VERIFY_SEQ = 8  # tokens per sequence of the meta-device forward, unless a sliding window needs more to show


def imported(fitted, name: str, origin: str) -> tuple[str, list[str], dict[str, str]]:
    """The declaration's text, the fields it binds and the quantities it does not count as PyTorch does (with
    why): parameters are confirmed (or the import refused); forward FLOPs and the caches are set beside one
    forward of transformers' model on the meta device, and what differs or cannot be run is named in the file."""
    from ...analysis.memory.declaration_text import declaration_text
    from ...analysis.memory.module_import import meta_forward

    text, bound = declaration_text(fitted, name, origin)
    confirm(text, fitted, origin)
    config, run = fitted.config, meta_forward(fitted.config, _verify_seq(fitted))
    if isinstance(run, str):  # a router that picks experts by value: the forward of a tiny copy, on the CPU
        config, run = _on_the_cpu(fitted, run)
    if isinstance(run, str):
        why = f"not verified: transformers' forward does not run on the meta device ({run[:160]})"
        not_exact = {"forward_flops": why + _experts_hint(fitted), "kv_cache": why, "recurrent_state": why}
        return (*declaration_text(fitted, name, origin, not_exact=not_exact), not_exact)
    caches = True
    ours = _counted(text, config, run)
    if run.kv_cache == 0 and ours["kv_cache"]:  # a forward that keeps no keys and values (GPT-1's): none declared
        caches = False
        text, bound = declaration_text(fitted, name, origin, caches=False)
        ours = _counted(text, config, run)
    not_exact = _differences(ours, run, fitted)
    if not_exact:
        text, bound = declaration_text(fitted, name, origin, caches=caches, not_exact=not_exact)
    return text, bound, not_exact


CPU_PARAMETERS = 10**7  # a tiny copy run for real where the meta device cannot run the forward: small enough to be quick


def _on_the_cpu(fitted, why: str):
    """The config shrunk to symform check's tiny sizes and its forward on the CPU, or why not (as given, where the
    tiny copy is too large or cannot run either)."""
    from ...analysis.memory.module_import import meta_forward, meta_parameters
    from ...analysis.memory.oracle_check import tiny_config

    tiny = tiny_config(fitted.config)
    count = meta_parameters(tiny)
    if count is None or count > CPU_PARAMETERS:
        return fitted.config, why
    run = meta_forward(tiny, VERIFY_SEQ, device="cpu")
    return (tiny, run) if not isinstance(run, str) else (fitted.config, why)


def _verify_seq(fitted) -> int:
    """Enough tokens that a sliding window's cache keeps fewer than every one (within the positions it has)."""
    windows = [int(d) for d in _attention_leaves(fitted.tree, fitted.config) if d]
    seq = max([VERIFY_SEQ, *(w + 2 for w in windows)])
    limit = fitted.config.get("max_position_embeddings")
    return min(seq, limit) if isinstance(limit, int) and limit >= VERIFY_SEQ else seq


def _attention_leaves(tree: tuple, config) -> list:
    """The window of every attention leaf of the tree, at the config's values (0 for one without a window)."""
    import sympy

    if tree[0] == "leaf":
        if tree[1] != "attention":
            return []
        return [sympy.sympify(tree[3][4]).subs({sympy.Symbol(k): v for k, v in config.items() if isinstance(v, int)}) if tree[2][0] else 0]
    if tree[0] == "group":
        return [w for _, element in tree[1] for w in _attention_leaves(element, config)]
    return [w for _, part in tree[2] for w in _attention_leaves(part, config)]


def _attention_classes(tree: tuple) -> set[str]:
    if tree[0] == "leaf":
        return set()
    if tree[0] == "group":
        return {c for _, element in tree[1] for c in _attention_classes(element)}
    own = {tree[1]} if any(name == "@attention" for name, _ in tree[2]) else set()
    return own | {c for _, part in tree[2] for c in _attention_classes(part)}


def _counted(text: str, config, run) -> dict[str, int]:
    """The declaration's forward FLOPs and caches at ``config`` for the forward's tokens, counted as symform
    check does (eager accounting, float32)."""
    from ...engine.graph.model import Model
    from ...engine.language.userfile import load_declaration_file

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "imported.toml"
        path.write_text(text, encoding="utf-8")
        spec, library = load_declaration_file(path, config=config)
    model = Model(spec, library=library).with_accounting("eager").with_conventions(act_bytes=4, kv_bytes=4, cpu_kernels=1, training=0)
    return {q: int(model.evaluate(q, batch=run.batch, seq=run.seq)) for q in ("forward_flops", "kv_cache", "recurrent_state")}


def _differences(ours: dict[str, int], run, fitted) -> dict[str, str]:
    at = f"batch {run.batch} × seq {run.seq}, transformers' model on the meta device" if run.device == "meta" else f"batch {run.batch} × seq {run.seq}, a tiny copy of transformers' model on the CPU"
    not_exact = {}
    if ours["forward_flops"] != run.flops:
        mapped = _attention_classes(fitted.tree) | {"Linear", "Conv1D"}
        unmapped = sorted(c for c in run.own_flops if c not in mapped)
        where = f"products symform import does not map: {', '.join(unmapped)}" if unmapped else "the declared products differ"
        not_exact["forward_flops"] = f"{ours['forward_flops']:,} where PyTorch's FlopCounterMode counts {run.flops:,} ({at}); {where}{_experts_hint(fitted)}"
    for quantity, theirs, what in (("kv_cache", run.kv_cache, "keys and values"), ("recurrent_state", run.recurrent_state, "recurrent state (conv windows, scan states)")):
        if theirs is None:
            not_exact[quantity] = f"not verified: transformers' cache has no layers to read ({at})"
        elif ours[quantity] != theirs:
            not_exact[quantity] = f"{ours[quantity]:,} bytes where transformers' cache keeps {theirs:,} bytes of {what} ({at}, float32)"
    return not_exact


def _experts_hint(fitted) -> str:
    text = repr(fitted.tree).lower()
    return "; routed experts: PyTorch runs each token through its top-k of them, which symform import does not map" if "experts" in text else ""


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
    if re.fullmatch(r"[a-z0-9_-]{1,64}", source) and not path.exists():
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
