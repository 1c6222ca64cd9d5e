"""Findings of the second hostile review (issue 37): each input as it was found, one test per class.

Every bad input ends in one line naming the problem and the fix (exit 2 from the CLI, a SymformError from
the API): never a write outside the asked path, a hang, a traceback or a silent wrong number.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from symform.interface.papers import docgen

from checks import run

# a few pages stand for the whole reference: making them all takes minutes
PAGES = {"README.md": docgen.HEADER + "# Reference\n", "components/linear.md": docgen.HEADER + "# `linear`\n", "families/llama.md": docgen.HEADER + "# `llama` family\n"}


@pytest.fixture
def few_pages(monkeypatch):
    made = []

    def maker(text):
        def make():
            made.append(text)
            return text
        return make

    monkeypatch.setattr(docgen, "page_makers", lambda: {rel: maker(text) for rel, text in PAGES.items()})
    return made


# --- 1. writes outside what was asked ------------------------------------------------------------------


def test_docs_never_writes_through_a_page_that_is_a_link(tmp_path, capsys, few_pages):
    target = tmp_path / "precious.txt"
    target.write_text("not symform's")
    out = tmp_path / "reference"
    (out / "components").mkdir(parents=True)
    (out / "components" / "linear.md").symlink_to(target)
    code, _, err = run(capsys, "docs", "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and "linear.md" in err, err
    assert target.read_text() == "not symform's"


def test_docs_never_writes_into_a_folder_that_links_elsewhere(tmp_path, capsys, few_pages):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    out = tmp_path / "reference"
    out.mkdir()
    (out / "families").symlink_to(elsewhere)
    code, _, err = run(capsys, "docs", "--out", str(out))
    assert code == 2 and err.count("\n") == 1 and "link" in err, err
    assert list(elsewhere.iterdir()) == []


def test_a_stale_manifest_does_not_delete_a_hand_written_page(tmp_path, capsys, few_pages):
    out = tmp_path / "reference"
    (out / "components").mkdir(parents=True)
    mine = out / "components" / "my_notes.md"
    mine.write_text("written by hand, no header")
    (out / docgen.MANIFEST).write_text("components/my_notes.md\n")  # a manifest from another time
    code, _, err = run(capsys, "docs", "--out", str(out))
    assert code == 0, err
    assert mine.read_text() == "written by hand, no header"


def test_docs_shows_progress_on_stderr(tmp_path, capsys, few_pages):
    code, out, err = run(capsys, "docs", "--out", str(tmp_path / "reference"))
    assert code == 0 and "3/3 pages" in err and "wrote 3 pages" in out


@pytest.mark.parametrize("where", ["a_file", "/dev/null", "/proc/symform-x", "/etc/passwd"])
def test_docs_refuses_a_destination_before_making_any_page(tmp_path, capsys, few_pages, where):
    if where == "a_file":
        where = str(tmp_path / "a_file")
        Path(where).write_text("x")
    code, _, err = run(capsys, "docs", "--out", where)
    assert code == 2 and err.count("\n") == 1, err
    assert few_pages == [], "pages were made before the destination was checked"


# --- 2. hangs and blow-ups; 3. tracebacks: the Hub cache and checkpoint folders ---------------------------

from test_hub import COMMIT, hub_cache, symform as symform_child  # noqa: E402

from symform.engine.store import hub  # noqa: E402
from symform.engine.errors import BudgetError, ConfigError, SymformError  # noqa: E402
from symform.engine.language.families import checkpoint_facts, preset_config  # noqa: E402

QWEN3_8B = json.dumps(preset_config("qwen3-8b")[0]).encode()
REPO = "acme/hostile"


def snapshot(root: Path) -> Path:
    return root / f"models--{REPO.replace('/', '--')}" / "snapshots" / COMMIT


def one_line_exit_2(done, *words):
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr[-800:]
    for word in words:
        assert word in done.stderr, done.stderr


def test_a_cached_config_alone_is_read_without_waiting_on_retries(tmp_path):
    """Online but unreachable (no socket connects): the optional files are asked for once, not retried for a minute."""
    root = tmp_path / "hub"
    hub_cache(root, REPO, {"config.json": QWEN3_8B})
    done = symform_child(root, "params", REPO, "--json", env={"HF_HUB_OFFLINE": "0"})  # the child's own limit is 120 s
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["total"] == 8_190_735_360  # Qwen3-8B's numel() (tests/test_oracle_params.py)
    assert "read from the Hugging Face cache" in done.stderr and "does not answer" in done.stderr


@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_a_cached_file_linked_to_dev_zero_or_huge_ends_after_one_bounded_read(tmp_path, name):
    root = tmp_path / "hub"
    hub_cache(root, REPO, {"config.json": QWEN3_8B, "model.safetensors.index.json": b"{}"}, absent=("hf_quant_config.json",))
    (snapshot(root) / name).unlink()
    (snapshot(root) / name).symlink_to("/dev/zero")
    done = symform_child(root, "params", REPO)
    if done.returncode != 0:  # huggingface_hub may take a device for no file at all: then it is simply not read
        one_line_exit_2(done, name)
    (snapshot(root) / name).unlink()
    (snapshot(root) / name).write_bytes(b"{" + b" " * (17 * 2**20) + b"}")
    one_line_exit_2(symform_child(root, "params", REPO), name, "FILE_BYTES")


def test_a_pipe_named_model_safetensors_is_not_waited_on(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_bytes(QWEN3_8B)
    os.mkfifo(folder / "model.safetensors")
    code, out, err = _cli(folder / "config.json")
    assert code == 2 and err.count("\n") == 1 and "pipe" in err, err


def _cli(*argv):
    import subprocess

    done = subprocess.run([sys.executable, "-m", "symform", "params", *map(str, argv)], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    return done.returncode, done.stdout, done.stderr


def safetensors(header: bytes) -> bytes:
    return len(header).to_bytes(8, "little") + header


def test_safetensors_headers_share_one_budget(tmp_path):
    """Two headers each under the format's 100 MiB, together past what a checkpoint's headers may cost."""
    half = hub.MAX_HEADER // 5  # 20 MiB each, 40 MiB together
    for i in range(2):
        (tmp_path / f"model-0000{i}.safetensors").write_bytes(safetensors(b"{}" + b" " * (half - 2)))
    with pytest.raises(BudgetError) as caught:
        hub.safetensors_dtypes(tmp_path)
    assert "HEADER_BYTES" in str(caught.value) and "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "header",
    [
        b'{"w": {"dtype": "BF16", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 2]}}',  # past Python's int digits
        b"[" * 100_000 + b"]" * 100_000,  # nested past the recursion limit
        b'{"w": {"dtype": "BF16", "shape": [' + b"9" * 30 + b'], "data_offsets": [0, 2]}}',  # past the format's u64
    ],
)
def test_hostile_safetensors_headers_are_one_line(tmp_path, header):
    (tmp_path / "model.safetensors").write_bytes(safetensors(header))
    with pytest.raises(ConfigError) as caught:
        hub.safetensors_dtypes(tmp_path)
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    "text",
    [
        '{"hidden_size": ' + "9" * 5000 + "}",
        "[" * 50_000 + "]" * 50_000,
        '{"metadata": {"total_size": NaN}}',
        '{"metadata": {"total_size": Infinity}}',
    ],
)
@pytest.mark.parametrize("name", ["config.json", "model.safetensors.index.json"])
def test_hostile_numbers_and_nesting_in_cached_hub_files_are_one_line(tmp_path, text, name):
    root = tmp_path / "hub"
    files = {"config.json": QWEN3_8B, "model.safetensors.index.json": b"{}", name: text.encode()}
    hub_cache(root, REPO, files, absent=("hf_quant_config.json",))
    one_line_exit_2(symform_child(root, "params", REPO), name)


@pytest.mark.parametrize(
    "index, words",
    [
        ({"metadata": {"total_size": float("nan")}}, ("total_size",)),
        ({"metadata": {"total_size": float("inf")}}, ("total_size",)),
        ({"metadata": {"total_size": -5}}, ("total_size", "-5")),
        ({"metadata": {"total_size": 10**60}}, ("total_size",)),
        ({"weight_map": {"w": ["a.safetensors"]}}, ("weight_map",)),
    ],
)
def test_an_index_with_impossible_values_is_one_line(index, words):
    with pytest.raises(SymformError) as caught:
        checkpoint_facts({}, index=index)
    assert "\n" not in str(caught.value)
    for word in words:
        assert word in str(caught.value)


@pytest.mark.parametrize("repo", ["a/b..c", "a--b/c", "acme/" + "x" * 100])
def test_repo_ids_the_hub_refuses_are_one_line(tmp_path, repo):
    one_line_exit_2(symform_child(tmp_path / "hub", "params", repo), "not a Hugging Face Hub id")


@pytest.mark.parametrize("note", ['{"dtypes": [1, 2]}', '{"dtypes": {"BF16": "many"}}', "[]", "{", '{"dtypes": {"BF16": {"tensors": NaN}}}'])
def test_a_damaged_dtypes_note_is_read_again_not_a_traceback(tmp_path, note):
    root = tmp_path / "hub"
    hub_cache(root, REPO, {"config.json": QWEN3_8B, "model.safetensors.index.json": b"{}"}, absent=("hf_quant_config.json",))
    kept = tmp_path / "hf-home" / "assets" / "symform" / REPO.replace("/", "--") / COMMIT
    kept.mkdir(parents=True)
    (kept / hub.DTYPES_FILE).write_text(note)
    done = symform_child(root, "params", REPO, "--json")
    assert done.returncode == 0, done.stderr
    assert "checkpoint_dtypes" not in json.loads(done.stdout)  # offline: the damaged note gives no dtypes


# --- 2. budgets: expressions and names ---------------------------------------------------------------------


def test_forty_nested_logs_in_a_declaration_meet_a_budget(tmp_path, capsys):
    expression = "d_model"
    for _ in range(40):
        expression = f"log({expression})"
    path = tmp_path / "leaf.toml"
    path.write_text(
        '[model]\nroot = "leaf"\narguments = { d_model = 8 }\n\n[components.leaf]\ndoc = "x"\nargs = ["d_model"]\n'
        f'params = "{expression}"\nforward_flops = "0"\nbytes_moved = "0"\nsaved_activations = "0"\n'
    )
    code, _, err = run(capsys, "params", str(path))
    assert code == 2 and err.count("\n") == 1 and "ROOT_LOG_DEPTH" in err, err


def test_logs_nested_across_parts_meet_the_same_budget(tmp_path, capsys):
    """Each declaration nests 8 logs, within the parser's budget; bound into one another they nest 16."""
    eight = lambda x: "log(" * 8 + x + ")" * 8  # noqa: E731
    path = tmp_path / "top.toml"
    path.write_text(
        '[model]\nroot = "top"\narguments = { d_model = 8 }\n\n[components.leaf]\ndoc = "x"\nargs = ["x"]\n'
        f'params = "{eight("x")}"\nforward_flops = "0"\nbytes_moved = "0"\nsaved_activations = "0"\n\n'
        f'[components.top]\ndoc = "x"\nargs = ["d_model"]\nparts = [{{ name = "a", use = "leaf", with = {{ x = "{eight("d_model")}" }} }}]\n'
    )
    code, _, err = run(capsys, "params", str(path))
    assert code == 2 and err.count("\n") == 1 and "ROOT_LOG_DEPTH" in err, err


