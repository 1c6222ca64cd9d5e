"""A census, not a timing: which of transformers' model types symform reads, and how exactly.

    python benchmarks/model_types.py            # one line per model type, then the counts
    python benchmarks/model_types.py --json     # the same as one JSON object

For every model type transformers knows (its CONFIG_MAPPING), the config class's
defaults are written out as a config.json would hold them, naming the causal-LM
class (else the image-text-to-text class, else the first model class) under
``architectures``. symform then reads it: a refusal by name is ``refused``; a
config it reads goes through ``symform check`` (the config shrunk to tiny sizes,
transformers' module built in float32 with eager attention and eager experts on
the CPU), and is ``exact`` where parameters, forward FLOPs and the cache equal
PyTorch's, ``differs`` otherwise (the rows that differ are named). Anything else
that goes wrong is ``crash`` (symform) or ``no oracle`` (transformers could not
build or run its own module). Where transformers cannot build or run its own
defaults (a field its config class leaves null that its module needs), the first
bundled preset of that type, a published config.json, is shrunk and checked
instead, and its row says so (``config``). Saved activations are reported beside, not counted.
Needs torch and transformers (the ``oracle`` extra); takes a few minutes on a CPU.

    python benchmarks/model_types.py --import   # also import each refused causal-LM type (much longer)

With ``--import``, a type no bundled family reads that has a causal-LM class is imported as
benchmarks/import_reach.py imports it (``symform import`` at its tiny config, then ``symform check``): it is
``exact (imported)`` where the declaration's parameters, forward FLOPs and caches equal PyTorch's and it names
no quantity not exact, and stays ``refused`` otherwise (the import's verdict kept under ``imported``). The
totals count exact types read by a bundled family and by an imported declaration apart.
"""

from __future__ import annotations

import argparse
import json
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

EXACT_QUANTITIES = ("params", "forward_flops", "kv_cache")  # what "exact" requires


# the tasks whose model types the census counts apart (the ones a user runs: generation, image-text, encoders, speech)
TASKS = (
    "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES", "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES", "MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES", "MODEL_FOR_CTC_MAPPING_NAMES",
)  # fmt: skip


def task_types(transformers) -> set[str]:
    auto = transformers.models.auto.modeling_auto
    return {model_type for name in TASKS for model_type in getattr(auto, name, {})}


def named_class(transformers, model_type: str) -> str | None:
    """The class a checkpoint of this type names first: its causal LM, else its image-text-to-text class, else
    its sequence-to-sequence or speech-to-text generation class (T5's, Whisper's), else its masked LM."""
    auto = transformers.models.auto.modeling_auto
    tasks = (auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, auto.MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES, auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES,
             auto.MODEL_FOR_SPEECH_SEQ_2_SEQ_MAPPING_NAMES, auto.MODEL_FOR_MASKED_LM_MAPPING_NAMES)  # fmt: skip
    for mapping in (*tasks, auto.MODEL_MAPPING_NAMES):
        name = mapping.get(model_type)
        if isinstance(name, str):
            return name
    return None


def default_config(transformers, model_type: str) -> dict:
    """The config class's defaults as a config.json holds them (save_pretrained's keys)."""
    config = transformers.AutoConfig.for_model(model_type).to_dict()
    cls = named_class(transformers, model_type)
    config["architectures"] = [cls] if cls else None
    return json.loads(json.dumps(config, default=str))


def imported_status(row: dict, transformers, workdir: Path) -> dict:
    """A refused causal-LM type through symform import and symform check (benchmarks/import_reach.py)."""
    import torch

    if row["status"] != "refused" or row["model_type"] not in transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        return row
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from import_reach import on_time

    result = on_time(row["model_type"], transformers, torch, workdir, True)
    verdict = result.get("check") or f"{result['status']}: {result.get('why', '')[:120]}"
    return {**row, "status": "exact (imported)" if result.get("all_exact") else row["status"], "imported": verdict}


def type_preset(model_type: str) -> tuple[str, dict] | None:
    """A bundled preset of this model type (a published config.json), the first by name, or None."""
    from symform.engine.language.families import preset_config, presets

    for name in sorted(presets()):
        config, _ = preset_config(name)
        if config.get("model_type") == model_type:
            return name, config
    return None


