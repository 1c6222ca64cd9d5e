"""A census, not a timing: how many of transformers' causal-LM model types `symform import` reads exactly.

    python benchmarks/import_reach.py             # one line per model type, then the counts and the top refusals
    python benchmarks/import_reach.py --json      # the same as one JSON object
    python benchmarks/import_reach.py phi opt     # some model types only

For every model type with a causal-LM class in transformers (MODEL_FOR_CAUSAL_LM_MAPPING_NAMES), the config
class's defaults, shrunk to check.toml's tiny sizes as `symform check` shrinks them, are imported
(symform/analysis/memory/module_import.py). The declaration's parameter count is set beside PyTorch's numel() of the
model on the meta device, at that config and at a second one whose fields the fit changed are all doubled (a size copied
as a number would be right at the first and wrong at the second). A type is

- ``exact``: both counts equal PyTorch's;
- ``exact once``: the first does, the second does not (a size bound to the wrong field);
- ``differs``: the first does not;
- ``refused``: symform import refuses it in one line (the reason is kept): the command sets its declaration
  beside PyTorch at both configs itself before it writes it, so that ``exact once`` and ``differs`` are
  refusals there and here;
- ``no oracle``: transformers cannot build its own default model on the meta device;
- ``crash``: anything else (a bug to fix).

``bundled`` says whether a bundled family reads the type already. With ``--check``, `symform check` also runs
each exact declaration on the CPU (forward FLOPs and the KV cache beside PyTorch's): a type counts as exact in
params, forward FLOPs and caches where every total agrees and the file names no quantity not exact (what symform
import could not map, [model.not_exact]). Needs torch and
transformers (the ``oracle`` extra); takes several minutes on a CPU.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import warnings
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run from a checkout without installing
    sys.path.insert(0, str(ROOT))

SECONDS = 120  # a type that takes longer is reported as such, not waited for


class _Late(Exception):
    pass


def _meta_numel(transformers, torch, config: dict) -> int:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        hf = transformers.AutoConfig.for_model(**config)
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(hf)
    return sum(p.numel() for p in model.parameters())


def _doubled(config: dict, fields: list[str]) -> dict:
    return {**config, **{f: 2 * config[f] for f in fields}}


def census_of(model_type: str, transformers, torch, workdir: Path, run_check: bool) -> dict:
    from symform.analysis.memory.module_import import fit
    from symform.analysis.memory.oracle_check import tiny_config
    from symform.engine.errors import SymformError
    from symform.engine.language.families import families
    from symform.engine.graph.model import Model
    from symform.engine.language.userfile import load_declaration_file
    from symform.interface.reports.import_command import imported

    row: dict = {"model_type": model_type, "bundled": model_type in families()}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            defaults = json.loads(json.dumps(transformers.AutoConfig.for_model(model_type).to_dict(), default=str))
        try:
            config = tiny_config(defaults)
            expected = _meta_numel(transformers, torch, config)
        except Exception:  # noqa: BLE001 - a per-layer list the tiny table does not cut: the defaults themselves
            config = defaults
            expected = _meta_numel(transformers, torch, config)
    except Exception as e:  # noqa: BLE001 - transformers' own default model cannot be built
        return {**row, "status": "no oracle", "why": f"{type(e).__name__}: {str(e)[:120]}"}
    try:
        fitted = fit(config, model_type)
        text, bound, not_exact = imported(fitted, model_type, model_type)  # what the command writes
        path = workdir / f"{model_type}.toml"
        path.write_text(text)
        model = Model.load(path)
        ours = int(model.evaluate("params"))
    except SymformError as e:
        return {**row, "status": "refused", "why": str(e).removeprefix(f"{model_type}: ")[:200]}
    except _Late:
        raise
    except Exception as e:  # noqa: BLE001 - a crash is what the census looks for
        return {**row, "status": "crash", "why": f"{type(e).__name__}: {str(e)[:160]}"}
    row.update(parameters=expected, symform=ours, bound=bound, builds=fitted.builds, not_exact=sorted(not_exact))
    if ours != expected:
        return {**row, "status": "differs"}
    try:
        second = _doubled(fitted.config, fitted.varied)
        second_expected = _meta_numel(transformers, torch, second)
    except Exception as e:  # noqa: BLE001 - transformers refuses the doubled sizes: only the first config counts
        return {**row, "status": "exact", "second": f"no oracle ({type(e).__name__})"}
    try:
        spec, library = load_declaration_file(path, config=second)
        second_ours = int(Model(spec, library=library).evaluate("params"))
    except SymformError as e:
        second_ours = f"refused: {str(e)[:120]}"
    row.update(second=second_expected, second_symform=second_ours, status="exact" if second_ours == second_expected else "exact once")
    if run_check and row["status"] == "exact":
        row["check"], row["all_exact"] = _checked(model)
    return row


EXACT_IN = ("params", "forward_flops", "kv_cache", "recurrent_state")  # the totals an imported declaration must match


def _checked(model) -> tuple[str, bool]:
    """symform check's verdict on the declaration, and whether it is exact in every total of EXACT_IN (PyTorch's
    and the declaration's equal, none of them named not exact in the file)."""
    from symform.analysis.memory.oracle_check import check

    try:
        report = check(model)
    except Exception as e:  # noqa: BLE001 - the check's own refusal is reported beside the count
        return f"not run ({type(e).__name__}: {str(e)[:100]})", False
    wrong = sorted({r.quantity for r in report.rows if r.part == "total" and not r.agrees and r.quantity in EXACT_IN} | set(report.not_exact))
    if not wrong:
        return "params, forward FLOPs and caches exact", True
    return "not exact in " + ", ".join(wrong) + (f" (the file names {', '.join(report.not_exact)})" if report.not_exact else ""), False