@pytest.mark.parametrize("name", ["x" * 300, "h100" + "/" * 300, "a" * 5000])
def test_a_device_name_too_long_for_the_filesystem_is_one_line(capsys, name):
    code, _, err = run(capsys, "hardware", name)
    assert code == 2 and err.count("\n") == 1, err


@pytest.mark.parametrize("typed, meant", [("h100", "h100-sxm"), ("H100", "h100-sxm"), ("mi300", "mi300x")])
def test_a_near_device_name_gets_a_did_you_mean(capsys, typed, meant):
    code, _, err = run(capsys, "memory", "qwen3-0.6b", "--infer", "--batch", "1", "--seq", "8", "--gpu", typed)
    assert code == 2 and err.count("\n") == 1 and "did you mean" in err and meant in err, err


def test_a_device_name_in_capitals_is_the_device(capsys):
    code, out, err = run(capsys, "hardware", "H100-SXM")
    assert code == 0 and out.startswith("h100-sxm"), err


# --- 3. tracebacks in the Python API and the command line -------------------------------------------------


def test_a_sweep_of_no_quantity_is_one_line():
    import symform

    with pytest.raises(symform.EvaluationError) as caught:
        symform.sweep(symform.load("qwen3-0.6b"), [])
    assert "no quantity" in str(caught.value)


