"""One vocabulary across commands (issue 37): every flag has help text, and a concept has one flag name, meaning and
default in every command; older spellings stay as aliases of that flag, named in its help.

The table below is the vocabulary: a concept, its canonical flag, the spellings kept as aliases, and its default
where every command shares one. A flag spelled as another concept's alias, or an alias offered without its
canonical name, fails the walk.
"""

from __future__ import annotations

import argparse
import json

import pytest

from symform.interface.cli.cli import build_parser
from symform.interface.reports.latex_report import appendix_parser

from checks import run

# concept -> (canonical flag, aliases kept for old command lines, the default every command gives it or ANY)
ANY = object()
CONCEPTS = {
    "tokens already in the KV cache": ("--past", {"--context"}, ANY),  # 0 in memory/fit; decode in roofline requires it
    "paged KV cache block size in tokens": ("--kv-block", {"--block-size"}, None),
    "KV cache element type": ("--kv-dtype", {"--cache-dtype", "--kv-bytes"}, None),
    "training recipe: bytes per parameter of each copy": ("--precision", set(), "mixed"),
    "optimizer states": ("--optimizer", set(), "adamw"),
    "tensor-parallel degree": ("--tp", {"--tensor-parallel"}, ANY),
    "pipeline-parallel degree": ("--pp", {"--pipeline-parallel"}, ANY),
    "data-parallel degree": ("--dp", {"--data-parallel"}, ANY),
    "an accelerator or system": ("--gpu", {"--device", "--hardware"}, ANY),
    "matmul dtype (peak rate and storage width)": ("--dtype", {"--compute-dtype"}, None),
    "stored weights' format": ("--weight-format", {"--weights-format", "--quant"}, None),
    # a request's prompt is a workload of its own (time and plan serve requests: prefill, then decode), not the cached context
    "prompt tokens per request": ("--prompt", {"--prompt-len", "--input-len"}, None),
    "output tokens per request": ("--output", {"--output-len", "--gen"}, None),
    "activation recomputation": ("--recompute", {"--checkpointing", "--activation-checkpointing"}, ANY),  # none (or unset: none)
    "ZeRO stage": ("--zero", {"--zero-stage", "--fsdp"}, ANY),  # 0 (or unset: 0)
    "pipeline schedule": ("--schedule", {"--pipeline-schedule"}, ANY),
}


def parsers():
    """Every parser symform's command line uses, by its command."""
    found = []

    def walk(parser, name):
        found.append((name, parser))
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for sub, child in action.choices.items():
                    walk(child, f"{name} {sub}")

    walk(build_parser(None), "symform")
    found.append(("symform latex --formulas", appendix_parser()))
    return found


def actions():
    for name, parser in parsers():
        for action in parser._actions:
            if not isinstance(action, (argparse._HelpAction, argparse._VersionAction)):
                yield name, action


def test_every_flag_and_argument_has_help_text():
    missing = [f"{name} {action.option_strings or action.dest}" for name, action in actions() if not action.help]
    assert missing == []


@pytest.mark.parametrize("concept", CONCEPTS)
def test_one_name_meaning_and_default_per_concept(concept):
    canonical, aliases, default = CONCEPTS[concept]
    seen = []
    for name, action in actions():
        spellings = set(action.option_strings)
        if not spellings & ({canonical} | aliases):
            continue
        seen.append(name)
        assert action.option_strings[0] == canonical, f"{name}: {action.option_strings} names {concept} first as {action.option_strings[0]}, not {canonical}"
        assert spellings <= {canonical} | aliases, f"{name}: {action.option_strings} spells {concept} in a way the vocabulary does not know"
        for alias in spellings - {canonical}:
            assert alias in action.help, f"{name}: {canonical}'s help does not name its alias {alias}"
        if default is not ANY:
            assert action.default == default, f"{name}: {canonical} defaults to {action.default!r}, elsewhere {default!r}"
    assert seen, f"no command takes {canonical}"


def test_a_concept_has_no_second_flag_in_one_command():
    for name, parser in parsers():
        for concept, (canonical, aliases, _) in CONCEPTS.items():
            holders = {id(a) for a in parser._actions if set(a.option_strings) & ({canonical} | aliases)}
            assert len(holders) <= 1, f"{name} has two flags for {concept}"