def census_of(model_type: str, transformers, config: dict | None = None) -> dict:
    from symform.analysis.memory.oracle_check import OracleFails, check, transformers_refusal
    from symform.engine.language.families import supported_model_types
    from symform.engine.errors import SymformError
    from symform.engine.graph.model import Model

    try:
        config = config or default_config(transformers, model_type)
    except Exception as e:  # noqa: BLE001 - transformers' own config class cannot be built without arguments
        return {"model_type": model_type, "status": "no oracle", "why": f"config: {type(e).__name__}: {str(e)[:120]}"}
    try:
        model = Model.from_config(config, name=model_type)
        model.evaluate("params")
    except SymformError as e:
        if model_type in supported_model_types() and (theirs := transformers_refusal(config, model_type)) is not None:
            return {"model_type": model_type, "status": "no oracle", "why": f"{theirs[:120]} (symform: {str(e)[:80]})"}  # a config transformers cannot run either
        return {"model_type": model_type, "status": "refused", "why": str(e)[:160]}
    except Exception as e:  # noqa: BLE001 - a crash is what the census looks for
        return {"model_type": model_type, "status": "crash", "why": f"{type(e).__name__}: {str(e)[:160]}"}
    try:
        report = check(model)
    except OracleFails as e:  # transformers' own module fails for this config: nothing to compare with
        return {"model_type": model_type, "family": model.spec.family, "status": "no oracle", "why": str(e)[:160]}
    except SymformError as e:
        return {"model_type": model_type, "family": model.spec.family, "status": "refused", "why": str(e)[:160]}
    except Exception as e:  # noqa: BLE001 - transformers could not build or run the tiny module
        return {"model_type": model_type, "family": model.spec.family, "status": "no oracle", "why": f"{type(e).__name__}: {str(e)[:160]}"}
    wrong = sorted({r.quantity for r in report.differences})
    status = "exact" if not set(wrong) & set(EXACT_QUANTITIES) else "differs"
    return {"model_type": model_type, "family": model.spec.family, "status": status, "differs_in": wrong}


def census(only: list[str] | None = None, run_import: bool = False) -> list[dict]:
    import tempfile

    import transformers

    transformers.logging.set_verbosity_error()
    types = sorted(only or transformers.models.auto.configuration_auto.CONFIG_MAPPING_NAMES)
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for model_type in types:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results.append(census_of(model_type, transformers))
                if results[-1]["status"] == "no oracle" and (preset := type_preset(model_type)) is not None:
                    # transformers cannot build or run its own defaults: the bundled published config, shrunk alike
                    row = census_of(model_type, transformers, preset[1])
                    results[-1] = {**row, "config": f"preset {preset[0]} (the defaults: {results[-1]['why'][:100]})"}
                if run_import:
                    results[-1] = imported_status(results[-1], transformers, Path(workdir))
            print(f"{results[-1]['model_type']:32s} {results[-1]['status']}", file=sys.stderr, flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("types", nargs="*", help="only these model types (all of transformers' by default)")
    parser.add_argument("--import", dest="run_import", action="store_true", help="import each refused causal-LM type (symform import, then symform check)")
    args = parser.parse_args()
    import transformers

    results = census(args.types, args.run_import)
    tasks = task_types(transformers)
    statuses = ("exact", "exact (imported)", "differs", "refused", "crash", "no oracle")
    counts = {status: sum(1 for r in results if r["status"] == status) for status in statuses}
    task_counts = {status: sum(1 for r in results if r["status"] == status and r["model_type"] in tasks) for status in statuses}
    exact = {"bundled": counts["exact"], "imported": counts["exact (imported)"], "total": counts["exact"] + counts["exact (imported)"]}
    if args.json:
        print(json.dumps({"counts": counts, "total": len(results), "exact": exact, "task_counts": task_counts, "task_total": len(tasks & {r["model_type"] for r in results}), "types": results}, indent=1))
        return
    for r in results:
        if r["status"] in ("exact", "exact (imported)", "differs", "crash") or "imported" in r:
            print(f"{r['model_type']:32s} {r['status']:16s} {r.get('family', '')} {', '.join(r.get('differs_in', [])) or r.get('imported') or r.get('why', '')}")
    print(f"{len(results)} config types: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    print(f"exact: {exact['total']} ({exact['bundled']} read by a bundled family, {exact['imported']} through symform import)")
    print(f"{sum(task_counts.values())} with a causal-LM, image-text, masked-LM, seq2seq or speech class: " + ", ".join(f"{n} {s}" for s, n in task_counts.items()))


if __name__ == "__main__":
    main()