def test_a_size_past_python_s_digit_limit_is_one_line():
    import symform

    config = json.loads((Path(__file__).resolve().parents[1] / "formulas" / "presets" / "qwen3-0.6b.json").read_text())
    with pytest.raises(symform.SymformError) as caught:
        symform.Model.from_config({**config, "hidden_size": 10**5000})
    assert "hidden_size" in str(caught.value) and len(str(caught.value)) < 400


@pytest.mark.parametrize("skew", ["nan", "inf", "-1", "x"])
def test_an_expert_skew_that_is_no_exponent_is_refused_by_the_parser(capsys, skew):
    code, _, err = run(capsys, "time", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", "8", "--output", "8", "--expert-skew", skew)
    assert code == 2 and err.count("\n") == 1 and "--expert-skew" in err, err


# --- 5. confusing messages -----------------------------------------------------------------------------------


def test_a_preset_with_a_revision_is_told_to_use_its_hub_id(capsys):
    code, _, err = run(capsys, "params", "qwen3-8b", "--revision", "main")
    assert code == 2 and err.count("\n") == 1 and "Qwen/Qwen3-8B --revision main" in err and "neither" not in err, err


def test_a_failing_expert_skew_names_the_flag_not_the_user_s_sizes(capsys):
    code, out, err = run(capsys, "time", "qwen3-30b-a3b", "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", "8", "--output", "8", "--expert-skew", "1.1")
    assert code == 0 or ("--expert-skew" in err and "not of your sizes" in err and err.count("\n") == 1), err


# --- 4. silent wrong numbers ----------------------------------------------------------------------------------

import symform  # noqa: E402
from symform.analysis.memory.memory import inference_memory, training_memory  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def preset_json(name: str) -> dict:
    return json.loads((ROOT / "formulas" / "presets" / f"{name}.json").read_text())


def test_a_kept_module_of_one_numbered_layer_is_not_kept_in_every_layer():
    """transformers keeps model.layers.0.mlp unquantised in layer 0 alone; symform counts layers alike, so it refuses
    rather than keep every layer's MLP in bf16."""
    quantization = {"quant_method": "bitsandbytes", "load_in_4bit": True, "llm_int8_skip_modules": ["model.layers.0.mlp"]}
    model = symform.Model.from_config({**preset_json("qwen3-0.6b"), "quantization_config": quantization})
    with pytest.raises(ConfigError) as caught:
        inference_memory(model, batch=1, seq=8)
    assert "model.layers.0.mlp" in str(caught.value) and "--weight-format" in str(caught.value)
    every_layer = {**quantization, "llm_int8_skip_modules": ["mlp"]}  # a name without an index means every layer: still read
    assert inference_memory(symform.Model.from_config({**preset_json("qwen3-0.6b"), "quantization_config": every_layer}), batch=1, seq=8).total > 0


def test_llama4_moe_layers_minus_one_is_not_read_as_absent():
    """symform's llama4 family uses [-1] inside to mean "no list"; in a config transformers reads it as a layer index
    that matches no layer (no expert layer at all), so it must not make every layer an expert layer."""
    config = preset_json("llama-4-scout")
    config["text_config"]["moe_layers"] = [-1]
    with pytest.raises(ConfigError) as caught:
        symform.Model.from_config(config)
    assert "moe_layers" in str(caught.value) and "count from 0" in str(caught.value)


@pytest.mark.parametrize("symmetric", ["false", "true", 0, None])
def test_compressed_tensors_symmetric_must_be_a_boolean(symmetric):
    config = json.loads((ROOT / "tests" / "data" / "compressed_tensors" / "w4a16-asym-group128" / "config.json").read_text())
    config["quantization_config"]["config_groups"]["group_0"]["weights"]["symmetric"] = symmetric
    with pytest.raises(ConfigError) as caught:
        inference_memory(symform.Model.from_config(config), batch=1, seq=8)
    assert "symmetric" in str(caught.value)


@pytest.mark.parametrize("batch", [-1, 0, float("nan"), float("inf"), "2", 1.5, True])
@pytest.mark.parametrize("report", [inference_memory, training_memory])
def test_the_memory_api_refuses_a_batch_that_is_no_count(report, batch):
    model = symform.load("qwen3-0.6b")
    with pytest.raises(symform.SymformError) as caught:
        report(model, batch=batch, seq=16)
    assert "batch" in str(caught.value)


def test_a_negative_index_total_size_is_refused_not_printed(tmp_path, capsys):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(preset_json("qwen3-0.6b")))
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": -5}, "weight_map": {}}))
    code, out, err = run(capsys, "memory", str(folder / "config.json"), "--infer", "--batch", "1", "--seq", "8")
    assert code == 2 and err.count("\n") == 1 and "total_size" in err and "-5 bytes" not in out, err


