"""A table of hostile inputs run through the real CLI, each in a forked child with time and memory limits.

    PYTHONPATH=$PWD python tests/hostile_table.py [--only WORD] [--jobs 2]

Each row: the input, its outcome (ok, refused, TRACEBACK, HANG, SLOW, BAD-EXIT, SUSPECT). A SUSPECT row
is a value that is never valid for its field (a negative size, a fraction, text or a list for a size, a
bool for a size) that the run accepted with a total other than the unchanged config's: a silent wrong
number. Not a test (it runs thousands of cases); the classes of finding it turns up have tests in
tests/test_hostile*.py. Needs transformers for the families' default configs.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import tempfile
import tomllib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from isolated import run_limited  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
SECONDS = 10.0
FAMILIES = ["gemma4", "gemma4_text", "llama4", "llama4_text", "nemotron_h", "qwen3_next", "qwen3_5", "qwen3_5_moe",
            "deepseek_v32", "gpt_oss", "glm4_moe", "bert", "modernbert"]
NEVER = {"neg": -3, "half": 1.5, "text": "x", "dict": {"a": 1}, "huge_list": list(range(10**6))}
MAYBE = {"zero": 0, "huge": 10**30, "true": True, "null": None, "long_str": "M*-" * 10**5}


def base_config(model_type: str) -> dict:
    from transformers import AutoConfig

    config = AutoConfig.for_model(model_type).to_dict()
    return json.loads(json.dumps(config, default=str).replace("Infinity", "1e30"))


def read_fields(model_type: str) -> list[tuple[tuple[str, ...], str]]:
    """(path in the config, declared type) of every field a family of this model type reads."""
    out = []
    for path in sorted((ROOT / "formulas" / "families").glob("*.toml")):
        spec = tomllib.loads(path.read_text())
        if model_type not in spec.get("model_types", []):
            continue
        for name, field in spec.get("fields", {}).items():
            where = field.get("in", spec.get("fields_in", ""))
            keys = [*(where.split(".") if where else []), field.get("key", name)]
            out.append((tuple(keys), field["type"]))
            for alias in field.get("aliases", []):
                out.append((tuple([*(where.split(".") if where else []), *alias.split(".")]), field["type"]))
        for sub in {f.get("in", spec.get("fields_in", "")) for f in spec.get("fields", {}).values()} - {""}:
            out.append((tuple(sub.split(".")), "section"))
    return sorted(set(out))


def mutated(config: dict, keys: tuple[str, ...], value) -> dict | None:
    out = copy.deepcopy(config)
    node = out
    for key in keys[:-1]:
        if not isinstance(node, dict):
            return None
        node = node.setdefault(key, {})
    if not isinstance(node, dict):
        return None
    if value is DELETE:
        node.pop(keys[-1], None)
    else:
        node[keys[-1]] = value
    return out


DELETE = object()


class _Timeout(BaseException):
    pass


def run_here(*argv: str, seconds: float):
    """``symform ARGV`` in this process (its caches stay warm from run to run), stopped after ``seconds``."""
    import contextlib
    import io
    import signal
    import time
    import traceback

    from isolated import Outcome
    from symform.interface.cli.cli import main as cli_main

    out, err = io.StringIO(), io.StringIO()

    def stop(*_):
        raise _Timeout

    signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    start = time.monotonic()
    code = None
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = cli_main(list(argv))
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
            except _Timeout:
                code = None
            except BaseException:
                traceback.print_exc()
                code = 71
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    return Outcome(code, out.getvalue(), err.getvalue(), time.monotonic() - start)


FORK = False


def run(argv, cwd=None):
    outcome = run_limited(*argv, seconds=SECONDS * 3, cwd=cwd) if FORK else run_here(*argv, seconds=SECONDS * 3)
    if outcome.timed_out:
        return "HANG", outcome
    if "Traceback" in outcome.err or outcome.code not in (0, 2):
        return "TRACEBACK" if "Traceback" in outcome.err else f"BAD-EXIT {outcome.code}", outcome
    if outcome.code == 2 and (outcome.err.count("\n") != 1 or len(outcome.err) > 1000):
        return "LONG-ERROR", outcome
    if outcome.seconds > SECONDS:
        return "SLOW", outcome
    return ("ok" if outcome.code == 0 else "refused"), outcome


def total(outcome) -> int | None:
    try:
        return json.loads(outcome.out)["total"]
    except Exception:
        return None


def config_rows(folder: Path, only: str | None):
    for family in FAMILIES:
        if only and only not in family:
            continue
        base = base_config(family)
        base_path = folder / f"{family}.json"
        base_path.write_text(json.dumps(base))
        yield family, "base", ["params", str(base_path), "--json"], None, None
        for keys, kind in read_fields(family):
            for label, value in [("missing", DELETE), *NEVER.items(), *MAYBE.items()]:
                if kind == "section" and label in ("missing", "null"):
                    continue
                config = mutated(base, keys, value)
                if config is None:
                    continue
                path = folder / f"{family}-{'.'.join(keys)}-{label}.json"
                path.write_text(json.dumps(config))
                never = label in NEVER or (label in ("true", "float") and kind == "int")
                yield family, f"{'.'.join(keys)}={label}", ["params", str(path), "--json"], base_path, never


Q, VL, G4 = "qwen3-0.6b", "qwen3-vl-8b", "gemma4-audio"
TRAIN = ["--gpu", "h100-sxm", "--train", "--global-batch", "8", "--seq", "512"]
BAD_COUNTS = ["-1", "0", "1.5", "1e20", str(10**30), "nan", "x", ""]
CLI = [
    *[["flops", VL, "--batch", "1", "--seq", "1024", "--images", v, "--image-size", "448"] for v in BAD_COUNTS],
    *[["flops", VL, "--batch", "1", "--seq", "1024", "--images", "1", "--image-size", v] for v in ["0x0", "-448", "448x", "x448", "448x448x448", "1e3", "32x" + "9" * 50, "100x100", "10000000x10000000"]],
    ["flops", VL, "--batch", "1", "--seq", "8", "--images", "100", "--image-size", "448"],
    ["flops", VL, "--batch", "1", "--seq", "1024", "--image-size", "448"],
    ["flops", Q, "--batch", "1", "--seq", "1024", "--images", "1", "--image-size", "448"],
    *[["flops", "GEMMA4_AUDIO", "--batch", "1", "--seq", "4096", "--audio", "1", "--audio-frames", v] for v in BAD_COUNTS + ["3", "1"]],
    ["flops", "GEMMA4_AUDIO", "--batch", "1", "--seq", "8", "--audio", "10", "--audio-frames", "3000"],
    ["flops", Q, "--batch", "1", "--seq", "1024", "--audio", "1", "--audio-frames", "100"],
    *[["flops", Q, "--batch", b, "--seq", q] for b, q in [("0", "8"), ("1", "0"), (str(10**30), "8"), ("1", str(10**30)), ("1", "-5")]],
    *[["time", Q, *TRAIN, "--gpus", v] for v in ["0", "-1", "1.5", str(10**9)]],
    *[["time", Q, *TRAIN, "--gpus", "8", "--gemm-model", m, "--attention", a] for m in ["waves", "rows", "x"] for a in ["sdpa", "eager", "flash"]],
    *[["time", Q, *TRAIN, "--gpus", "8", "--gemm-model", "waves", *lora] for lora in [
        ["--lora-rank", "0", "--lora-targets", "q_proj"], ["--lora-rank", "-1", "--lora-targets", "q_proj"], ["--lora-rank", str(10**30), "--lora-targets", "q_proj"],
        ["--lora-rank", "8", "--lora-targets", ""], ["--lora-rank", "8", "--lora-targets", "nope"], ["--lora-rank", "8", "--lora-targets", "q_proj,q_proj"],
        ["--freeze", "layers:5-2"], ["--freeze", "layers:0-1000"], ["--freeze", "layers:-1"], ["--freeze", "layers:" + "9" * 60], ["--freeze", "embeddings,embeddings"],
        ["--lora-rank", "8", "--lora-targets", "q_proj", "--lora-alpha", "-3"], ["--lora-alpha", "16"], ["--qlora"], ["--dora"],
        ["--lora-rank", "8", "--lora-targets", "q_proj", "--freeze", "layers:0-27"]]],
    *[["flops", Q, "--batch", "1", "--seq", "8", *lora] for lora in [["--lora-rank", "8", "--lora-targets", "q_proj", "--freeze", "layers:0-27"], ["--freeze", "layers:0-27,embeddings"]]],
    *[["memory", Q, "--train", "--batch", "1", "--seq", "8", *o] for o in [["--dp", "0"], ["--tp", "3"], ["--tp", str(10**30)], ["--pp", "1000"], ["--cp", "0"], ["--ep", "7"], ["--kv-block", "0"], ["--zero", "4"]]],
    *[["plan", Q, "--gpu", "h100-sxm", "--gpus", g, "--global-batch", b, "--seq", q] for g, b, q in [("0", "8", "128"), ("8", "0", "128"), ("8", "8", "0"), ("3", "7", "128"), (str(2**24), "8", "128"), ("8", str(10**30), "128")]],
    *[["sweep", Q, "params", *o] for o in [["--grid", "d_model="], ["--grid", "d_model=1,,2"], ["--grid", "nope=1,2"], ["--grid", "d_model=0,-1"], ["--zip", "d_model=1,2", "--zip", "n_layers=1"], ["--sample", "d_model=5:1", "--n", "3"], ["--sample", "d_model=1:2", "--n", "0"], ["--grid", "d_model=1e30"], ["--grid", "batch=1,2"]]],
    *[["roofline", Q, "--gpu", "h100-sxm", "--phase", p, "--batch", "1", "--context", c] for p, c in [("decode", "0"), ("decode", str(10**30)), ("prefill", "-1"), ("nope", "8")]],
    *[["params", m] for m in ["Qwen/DoesNotExist", "../../etc/passwd", "Qwen/Qwen3-8B", "a/b/c/d", "hf://x", "/dev/null", "/proc/self/mem", "/", ".", "~"]],
    ["params", Q, "--revision", "../../x"],
    ["check", Q], ["check", "FORMULA_DIR"], ["check", "Qwen/DoesNotExist"],
]


def cli_rows(folder: Path, only: str | None):
    """Command lines with absurd values; GEMMA4_AUDIO and FORMULA_DIR stand for files written here."""
    from transformers import AutoConfig

    audio = AutoConfig.for_model("gemma4").to_dict()
    audio["audio_config"] = AutoConfig.for_model("gemma4_audio").to_dict() if _has("gemma4_audio") else {}
    (folder / "gemma4-audio.json").write_text(json.dumps(audio, default=str))
    (folder / "formulas").mkdir()
    for argv in CLI:
        argv = [{"GEMMA4_AUDIO": str(folder / "gemma4-audio.json"), "FORMULA_DIR": str(folder / "formulas")}.get(a, a) for a in argv]
        label = " ".join(argv)
        if only and only not in label:
            continue
        yield "cli", label.replace(str(folder), "TMP")[-150:], argv, None, None


def _has(model_type: str) -> bool:
    from transformers import AutoConfig

    try:
        AutoConfig.for_model(model_type)
        return True
    except Exception:
        return False


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--only")
    parser.add_argument("--cli", action="store_true", help="the command-line table only")
    parser.add_argument("--jobs", type=int, default=1, help="with --fork: children at once")
    parser.add_argument("--fork", action="store_true", help="each case in a forked child under a memory limit (slower: no warm caches)")
    parser.add_argument("--all", action="store_true", help="print every row, not only findings")
    args = parser.parse_args()
    global FORK
    FORK = args.fork
    if not FORK:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (8 * 2**30, 8 * 2**30))  # a blow-up ends as MemoryError: a traceback row
    folder = Path(tempfile.mkdtemp(prefix="symform-hostile-"))
    rows = list(cli_rows(folder, args.only)) if args.cli else list(config_rows(folder, args.only))
    bases: dict[str, int | None] = {}

    def one(row):
        family, label, argv, base_path, never = row
        verdict, outcome = run(argv)
        return row, verdict, outcome

    findings = 0
    with ThreadPoolExecutor(args.jobs if FORK else 1) as pool:
        for (family, label, argv, base_path, never), verdict, outcome in (pool.map(one, rows) if FORK else map(one, rows)):
            if label == "base":
                bases[family] = total(outcome)
            elif verdict == "ok" and never and total(outcome) != bases.get(family):
                verdict = "SUSPECT"
            message = outcome.err.strip().splitlines()[-1][:160] if outcome.err.strip() else f"total {total(outcome)}"
            flagged = verdict not in ("ok", "refused")
            findings += flagged
            if flagged or args.all:
                print(f"{verdict:10} {family:13} {label:45} {outcome.seconds:5.1f}s  {message}", flush=True)
    print(f"{len(rows)} cases, {findings} findings", flush=True)
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