def on_time(model_type: str, *args) -> dict:
    def late(*_):
        raise _Late

    signal.signal(signal.SIGALRM, late)
    signal.alarm(SECONDS)
    try:
        return census_of(model_type, *args)
    except _Late:
        return {"model_type": model_type, "status": "crash", "why": f"took over {SECONDS} s"}
    finally:
        signal.alarm(0)


def census(types: list[str], run_check: bool) -> list[dict]:
    import torch
    import transformers

    transformers.logging.set_verbosity_error()
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for model_type in types:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                results.append(on_time(model_type, transformers, torch, Path(workdir), run_check))
            r = results[-1]
            print(f"{model_type:32s} {r['status']:10s} {r.get('why', '')[:100]}", file=sys.stderr, flush=True)
    return results


def _reason(why: str) -> str:
    """A refusal's kind: its words with the sizes and names that vary between types taken out."""
    for marker in ("could not tell apart", "has no symform primitive", "not depthwise", "which symform cannot read", "follows no product", "depends on", "structure changes", "transformers refuses", "cannot build", "no causal-LM class", "is not one transformers"):
        if marker in why:
            return marker
    return why[:60]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("types", nargs="*", help="model types (default: every one with a causal-LM class)")
    parser.add_argument("--json", action="store_true", help="one JSON object on stdout")
    parser.add_argument("--check", action="store_true", help="also run symform check on each exact declaration")
    args = parser.parse_args()
    import transformers

    types = args.types or sorted(transformers.models.auto.modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES)
    results = census(types, args.check)
    statuses = ("exact", "exact once", "differs", "refused", "no oracle", "crash")
    counts = {s: sum(1 for r in results if r["status"] == s) for s in statuses}
    unbundled = {s: sum(1 for r in results if r["status"] == s and not r["bundled"]) for s in statuses}
    reasons = Counter(_reason(r["why"]) for r in results if r["status"] in ("refused", "crash"))
    exactness = {"params exact": counts["exact"], **({"params, forward FLOPs and caches exact": sum(1 for r in results if r.get("all_exact"))} if args.check else {})}
    exactness_unbundled = {"params exact": unbundled["exact"], **({"params, forward FLOPs and caches exact": sum(1 for r in results if r.get("all_exact") and not r["bundled"])} if args.check else {})}
    if args.json:
        print(json.dumps({"counts": counts, "not_bundled": unbundled, "exactness": exactness, "exactness_not_bundled": exactness_unbundled, "reasons": dict(reasons.most_common()), "total": len(results), "types": results}, indent=1))
        return
    for r in results:
        detail = r.get("why") or f"{r.get('symform')} vs {r.get('parameters')}; second {r.get('second_symform')} vs {r.get('second')}" + (f"; check: {r['check']}" if "check" in r else "")
        print(f"{r['model_type']:32s} {r['status']:10s} {'bundled' if r['bundled'] else '':8s} {detail}")
    print(f"{len(results)} causal-LM model types: " + ", ".join(f"{n} {s}" for s, n in counts.items()))
    print(f"of them not read by a bundled family ({sum(unbundled.values())}): " + ", ".join(f"{n} {s}" for s, n in unbundled.items()))
    print("exact: " + ", ".join(f"{n} {what}" for what, n in exactness.items()) + "; of them not bundled: " + ", ".join(f"{n} {what}" for what, n in exactness_unbundled.items()))
    print("refused or crashed, by reason: " + "; ".join(f"{n} {why}" for why, n in reasons.most_common(8)))


if __name__ == "__main__":
    main()