@pytest.mark.parametrize("command", ["memory", "fit", "roofline", "time", "plan"])
def test_the_kv_cache_flags_are_offered_wherever_a_cache_is(command):
    flags = {s for name, parser in parsers() if name == f"symform {command}" for s in parser._option_string_actions}
    assert "--kv-dtype" in flags


def test_old_spellings_still_work(capsys):
    base = ["roofline", "qwen3-0.6b", "--gpu", "h100-sxm", "--phase", "decode", "--batch", "1", "--json"]
    old = json.loads(run(capsys, *base, "--context", "64")[1])
    new = json.loads(run(capsys, *base, "--past", "64")[1])
    assert old == new


def test_kv_dtype_in_roofline_halves_the_cache_bytes_a_decode_step_moves(capsys):
    """Qwen3-0.6B: 28 layers, 8 KV heads of 128. A decode step reads past + 1 tokens' K and V and writes the new
    token's: (past + 2) × 2 × 28 × 8 × 128 values per sequence, at 2 bytes in bf16 and 1 in fp8."""
    base = ["roofline", "qwen3-0.6b", "--gpu", "h100-sxm", "--phase", "decode", "--batch", "4", "--past", "1000", "--json"]
    bf16 = json.loads(run(capsys, *base)[1])["bytes"]
    fp8 = json.loads(run(capsys, *base, "--kv-dtype", "fp8")[1])["bytes"]
    assert bf16 - fp8 == 4 * (1000 + 2) * 2 * 28 * 8 * 128


def test_kv_dtype_in_time_is_refused_for_training(capsys):
    code, _, err = run(capsys, "time", "qwen3-0.6b", "--gpu", "h100-sxm", "--train", "--global-batch", "8", "--seq", "128", "--kv-dtype", "fp8")
    assert code == 2 and "--kv-dtype" in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv, words",
    [
        (["memory", "qwen3-0.6b", "--bogus"], ["--bogus", "symform memory --help"]),
        (["memory", "qwen3-0.6b", "--infer", "--batch", "1", "--seq", "1", "--kvdtype", "fp8"], ["did you mean --kv-dtype", "symform memory --help"]),
        (["params", "qwen3-0.6b", "extra"], ["extra", "symform params --help"]),
        (["derive", "paramz", "qwen3-0.6b"], ["did you mean params"]),
        (["memory", "qwen3-0.6b", "--infer", "--batch", "1", "--seq", "1", "--gpu", "h100"], ["did you mean", "h100-sxm"]),
    ],
)
def test_slips_point_to_the_command_s_help_or_the_name_meant(capsys, argv, words):
    code, _, err = run(capsys, *argv)
    assert code == 2 and err.count("\n") == 1, err
    for word in words:
        assert word in err, err


def test_hardware_json_lists_every_device_s_data(capsys):
    code, out, err = run(capsys, "hardware", "--json")
    listing = json.loads(out)
    one = json.loads(run(capsys, "hardware", "h100-sxm", "--json")[1])
    assert listing["accelerators"]["h100-sxm"] == one and "gb200-nvl72" in listing["systems"]


def test_derive_asks_only_for_the_workload_it_was_not_given(capsys):
    code, out, err = run(capsys, "derive", "train-flops", "qwen3-0.6b", "--seq", "4096")
    assert code == 0, err
    asks = [line for line in out.splitlines() if "(give" in line]
    assert asks and all("--seq" not in line and "--tokens" in line for line in asks), asks


def test_the_readme_does_not_call_a_dependency_optional():
    from pathlib import Path
    import tomllib

    root = Path(__file__).resolve().parents[1]
    required = [d.split(">")[0].split("=")[0].strip() for d in tomllib.loads((root / "pyproject.toml").read_text())["project"]["dependencies"]]
    readme = root / "README.md"
    text = readme.read_text()
    for package in required:
        assert f"pip install {package}`" not in text and f"pip install {package})" not in text, f"README tells users to install {package}, a dependency"