def test_a_drafter_of_another_vocabulary_is_refused(capsys):
    code, _, err = run(capsys, "plan", "qwen3-8b", "--gpu", "h100-sxm", "--serve", "--prompt", "512", "--output", "128", "--ttft-max", "1",
                       "--tpot-max", "0.1", "--speculate", "3", "--acceptance", "0.7", "--draft", "bert-base-uncased")
    assert code == 2 and err.count("\n") == 1 and "vocabulary" in err, err


# --- fuzz: every surface ends in one line, exit 2, or a number an oracle gives --------------------------------

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

HOSTILE_TEXT = ["nan", "-1", "0", "1e400", "x", "9" * 5000, "1/0", "", "inf", "1.5", "h100", "fp8", "../../etc", "a" * 300, "2"]
CLI_BASES = {
    "memory": (["memory", "qwen3-0.6b", "--infer", "--batch", "1", "--seq", "8"], ["--past", "--kv-dtype", "--kv-block", "--tp", "--gpu", "--weight-format", "--offload", "--set", "--convention"]),
    "roofline": (["roofline", "qwen3-0.6b", "--gpu", "h100-sxm", "--phase", "decode", "--batch", "1", "--past", "8"], ["--past", "--kv-dtype", "--dtype", "--seq", "--sram-bytes", "--set", "--lora-rank"]),
    "time": (["time", "qwen3-0.6b", "--gpu", "h100-sxm", "--infer", "--batch", "1", "--prompt", "8", "--output", "4"], ["--kv-dtype", "--dtype", "--expert-skew", "--tp", "--node-size", "--price-per-hour", "--set"]),
    "fit": (["fit", "qwen3-0.6b", "--infer", "--gpu", "h100-sxm", "--solve", "batch", "--seq", "8"], ["--past", "--kv-dtype", "--kv-block", "--memory"]),
}


