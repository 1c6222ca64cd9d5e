"""Cold figures: each repetition a fresh interpreter, symform and its baseline run alternately.

Alternating the two sides lets load from other work on the machine hit both alike; the
same number of repetitions is taken for each. A goal is met only when its worst
repetition meets it (no best-of); a row with a baseline also reports its fastest run over the
baseline's fastest (``min_over_min``), the "min of several repetitions" some goals are stated in.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


# symform's cache between runs (symform.engine.store.disk_cache) starts empty for each benchmark run, in a
# directory of its own: the untimed first run of each command fills it, as a user's first run does.
CACHE = tempfile.mkdtemp(prefix="symform-bench-cache-")
atexit.register(shutil.rmtree, CACHE, ignore_errors=True)
NO_CACHE = {"SYMFORM_CACHE": "off"}  # every run as the very first: nothing kept from an earlier one


def environment(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This checkout first on the path, whatever is installed; the benchmark's own cache directory."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["SYMFORM_CACHE_DIR"] = CACHE
    env.pop("SYMFORM_CACHE", None)
    # An installed symform has its .pyc files; a shell that forbids writing them would make every
    # timed run compile symform's sources again, which no user's run does.
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return {**env, **(extra or {})}


def _children_cpu() -> float:
    """User + system CPU seconds of the children waited for so far (0 where the platform has no getrusage)."""
    try:
        import resource
    except ImportError:
        return 0.0
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def wall_seconds(argv: list[str], extra: dict[str, str] | None = None, cpu: list[float] | None = None) -> float:
    """Wall time of one fresh interpreter running ``argv`` (output discarded); a failure stops the benchmark.
    Its CPU seconds are appended to ``cpu``: on a machine shared with other work they vary less than wall time."""
    before, start = _children_cpu(), time.perf_counter()
    done = subprocess.run([sys.executable, *argv], env=environment(extra), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"python {' '.join(argv)} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")
    if cpu is not None:
        cpu.append(_children_cpu() - before)
    return seconds


def child_report(code: str, extra: dict[str, str] | None = None) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object last, which is returned."""
    done = subprocess.run([sys.executable, "-c", code], env=environment(extra), cwd=ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"benchmark child failed ({done.returncode}): {done.stderr[-2000:]}")
    return json.loads(done.stdout.splitlines()[-1])


def paired(
    symform_argv, baseline_argv: list[str], repeats: int, extra: dict[str, str] | None = None, cpu: dict[str, list[float]] | None = None
) -> tuple[list[float], list[float]]:
    """``repeats`` wall times of each, alternating, after one untimed run of each (file cache, .pyc files);
    ``extra`` is added to symform's environment. ``symform_argv`` may be a function of the repetition (0 for
    the untimed run) giving its argv and environment: new sizes or an empty cache every repetition.
    ``cpu``, if given, receives the CPU seconds of each timed run under "measured" and "baseline"."""
    made = symform_argv if callable(symform_argv) else (lambda _: (symform_argv, extra))
    wall_seconds(*made(0)), wall_seconds(baseline_argv)
    measured, baseline = [], []
    mine, theirs = (cpu.setdefault("measured", []), cpu.setdefault("baseline", [])) if cpu is not None else (None, None)
    for i in range(1, repeats + 1):
        measured.append(wall_seconds(*made(i), mine))
        baseline.append(wall_seconds(baseline_argv, None, theirs))
    return measured, baseline


def empty_cache() -> dict[str, str]:
    """A new, empty cache directory: what a fresh machine has."""
    where = tempfile.mkdtemp(prefix="symform-bench-empty-", dir=CACHE)
    return {"SYMFORM_CACHE_DIR": where}


def config_with_new_sizes(repetition: int) -> str:
    """A config.json never read before: Qwen3-32B's with another layer count and width each repetition."""
    config = json.loads((ROOT / "formulas" / "presets" / "qwen3-32b.json").read_text())
    config.update(num_hidden_layers=16 + repetition, intermediate_size=25600 + 128 * repetition)
    folder = Path(tempfile.mkdtemp(prefix="symform-bench-config-", dir=CACHE))
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder / "config.json")


def row(path: str, goal: str, measured: list[float], goal_met: bool, baseline_name: str | None = None, baseline: list[float] | None = None, **extra) -> dict:
    fastest = {"min_over_min": min(measured) / min(baseline)} if baseline else {}
    return {"path": path, "goal": goal, "unit": "s", "measured": measured, "baseline_name": baseline_name, "baseline": baseline, "goal_met": bool(goal_met), **fastest, **extra}


def print_rows(rows: list[dict]) -> None:
    for r in rows:
        spread = f"{min(r['measured']):.3f}–{max(r['measured']):.3f} s"
        against = ""
        if r["baseline"]:
            ratios = [m / b for m, b in zip(r["measured"], r["baseline"])]
            against = f"  vs {r['baseline_name']} {min(r['baseline']):.3f}–{max(r['baseline']):.3f} s, ratio {min(ratios):.2f}–{max(ratios):.2f} (fastest ÷ fastest {r['min_over_min']:.2f})"
            if r.get("cpu_ratios"):
                against += f" (CPU time ratio {min(r['cpu_ratios']):.2f}–{max(r['cpu_ratios']):.2f})"
        print(f"{r['path']}: {spread}{against}  goal {r['goal']}: {'reported' if r['goal_met'] is None else 'met' if r['goal_met'] else 'NOT met'}")
