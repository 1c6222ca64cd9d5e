"""Hostile input: every run ends in exact non-negative counts (exit 0) or one line on stderr (exit 2).

Each case runs the real CLI in a forked child with a limit on its memory
(MemoryError would surface as a traceback, which fails the test) and on its
wall time (a hang is killed and fails the test). The limits are generous: they
tell a bounded run from a work bomb, they measure no performance.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import symform
from symform import SymformError
from symform.engine.budget import NUMBER_DIGITS, number_from_text

from isolated import run_limited

SECONDS = 30.0  # a bounded run takes well under a second here; a bomb would take hours
PRESET = "qwen3-0.6b"
PRESETS = Path(__file__).resolve().parent.parent / "formulas" / "presets"  # the checkout's files: CI installs symform non-editable
QWEN = json.loads((PRESETS / "qwen3-0.6b.json").read_text())
GEMMA3 = json.loads((PRESETS / "gemma-3-1b.json").read_text())


def check_outcome(*argv: str, cwd: Path | None = None):
    """Run ``symform ARGV``: exit 0 with whole non-negative counts, or exit 2 with exactly one line on stderr."""
    outcome = run_limited(*argv, seconds=SECONDS, cwd=str(cwd) if cwd else None)
    assert not outcome.timed_out, f"symform {' '.join(argv)[:200]} ran past {SECONDS} s"
    assert "Traceback" not in outcome.err, outcome.err[-2000:]
    assert outcome.code in (0, 2), (outcome.code, outcome.err[-2000:])
    if outcome.code == 2:
        assert outcome.out == "" and outcome.err.count("\n") == 1 and outcome.err.startswith("symform: error: "), outcome.err
        assert len(outcome.err) < 1000, outcome.err  # one readable line, not the input echoed back
    else:
        assert outcome.err == "" or all(line.startswith("symform: note: ") for line in outcome.err.splitlines()), outcome.err
    return outcome


def error_of(*argv: str, cwd: Path | None = None) -> str:
    outcome = check_outcome(*argv, cwd=cwd)
    assert outcome.code == 2, outcome.out[-500:]
    return outcome.err


def params_json(*argv: str, cwd: Path | None = None) -> dict:
    outcome = check_outcome("params", *argv, "--json", cwd=cwd)
    assert outcome.code == 0, outcome.err
    result = json.loads(outcome.out)
    for value in [result["total"], result["active"], *result["components"].values()]:
        assert isinstance(value, int) and not isinstance(value, bool) and value >= 0, result
    return result


def architecture(tmp_path: Path, name: str, components: str, *, arguments: str = "d_model = 8", symbols: str = "") -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(f'[model]\nroot = "{name}"\narguments = {{ {arguments} }}\n{symbols}\n{components}', encoding="utf-8")
    return path


def primitive(name: str, params: str, *, args: str = '"d_model"', forward: str = '"0"') -> str:
    return f'[components.{name}]\ndoc = "x"\nargs = [{args}]\nparams = {params}\nforward_flops = {forward}\nbytes_moved = "0"\nsaved_activations = "0"\n'


def one_param(tmp_path: Path, expression: str, **options) -> str:
    """``params ARCH.toml`` for a primitive whose params is ``expression`` (a TOML value)."""
    return str(architecture(tmp_path, "leaf", primitive("leaf", expression), **options))


# -- regressions: each example of issue 12 -------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, words",
    [
        ('"((9**64)**64)**64"', "CONSTANT_DIGITS"),
        ('"1 + (d_model > 1)"', "comparison cannot be a number"),
        ('"1 if d_model else 2"', "no condition"),  # a size is never 0: a condition needs a comparison
        ('"1 if d_model*2 else 2"', "not a condition"),
        ('"' + " ".join(f"{i} if d_model > {i} else" for i in range(20)) + ' 0"', "CONDITION_DEPTH"),
        ('"' + " ".join(f"{i} if d_model > {i} else" for i in range(60)) + ' 0"', "too complex"),  # named, not echoed whole
        ('"1 if __import__(\'os\').system(\'true\') else 0"', "not allowed"),
        ('"d_model % (d_model - 8)"', "division by zero"),
        ('"1/(d_model - 8)"', "division by zero"),
        ('"sqrt(d_model - 16)"', "complex"),
        ('"floor(sqrt(d_model - 16))"', "complex"),
        ('"log(log(log(log(log(log(log(d_model)))))))"', "complex"),
        ('"sqrt(d_model)"', "irrational"),
        ('"d_model/3"', "not a whole number"),
        ('"-d_model"', "cannot be negative"),
        ('"d_model**64*d_model**64*d_model**64"', "DEGREE"),
        ("true", "params"),
        ('"ｄ_model"', "non-ASCII"),
        ('"d_model + min(log(0))"', "has no value"),  # found by test_generated_declarations_count_or_refuse
        ('"max(log(0), d_model)"', "has no value"),
    ],
)
def test_expressions_that_cannot_be_counted_are_one_line(tmp_path, expression, words):
    assert words in error_of("params", one_param(tmp_path, expression))


def test_a_sum_raised_to_a_power_is_refused_before_it_is_multiplied_out(tmp_path):
    names = ["batch", "seq", "past", "flops_per_mac", "act_bytes", "weight_bytes", "kv_bytes", "stat_bytes", "causal", "bwd_mult"]
    bomb = f'"({"+".join(["d_model", *names])})**64"'
    path = architecture(tmp_path, "bomb", primitive("bomb", '"d_model"', forward=bomb))
    assert "EXPANDED_TERMS" in error_of("flops", str(path), "--batch", "1", "--seq", "1")


def test_assumptions_cannot_smuggle_an_expansion(tmp_path):
    sums = "+".join(["batch", "seq", "past", "flops_per_mac", "act_bytes", "weight_bytes", "kv_bytes", "stat_bytes", "causal", "bwd_mult", "d_model"])
    components = primitive("leaf", '"x**64"', args='"x"') + (
        '[components.top]\ndoc = "x"\nargs = ["d_model"]\n'
        f'assume.standard = {{ d_model = "{sums}" }}\n'
        'parts = [{ name = "a", use = "leaf", with = { x = "d_model" } }]\n'
    )
    path = architecture(tmp_path, "top", components)
    assert "EXPANDED_TERMS" in error_of("derive", "params", str(path), "--assume", "standard")


def test_fan_out_is_refused_at_the_graph_budget(tmp_path):
    components = primitive("level0", '"d_model"')
    for level in range(1, 6):
        parts = ", ".join(f'{{ name = "p{i}", use = "level{level - 1}", pass = true }}' for i in range(30))
        components += f'[components.level{level}]\ndoc = "x"\nargs = ["d_model"]\nparts = [{parts}]\n'
    path = architecture(tmp_path, "level5", components)
    assert path.stat().st_size < 16_000
    assert "GRAPH_NODES" in error_of("params", str(path))


def test_a_deep_chain_is_not_called_a_cycle(tmp_path):
    components = primitive("chain0", '"d_model"')
    for level in range(1, 40):
        components += f'[components.chain{level}]\ndoc = "x"\nargs = ["d_model"]\nparts = [{{ name = "p", use = "chain{level - 1}", pass = true }}]\n'
    message = error_of("params", str(architecture(tmp_path, "chain39", components)))
    assert "GRAPH_DEPTH" in message and "cycle" not in message


def test_negative_and_fractional_repeats_are_refused(tmp_path):
    for repeat in ('"-3"', '"1/2"', "true"):
        components = primitive("leaf", '"d_model"') + f'[components.top]\ndoc = "x"\nargs = ["d_model"]\nparts = [{{ name = "a", use = "leaf", pass = true, repeat = {repeat} }}]\n'
        assert "repeat" in error_of("params", str(architecture(tmp_path, "top", components)))
    components = primitive("leaf", '"d_model"') + '[components.top]\ndoc = "x"\nargs = ["d_model"]\nparts = [{ name = "a", use = "leaf", pass = true, repeat = "d_model - 10" }]\n'
    assert "repeats -2 times" in error_of("params", str(architecture(tmp_path, "top", components)))


def test_a_negative_part_cannot_hide_in_a_positive_total(tmp_path):
    components = primitive("plus", '"10*d_model"') + primitive("minus", '"-d_model"')
    components += '[components.top]\ndoc = "x"\nargs = ["d_model"]\nparts = [{ name = "a", use = "plus", pass = true }, { name = "b", use = "minus", pass = true }]\n'
    assert "cannot be negative" in error_of("params", str(architecture(tmp_path, "top", components)))


@pytest.mark.parametrize(
    "symbol, words",
    [
        ('latex = "\\\\input{/etc/passwd}"', "\\input is not allowed"),
        ('latex = "x^^5cinput"', "character-code"),
        ('latex = "x}{"', "braces"),
        ('latex = "x % comment"', "not allowed"),
        ('latex = "d\\n\\\\write18"', "not allowed"),
        ('latex = "z"\ndefault = "1/0"', "divides by zero"),
        ('latex = "z"\ndefault = "1e100000000"', "NUMBER_DIGITS"),
        ('latex = "z"\ndefault = "-1"', "domain"),
    ],
)
def test_symbols_are_validated_when_the_file_loads(tmp_path, symbol, words):
    symbols = f'[symbols.zz]\n{symbol}\nkind = "convention"\ndescription = "x"\n'
    assert words in error_of("latex", "params", one_param(tmp_path, '"d_model"', symbols=symbols), "--standalone")


def test_safe_latex_letters_still_load(tmp_path):
    symbols = '[symbols.zz]\nlatex = "\\\\mathrm{d}_{\\\\alpha}^{\\\\prime}"\nkind = "architecture"\ndescription = "x"\n'
    path = architecture(tmp_path, "leaf", primitive("leaf", '"d_model*zz"', args='"d_model", "zz"'), arguments="d_model = 8, zz = 3", symbols=symbols)
    assert params_json(str(path))["total"] == 24


@pytest.mark.parametrize(
    "argv, words",
    [
        (["params", PRESET, "--set", "d_model=1e100000000"], "NUMBER_DIGITS"),
        (["params", PRESET, "--convention", "causal=1e-1000000000"], "NUMBER_DIGITS"),
        (["params", PRESET, "--set", "n_layers=" + "9" * 5000], "40 digits"),
        (["flops", PRESET, "--batch", "1", "--seq", "9" * 400], "40 digits"),
        (["fit", PRESET, "--infer", "--solve", "batch", "--seq", "10", "--memory", "1e999999999"], "NUMBER_DIGITS"),
        (["plan", PRESET, "--gpu", "h100-sxm", "--gpus", "10000000000", "--global-batch", "8", "--seq", "128"], "DEVICES"),
        (["sweep", PRESET, "params", "--sample", "d_model=1:100", "--n", "1000000000"], "ARRAY_ELEMENTS"),
        (["sweep", PRESET, "params", "--sample", "d_model=1:100", "--n", "10", "--seed", "-1"], "0 or more"),
        (["sweep", PRESET, "params", "--sample", "d_model=1:99999999999999999999999", "--n", "2"], "2^53"),
        (["time", PRESET, "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", "10", "--output", "1000000000000"], "ARRAY_ELEMENTS"),
        (["params", PRESET, "--set", "qk_norm=7"], "switch"),
        (["params", PRESET, "--set", "attention=@gated_mlp"], "kind attention"),
        (["params", PRESET, "--convention", "causal=nan"], "not a number"),
        (["params", "a" * 300 + ".json"], "too long"),
    ],
)
def test_hostile_arguments_are_one_line(argv, words):
    assert words in error_of(*argv)


def test_a_grid_of_a_billion_points_is_refused_before_it_is_built():
    axis = ",".join(str(i) for i in range(1, 1001))
    assert "ARRAY_ELEMENTS" in error_of("sweep", PRESET, "params", "--grid", f"d_model={axis}", "--grid", f"n_layers={axis}", "--grid", f"vocab={axis}")


def test_output_paths_that_cannot_be_written(tmp_path):
    pytest.importorskip("matplotlib")
    folder = tmp_path / "x.png"
    folder.mkdir()
    assert "is a directory" in error_of("plot", "params-share", PRESET, "--out", str(folder))
    assert "cannot write" in error_of("plot", "params-share", PRESET, "--out", "/proc/x.png")
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    assert "cannot write" in error_of("plot", "params-share", PRESET, "--out", str(blocker / "chart.png"))


def test_model_files_that_cannot_be_read(tmp_path):
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    (tmp_path / "zero.toml").symlink_to("/dev/zero")
    (tmp_path / "loop.json").symlink_to(tmp_path / "loop.json")
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "deep.json").write_text("[" * 100_000 + "]" * 100_000)
    (tmp_path / "deep.toml").write_text("a = " + "[" * 100_000 + "]" * 100_000 + "\n")
    (tmp_path / "infinity.json").write_text(json.dumps(QWEN).replace('"hidden_size": 1024', '"hidden_size": Infinity'))
    (tmp_path / "huge.json").write_text(json.dumps(QWEN).replace('"hidden_size": 1024', '"hidden_size": ' + "9" * 5000))
    assert "FILE_BYTES" in error_of("params", "zero.json", cwd=tmp_path)
    assert "FILE_BYTES" in error_of("params", "zero.toml", cwd=tmp_path)
    assert "a link that leads nowhere" in error_of("params", "loop.json", cwd=tmp_path)
    assert "a_file/config.json" in error_of("params", "a_file/config.json", cwd=tmp_path)
    assert "NESTING_DEPTH" in error_of("params", "deep.json", cwd=tmp_path)
    assert "NESTING_DEPTH" in error_of("params", "deep.toml", cwd=tmp_path)
    assert "Infinity" in error_of("params", "infinity.json", cwd=tmp_path)
    assert "hidden_size" in error_of("params", "huge.json", cwd=tmp_path) or "digits" in error_of("params", "huge.json", cwd=tmp_path)


def test_a_million_layers_read_in_bounded_time(tmp_path):
    many = dict(QWEN, num_hidden_layers=10_000_000)
    (tmp_path / "many.json").write_text(json.dumps(many))
    assert params_json("many.json", cwd=tmp_path)["values"]["n_layers"] == 10_000_000
    counted = dict(GEMMA3, num_hidden_layers=10_000_000)
    counted.pop("layer_types", None)
    (tmp_path / "counted.json").write_text(json.dumps(counted))
    assert "LAYERS" in error_of("params", "counted.json", cwd=tmp_path)


def test_device_figures_that_would_divide_by_zero(tmp_path):
    device = tmp_path / "tiny.toml"
    device.write_text(
        'kind = "accelerator"\ntitle = "t"\nvendor = "v"\nmemory_bytes = 80e9\nhbm_bytes_per_s = 1e-300\n'
        'dense_flops_per_s = { bf16 = 1e15 }\nsource = { title = "s", date = "2024-01" }\n'
    )
    assert "hbm_bytes_per_s" in error_of("roofline", PRESET, "--gpu", str(device), "--phase", "decode", "--batch", "1", "--context", "128")


def test_the_api_raises_symform_errors_only():
    model = symform.load(PRESET)
    for call in (
        lambda: model.evaluate(None),
        lambda: model.with_conventions(causal=float("nan")),
        lambda: model.with_conventions(causal=float("inf")),
        lambda: model.evaluate("params", batch=10**400),
        lambda: model.with_arguments(d_model=10**50),
        lambda: model.with_arguments(qk_norm=7).evaluate("params"),
        lambda: symform.load("a" * 300),
    ):
        with pytest.raises(SymformError) as caught:
            call()
        assert "\n" not in str(caught.value)


def test_fractions_print_in_tables_and_json(tmp_path):
    path = architecture(tmp_path, "halves", primitive("halves", '"d_model"', forward='"d_model/3"'))
    outcome = check_outcome("flops", str(path), "--batch", "1", "--seq", "1", "--json")
    assert outcome.code == 0 and json.loads(outcome.out)["forward"] == pytest.approx(8 / 3)
    assert check_outcome("flops", str(path), "--batch", "1", "--seq", "1").code == 0


# -- properties: generated hostile input ---------------------------------------------------------------

FUZZ = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])

_ATOMS = st.sampled_from(["d_model", "batch", "seq", "past", "act_bytes", "0", "1", "2", "9**64", "10**40", "-1", "1/3", "0.5", "1e300"])
_BINARY = st.sampled_from(["+", "-", "*", "/", "//", "%", "**"])
_FUNCTIONS = st.sampled_from(["min", "max", "ceil", "floor", "sqrt", "log"])


def _combine(children):
    return st.one_of(
        st.tuples(children, _BINARY, children).map(lambda t: f"({t[0]}){t[1]}({t[2]})"),
        st.tuples(_FUNCTIONS, children).map(lambda t: f"{t[0]}({t[1]})"),
        st.tuples(children, st.sampled_from(["<", "==", "and"]), children).map(lambda t: f"({t[0]} {t[1]} {t[2]})"),
        st.tuples(children, st.integers(-70, 70)).map(lambda t: f"({t[0]})**{t[1]}"),
    )


EXPRESSIONS = st.recursive(_ATOMS, _combine, max_leaves=12)


@FUZZ
@given(params=EXPRESSIONS, forward=EXPRESSIONS, d_model=st.sampled_from(["1", "8", "4096", "10**30"]))
@example(params="d_model", forward="((d_model)+(1e300))**15", d_model="1")  # multiplied out: ints past 4,300 digits
@example(params="d_model", forward="(d_model)%(past)", d_model="1")  # a setting that is 0 by default as a divisor
def test_generated_declarations_count_or_refuse(tmp_path, params, forward, d_model):
    path = architecture(tmp_path, "leaf", primitive("leaf", json.dumps(params), forward=json.dumps(forward)), arguments=f"d_model = {d_model}".replace("10**30", "1" + "0" * 30))
    outcome = check_outcome("params", str(path), "--json")
    if outcome.code == 0:
        result = json.loads(outcome.out)
        assert isinstance(result["total"], int) and result["total"] >= 0
    check_outcome("flops", str(path), "--batch", "3", "--seq", "5", "--json")


@pytest.mark.parametrize(
    "argv, words",
    [
        (("flops", "--batch", "3", "--seq", "5"), "divides by past, which is 0 here"),
        (("roofline", "--gpu", "h100-sxm", "--phase", "prefill", "--batch", "1", "--seq", "5"), "divides by past, which is 0 here"),
        (("derive", "forward_flops"), "divides by past, which is 0 here"),
    ],
)
def test_a_divisor_that_a_default_setting_makes_zero_is_refused_by_every_command(tmp_path, argv, words):
    """``past`` is 0 unless given: a part that divides by it is refused in one line, whichever command finishes
    the expression (the roofline and memory reports substitute it themselves)."""
    path = architecture(tmp_path, "leaf", primitive("leaf", json.dumps("d_model"), forward=json.dumps("(d_model)%(past)")), arguments="d_model = 1")
    verb, *rest = argv
    where = [verb, *rest, str(path)] if verb == "derive" else [verb, str(path), *rest]
    assert words in error_of(*where)


def test_a_model_that_moves_no_bytes_serves_with_the_residual_stream_alone(tmp_path):
    """Its largest op's working set is none (sympy's Max of nothing is -oo, which was refused as a division by
    zero); serving memory reads no FLOPs, so a FLOP count dividing by past does not stop it either."""
    path = architecture(tmp_path, "leaf", primitive("leaf", json.dumps("d_model"), forward=json.dumps("(d_model)%(past)")), arguments="d_model = 3")
    outcome = check_outcome("memory", str(path), "--infer", "--batch", "2", "--seq", "5", "--json")
    assert outcome.code == 0
    report = json.loads(outcome.out)
    assert report["components"]["activations"] == 2 * 2 * 5 * 3  # act_bytes · batch · seq · d_model


_NUMBER_TEXT = st.one_of(
    st.integers(-(10**50), 10**50).map(str),
    st.tuples(st.integers(-9, 10**6), st.integers(-(10**10), 10**10)).map(lambda t: f"{t[0]}e{t[1]}"),
    st.tuples(st.integers(-100, 10**45), st.integers(-5, 10**45)).map(lambda t: f"{t[0]}/{t[1]}"),
    st.sampled_from(["nan", "inf", "-inf", "1e", ".5", "0x10", "1_000", "٣", "ｄ", "", " ", "@gated_mlp", "true", "1e-400", "0e99999999999"]),
    st.text(max_size=12),
)


@FUZZ
@given(
    name=st.sampled_from(["d_model", "n_layers", "vocab", "qk_norm", "attention", "mlp", "head", "nope", "n_heads", "d_ff"]),
    value=_NUMBER_TEXT,
    convention=st.sampled_from(["causal", "act_bytes", "kv_bytes", "bwd_mult", "past", "flops_per_mac"]),
    convention_value=_NUMBER_TEXT,
)
def test_generated_settings_count_or_refuse(name, value, convention, convention_value):
    outcome = check_outcome("params", PRESET, "--set", f"{name}={value}", "--convention", f"{convention}={convention_value}", "--json")
    if outcome.code == 0:
        result = json.loads(outcome.out)
        assert isinstance(result["total"], int) and result["total"] >= 0


_FIELD_VALUES = st.one_of(
    st.integers(-5, 10**45),
    st.booleans(),
    st.none(),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    st.lists(st.integers(-3, 50), max_size=5),
    st.lists(st.sampled_from(["sliding_attention", "full_attention", "ｓliding"]), max_size=5),
)


@FUZZ
@given(
    base=st.sampled_from(["qwen", "gemma"]),
    changes=st.dictionaries(
        st.sampled_from(["hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "intermediate_size",
                         "vocab_size", "tie_word_embeddings", "model_type", "layer_types", "sliding_window", "sliding_window_pattern", "ｈidden_size"]),
        _FIELD_VALUES,
        max_size=4,
    ),
)
def test_generated_configs_count_or_refuse(tmp_path, base, changes):
    config = dict(QWEN if base == "qwen" else GEMMA3, **changes)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    outcome = check_outcome("params", str(path), "--json")
    if outcome.code == 0:
        result = json.loads(outcome.out)
        assert isinstance(result["total"], int) and result["total"] >= 0


def device_file(path: Path, memory: str, bandwidth: str, flops: str) -> str:
    path.write_text(
        f'kind = "accelerator"\ntitle = "t"\nvendor = "v"\nmemory_bytes = {memory}\nhbm_bytes_per_s = {bandwidth}\n'
        f'dense_flops_per_s = {{ bf16 = {flops} }}\nsource = {{ title = "s", date = "2024-01" }}\n'
    )
    return str(path)


def device_commands(device: str) -> list[list[str]]:
    return [
        ["roofline", PRESET, "--gpu", device, "--phase", "decode", "--batch", "1", "--context", "128", "--json"],
        ["time", PRESET, "--gpu", device, "--infer", "--batch", "1", "--prompt", "16", "--output", "4", "--json"],
    ]


def command_line(verb: str, first: str, second: str) -> list[str]:
    return {
        "flops": ["flops", PRESET, "--batch", first, "--seq", second],
        "memory": ["memory", PRESET, "--train", "--batch", first, "--seq", second],
        "fit": ["fit", PRESET, "--infer", "--solve", "batch", "--seq", first, "--memory", second],
        "plan": ["plan", PRESET, "--gpu", "h100-sxm", "--gpus", first, "--global-batch", second, "--seq", "128"],
        "sweep": ["sweep", PRESET, "params", "--sample", f"d_model={first}:{second}", "--n", "3", "--seed", first],
        "time": ["time", PRESET, "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", first, "--output", second],
    }[verb] + ["--json"]


VERBS = ("flops", "memory", "fit", "plan", "sweep", "time")


def test_the_fuzzed_commands_run_on_sound_input(tmp_path):
    """The generated cases below vary these commands: on sound values each of them runs (exit 0)."""
    device = device_file(tmp_path / "device.toml", "80e9", "3e12", "1e15")
    for argv in device_commands(device) + [command_line(verb, "8", "80000000000" if verb == "fit" else "8") for verb in VERBS]:
        assert check_outcome(*argv).code == 0, argv


_DEVICE_NUMBERS = st.one_of(st.integers(-5, 10**40), st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([0, 1e-300, 5e-324, 1e308]))


@settings(FUZZ, max_examples=6)  # each sound device runs a roofline and a timing: the slowest case here
@given(memory=_DEVICE_NUMBERS, bandwidth=_DEVICE_NUMBERS, flops=_DEVICE_NUMBERS)
def test_generated_device_files_time_or_refuse(tmp_path, memory, bandwidth, flops):
    def toml_number(x):
        return "nan" if x != x else ("inf" if x == float("inf") else "-inf" if x == float("-inf") else repr(x))

    device = device_file(tmp_path / "device.toml", toml_number(memory), toml_number(bandwidth), toml_number(flops))
    for argv in device_commands(device):
        check_outcome(*argv)


_COUNTS = st.one_of(st.integers(-3, 10**13).map(str), _NUMBER_TEXT)


@FUZZ
@given(verb=st.sampled_from(VERBS), first=_COUNTS, second=_COUNTS)
def test_generated_command_lines_finish_or_refuse(verb, first, second):
    check_outcome(*command_line(verb, first, second))


@settings(max_examples=200, deadline=None)
@given(text=_NUMBER_TEXT)
@example(text="0\x1f")  # a control character after a number: refused, not read as 0
def test_number_text_is_exact_or_refused_without_computing(text):
    try:
        value = number_from_text(text, "x")
    except ValueError as e:
        assert "\n" not in str(e)
        return
    assert abs(value.numerator) < 10**NUMBER_DIGITS * 10 and value.denominator <= 10**NUMBER_DIGITS
    if re.fullmatch(r"-?\d+", text.strip(" \t\r\n")):
        assert value == int(text)


def test_the_harness_reports_tracebacks_hangs_and_memory_blow_ups(monkeypatch):
    """The limits bite: a run that raises, hangs or allocates without bound does not pass as a clean exit."""
    import time

    import isolated

    def crash(argv):
        raise ZeroDivisionError("boom")

    def hang(argv):
        time.sleep(60)

    def hog(argv):
        return len(bytearray(8 * 2**30))

    monkeypatch.setattr(isolated, "main", crash)
    crashed = isolated.run_limited("params")
    assert crashed.code == 71 and "Traceback" in crashed.err
    monkeypatch.setattr(isolated, "main", hang)
    assert isolated.run_limited("params", seconds=0.5).timed_out
    monkeypatch.setattr(isolated, "main", hog)
    hogged = isolated.run_limited("params")
    assert hogged.code == 71 and "MemoryError" in hogged.err