@st.composite
def argument_vectors(draw):
    base, flags = CLI_BASES[draw(st.sampled_from(sorted(CLI_BASES)))]
    argv = list(base)
    for _ in range(draw(st.integers(1, 2))):
        flag, value = draw(st.sampled_from(flags)), draw(st.sampled_from(HOSTILE_TEXT))
        if flag == "--set":
            value = draw(st.sampled_from(["d_model", "n_layers", "kv_bytes", "vocab"])) + "=" + value
        argv += [flag, value]
    return argv


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(argv=argument_vectors())
def test_fuzz_cli_argument_vectors(capsys, argv):
    code = __import__("symform.interface.cli.cli", fromlist=["main"]).main(argv)
    out, err = capsys.readouterr()
    errors = [line for line in err.splitlines() if not line.startswith("symform: note")]
    assert code in (0, 2) and (code == 0 or len(errors) == 1), (argv, err[-500:])


COUNTS = st.one_of(st.integers(-3, 40), st.sampled_from([float("nan"), float("inf"), "2", 1.5, True, None, 10**50, 10**5000, [1]]))


@settings(max_examples=60, deadline=None)
@given(batch=COUNTS, seq=COUNTS, past=COUNTS)
def test_fuzz_inference_memory_is_refused_or_the_kv_cache_by_hand(batch, seq, past):
    """Qwen3-0.6B caches K and V of 28 layers × 8 heads × 128 in bf16: 2·28·8·128·2 bytes per token of each sequence."""
    model = symform.load("qwen3-0.6b")
    try:
        report = inference_memory(model, batch=batch, seq=seq, past=past)
    except symform.SymformError as e:
        assert "\n" not in str(e)
        return
    assert all(type(v) is int for v in (batch, seq, past)) and batch >= 1 and seq >= 1 and past >= 0
    assert report.values["kv_cache"] == 2 * 28 * 8 * 128 * 2 * batch * (past + seq)


QUANT_VALUES = st.sampled_from(["true", "false", None, -1, 0, 16, 128, 10**50, float("nan"), [128, 128], [0, 128], ["x"], {}, "int"])
QUANT_KEYS = ["load_in_4bit", "load_in_8bit", "bits", "group_size", "weight_block_size", "modules_to_not_convert", "llm_int8_skip_modules", "ignore", "fmt", "bnb_4bit_use_double_quant"]


@settings(max_examples=60, deadline=None)
@given(method=st.sampled_from(["bitsandbytes", "fp8", "gptq", "awq", "mxfp4", "compressed-tensors", "nope", 7]), changes=st.dictionaries(st.sampled_from(QUANT_KEYS), QUANT_VALUES, max_size=3))
def test_fuzz_quantization_configs_are_refused_or_within_the_weights_bounds(method, changes):
    """Stored weights lie between 4 bits and 4 bytes per parameter (plus scales, far below a byte each) or are refused."""
    quantization = {"quant_method": method, **changes}
    try:
        model = symform.Model.from_config({**preset_json("qwen3-0.6b"), "quantization_config": quantization})
        weights = inference_memory(model, batch=1, seq=1).values["weights"]
    except symform.SymformError as e:
        assert "\n" not in str(e)
        return
    params = 596_049_920  # Qwen3-0.6B's numel() (tests/test_oracle_params.py), tied embeddings counted once
    assert params // 2 <= weights <= 4 * params, (quantization, weights)


def test_fuzz_hub_cache_trees(tmp_path):
    """Cached repositories whose optional files are hostile, read in one child process (offline, no sockets)."""
    root = tmp_path / "hub"
    header = lambda h: len(h).to_bytes(8, "little") + h  # noqa: E731
    hostile = [b"", b"{", b"[]", b"null", b"[" * 200 + b"]" * 200, b'{"a": ' + b"9" * 5000 + b"}", b'{"metadata": {"total_size": "12"}}',
               b'{"metadata": {"total_size": 1e400}}', b'{"weight_map": {"a": 1}}', b'{"weight_map": [1, 2]}', b"\xff\xfe", b'{"metadata": {"total_size": -1}}',
               b'{"quantization": {"quant_algo": "NVFP4", "exclude_modules": [1]}}', b'{"quantization": "x"}']
    weights = [b"", b"\x00" * 8, header(b"{}"), header(b'{"w": {"dtype": 5, "shape": [1], "data_offsets": [0, 2]}}'), (2**63).to_bytes(8, "little"),
               header(b'{"w": {"dtype": "BF16", "shape": [' + b"9" * 5000 + b'], "data_offsets": [0, 2]}}'), header(b"[" * 100 + b"]" * 100)]
    cases = [(name, text) for name in ("model.safetensors.index.json", "hf_quant_config.json") for text in hostile] + [("model.safetensors", w) for w in weights]
    for i, (name, data) in enumerate(cases):
        absent = tuple({"hf_quant_config.json", "model.safetensors.index.json"} - {name})
        hub_cache(root, f"acme/m{i}", {"config.json": QWEN3_8B, name: data}, absent=absent)
    body = (
        "import io, contextlib\nfrom symform.interface.cli.cli import main\nbad = []\n"
        f"for i in range({len(cases)}):\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):\n"
        "        code = main(['params', f'acme/m{i}'])\n"
        "    lines = [l for l in err.getvalue().splitlines() if not l.startswith('symform: note')]\n"
        "    if code not in (0, 2) or (code == 2 and len(lines) != 1):\n"
        "        bad.append((i, code, err.getvalue()[-300:]))\n"
        "print(bad)\n"
    )
    done = symform_child(root, body=body)
    assert done.returncode == 0 and done.stdout.strip() == "[]", (done.stdout[-2000:], done.stderr[-2000:])
