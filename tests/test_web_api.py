"""`symform web`'s JSON API: each route answers exactly what the CLI's --json prints for the same arguments (the CLI
run as its own program here), bad input gets the CLI's one-line message, and the server keeps its promises: no
file read from its disk, no body over its budget, uploads removed after the request, the Hub only from the cache."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("starlette", reason="symform web needs Starlette: pip install starlette uvicorn")
pytest.importorskip("httpx", reason="Starlette's TestClient needs httpx: pip install 'symform[test]'")

from starlette.testclient import TestClient  # noqa: E402
from test_hub import _NO_NETWORK, QWEN3_32B_FP8_TOTAL_SIZE, cache  # noqa: E402,F401  (cache: a fixture)
from web_serving import ROOT, get, served  # noqa: E402

from symform.interface.cli import web  # noqa: E402
from symform.interface.cli.cli import main  # noqa: E402

DECLARATION = ROOT / "tests" / "data" / "check" / "right_ffn.toml"
VOLATILE = {"screen_seconds"}  # the planner reports how long its screen took: a measurement, not a result


@pytest.fixture(scope="module")
def client() -> TestClient:
    return TestClient(web.create_app())


def cli(*argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The CLI as its own program: what a user's terminal prints."""
    return subprocess.run([sys.executable, "-m", "symform", *argv], capture_output=True, text=True, cwd=cwd, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)


def cli_json(*argv: str, cwd: Path | None = None) -> dict:
    done = cli(*argv, "--json", cwd=cwd)
    assert done.returncode == 0, done.stderr
    return _stable(json.loads(done.stdout))


def _stable(report: dict) -> dict:
    return {k: v for k, v in report.items() if k not in VOLATILE}


# (route, query, the same command line)
ROUTES = [
    ("time", [("model", "llama-3.1-8b"), ("gpu", "h100-sxm"), ("gpus", "8"), ("train", "1"), ("global_batch", "16"), ("seq", "4096"), ("tp", "4"), ("sp", "0")],
     ["time", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--train", "--global-batch", "16", "--seq", "4096", "--tp", "4", "--no-sp"]),  # sp=0: off, where the default is on
    ("params", [("model", "qwen3-32b")], ["params", "qwen3-32b"]),
    ("params", [("model", "qwen3-0.6b"), ("set", "n_layers=4"), ("depth", "2")], ["params", "qwen3-0.6b", "--set", "n_layers=4", "--depth", "2"]),
    ("flops", [("model", "llama-3-8b"), ("batch", "2"), ("seq", "1024")], ["flops", "llama-3-8b", "--batch", "2", "--seq", "1024"]),
    ("memory", [("model", "qwen3-32b"), ("train", "1"), ("batch", "1"), ("seq", "4096"), ("gpu", "h100-sxm"), ("tp", "2"), ("dp", "4"), ("zero", "1"), ("recompute", "selective")],
     ["memory", "qwen3-32b", "--train", "--batch", "1", "--seq", "4096", "--gpu", "h100-sxm", "--tp", "2", "--dp", "4", "--zero", "1", "--recompute", "selective"]),
    ("memory", [("model", "qwen3-0.6b"), ("train", "1"), ("batch", "1"), ("seq", "1024"), ("framework", "megatron"), ("tp", "2"), ("dp", "2")],
     ["memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "1024", "--framework", "megatron", "--tp", "2", "--dp", "2"]),
    ("memory", [("model", "llama-3-8b"), ("infer", "1"), ("batch", "1"), ("seq", "131072"), ("gpu", "h100-sxm"), ("weight_format", "fp8")],
     ["memory", "llama-3-8b", "--infer", "--batch", "1", "--seq", "131072", "--gpu", "h100-sxm", "--weight-format", "fp8"]),
    ("fit", [("model", "qwen3-8b"), ("infer", "1"), ("gpu", "h100-sxm"), ("solve", "batch"), ("seq", "8192")], ["fit", "qwen3-8b", "--infer", "--gpu", "h100-sxm", "--solve", "batch", "--seq", "8192"]),
    ("time", [("model", "qwen3-32b"), ("train", "1"), ("gpu", "h100-sxm"), ("gpus", "8"), ("tp", "8"), ("global_batch", "8"), ("seq", "4096")],
     ["time", "qwen3-32b", "--train", "--gpu", "h100-sxm", "--gpus", "8", "--tp", "8", "--global-batch", "8", "--seq", "4096"]),
    ("time", [("model", "llama-3-8b"), ("infer", "1"), ("gpu", "a100-sxm-80gb"), ("batch", "4"), ("prompt", "2048"), ("output", "128")],
     ["time", "llama-3-8b", "--infer", "--gpu", "a100-sxm-80gb", "--batch", "4", "--prompt", "2048", "--output", "128"]),
    ("roofline", [("model", "qwen3-8b"), ("gpu", "h100-sxm"), ("phase", "decode"), ("batch", "8"), ("context", "4096")],
     ["roofline", "qwen3-8b", "--gpu", "h100-sxm", "--phase", "decode", "--batch", "8", "--context", "4096"]),
    ("plan", [("model", "qwen3-0.6b"), ("gpu", "h100-sxm"), ("gpus", "4"), ("global_batch", "8"), ("seq", "2048"), ("top", "3")],
     ["plan", "qwen3-0.6b", "--gpu", "h100-sxm", "--gpus", "4", "--global-batch", "8", "--seq", "2048", "--top", "3"]),
    ("latex", [("quantity", "params"), ("model", "qwen3-32b")], ["latex", "params", "qwen3-32b"]),
    ("latex", [("quantity", "kv-cache"), ("model", "llama-3-8b"), ("leading", "1")], ["latex", "kv-cache", "llama-3-8b", "--leading"]),
    ("derive", [("quantity", "forward-flops"), ("model", "qwen3-8b"), ("batch", "1"), ("seq", "2048")], ["derive", "forward-flops", "qwen3-8b", "--batch", "1", "--seq", "2048"]),
    ("models", [], ["models"]),
    ("hardware", [], ["hardware"]),
    ("hardware", [("name", "h100-sxm")], ["hardware", "h100-sxm"]),
]


@pytest.mark.parametrize(("route", "query", "argv"), ROUTES, ids=[f"{r}-{i}" for i, (r, _, _) in enumerate(ROUTES)])
def test_each_route_answers_the_clis_json(client, route, query, argv):
    response = client.get(f"/api/{route}?{urlencode(query)}")
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("application/json")
    assert _stable(response.json()) == cli_json(*argv)


def test_the_qwen3_32b_count_is_its_checkpoints(client):
    # the published checkpoint's model.safetensors.index.json: total_size 65,524,246,528 bytes of bf16
    assert client.get("/api/params?model=qwen3-32b").json()["total"] == 65_524_246_528 // 2


def test_integers_past_two_to_the_53_arrive_exact(client):
    # the page parses them as BigInt; the JSON text itself must carry every digit
    text = client.get("/api/flops?model=qwen3-32b&batch=64&seq=4096").text
    forward = json.loads(text)["forward"]
    assert forward > 2**53 and f'"forward": {forward},' in text


@pytest.mark.parametrize(
    ("query", "argv"),
    [
        ([("model", "qwen3-32b"), ("train", "1"), ("batch", "0"), ("seq", "4096")], ["memory", "qwen3-32b", "--train", "--batch", "0", "--seq", "4096"]),
        ([("model", "qwen3-32b"), ("train", "1"), ("batch", "1"), ("seq", "4096"), ("gpu", "h100")], ["memory", "qwen3-32b", "--train", "--batch", "1", "--seq", "4096", "--gpu", "h100"]),
        ([("model", "qwen3-32c"), ("infer", "1"), ("batch", "1"), ("seq", "1")], ["memory", "qwen3-32c", "--infer", "--batch", "1", "--seq", "1"]),
        ([("model", "qwen3-32b"), ("infer", "1"), ("batch", "1"), ("seq", "1e100000000")], ["memory", "qwen3-32b", "--infer", "--batch", "1", "--seq", "1e100000000"]),
        ([("model", "qwen3-32b"), ("batch", "1")], ["memory", "qwen3-32b", "--batch", "1"]),
    ],
    ids=["batch-zero", "unknown-gpu", "unknown-model", "over-budget-number", "no-phase"],
)
def test_bad_input_gets_the_clis_one_line_message_and_the_server_answers_on(client, query, argv):
    response = client.get(f"/api/memory?{urlencode(query)}")
    assert response.status_code == 400
    done = cli(*argv, "--json")
    assert done.returncode == 2
    assert response.json() == {"error": done.stderr.strip().removeprefix("symform: error: ")}
    assert client.get("/api/params?model=qwen3-0.6b").status_code == 200


@pytest.mark.parametrize(
    ("query", "words"),
    [
        ("model=/etc/passwd", ["names a file", "upload"]),
        ("model=pyproject.toml", ["names a file"]),
        ("model=README.md", ["names a file"]),  # it exists where the server runs
        ("model=..%2Fsecret.json", ["names a file"]),
        ("model=qwen3-0.6b&plot=chart.png", ["plot", "writes a chart file"]),
        ("model=qwen3-0.6b&help=1", ["help"]),
        ("model=--help", ["starts with '-'"]),
        ("model=qwen3-0.6b&depth=--json", ["starts with '-'"]),
        ("model=qwen3-0.6b&json=0", ["json", "always given"]),
        ("model=qwen3-0.6b&standalone=1", ["standalone", "not JSON"]),
        ("model=qwen3-0.6b&no_such_option=3", ["unknown option '--no-such-option'", "symform params --help"]),
    ],
)
def test_requests_that_would_reach_the_servers_files_or_skip_the_json_are_refused(client, monkeypatch, query, words):
    monkeypatch.chdir(ROOT)
    response = client.get(f"/api/params?{query}")
    assert response.status_code == 400
    message = response.json()["error"]
    assert "\n" not in message
    for word in words:
        assert word in message, message


def test_a_failure_inside_a_command_is_one_line_and_the_server_answers_on(client, monkeypatch):
    def broken(argv):
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(web, "run_cli", broken)
    response = client.get("/api/params?model=qwen3-0.6b")
    assert response.status_code == 500
    assert response.json() == {"error": "internal error in symform params: ZeroDivisionError: division by zero"}
    monkeypatch.undo()
    assert client.get("/api/params?model=qwen3-0.6b").status_code == 200


def test_an_answer_that_is_not_json_is_never_passed_off_as_json(client, monkeypatch):
    monkeypatch.setattr(web, "run_cli", lambda argv: (0, "\\documentclass{article}", ""))
    response = client.get("/api/latex?quantity=params&model=qwen3-0.6b")
    assert response.status_code == 500 and "printed no JSON" in response.json()["error"]


def test_an_unknown_command_is_404_with_the_list(client):
    response = client.get("/api/docs?out=/tmp/x")
    assert response.status_code == 404 and "params" in response.json()["error"]


def test_a_body_over_the_budget_is_refused_with_or_without_a_length(client):
    too_big = b"{" + b" " * web.MAX_BODY_BYTES + b"}"
    declared = client.post("/api/params?upload=config.json", content=too_big)
    assert declared.status_code == 413 and "bytes" in declared.json()["error"]
    streamed = client.post("/api/params?upload=config.json", content=iter([too_big[:1000], too_big[1000:]]))  # chunked: no Content-Length
    assert streamed.status_code == 413
    assert client.get("/api/params?model=qwen3-0.6b").status_code == 200


def _leftovers() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("symform-web-*")}


def test_an_uploaded_declaration_is_the_clis_and_leaves_nothing_behind(client, tmp_path):
    before = _leftovers()
    text = DECLARATION.read_bytes()
    response = client.post("/api/params?upload=right_ffn.toml", content=text)
    assert response.status_code == 200, response.text
    # the CLI on the same file where the server puts it: uploaded/NAME, relative to its folder
    (tmp_path / "uploaded").mkdir()
    (tmp_path / "uploaded" / "right_ffn.toml").write_bytes(text)
    assert response.json() == cli_json("params", "uploaded/right_ffn.toml", cwd=tmp_path)
    # the tiny Llama by hand: embed and head 101·64 each, final norm 64; per layer q,o 64·4·16, k,v 64·2·16,
    # the gated MLP 3·64·96, two norms 2·64: 2 · (2·4096 + 2·2048 + 18432 + 128) = 61,696
    assert response.json()["total"] == 2 * 101 * 64 + 64 + 61_696
    assert _leftovers() <= before


def test_an_uploaded_config_json_is_the_clis(client, tmp_path):
    config = (ROOT / "tests" / "data" / "hub" / "gpt-oss-20b.config.json").read_bytes()
    response = client.post("/api/memory?" + urlencode({"upload": "config.json", "infer": 1, "batch": 1, "seq": 1024}), content=config)
    assert response.status_code == 200, response.text
    (tmp_path / "uploaded").mkdir()
    (tmp_path / "uploaded" / "config.json").write_bytes(config)
    assert response.json() == cli_json("memory", "uploaded/config.json", "--infer", "--batch", "1", "--seq", "1024", cwd=tmp_path)
    assert response.json()["model"] == "uploaded"


def test_a_broken_upload_gets_the_clis_message_naming_the_file_not_the_temp_folder(client, tmp_path):
    response = client.post("/api/params?upload=config.json", content=b"{not json")
    assert response.status_code == 400
    (tmp_path / "uploaded").mkdir()
    (tmp_path / "uploaded" / "config.json").write_bytes(b"{not json")
    done = cli("params", "uploaded/config.json", "--json", cwd=tmp_path)
    assert response.json()["error"] == done.stderr.strip().removeprefix("symform: error: ")
    assert tempfile.gettempdir() not in response.json()["error"]


@pytest.mark.parametrize(("name", "body", "words"), [("evil.py", b"x", ["neither a config.json"]), ("config.json", b"", ["no body"])])
def test_bad_uploads_are_refused(client, name, body, words):
    response = client.post(f"/api/params?upload={quote(name)}", content=body)
    assert response.status_code == 400
    for word in words:
        assert word in response.json()["error"]


def test_the_page_and_its_scripts_are_served_and_load_nothing_from_the_network(client):
    page = client.get("/")
    assert page.status_code == 200 and "symform" in page.text
    for asset in ("/static/katex/katex.min.js", "/static/katex/katex.min.css", "/static/katex/fonts/KaTeX_Main-Regular.woff2", "/static/katex/LICENSE"):
        assert client.get(asset).status_code == 200, asset
    for text in (page.text, client.get("/static/katex/katex.min.css").text):
        assert "http://" not in text and "https://" not in text and "//cdn" not in text


def test_the_page_is_offered_the_clis_own_choices(client):
    options = client.get("/api/options").json()
    assert "mixed" in options["precision"] and "fp8" in options["weight_format"]
    assert options["recompute"] == ["none", "selective", "full"] and options["zero"] == ["0", "1", "2", "3"]
    assert "params" in options["quantity"] and "kv-cache" in options["quantity"]


def test_web_binds_to_loopback_by_default_and_refuses_a_bad_port(capsys):
    from symform.interface.cli.cli import build_parser

    args = build_parser("web").parse_args(["web"])
    assert (args.host, args.port) == ("127.0.0.1", 8000)
    assert main(["web", "--port", "70000"]) == 2
    assert "not a port" in capsys.readouterr().err


def test_without_the_extra_the_cli_says_how_to_install_it(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # as if not installed: importing it raises ImportError
    assert main(["web"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "symform: error: symform web needs Starlette and uvicorn: pip install starlette uvicorn"
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["web"]
    assert web.INSTALL == "pip install " + " ".join(extra)  # the extra's packages, from a clone or an index alike


def test_the_server_reads_a_hub_id_from_the_cache_alone(cache, tmp_path):  # noqa: F811 (the fixture)
    env = {"HF_HOME": str(cache.parent / "hf-home"), "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "0"}
    query = {"model": "Qwen/Qwen3-32B-FP8", "infer": 1, "batch": 1, "seq": 1}
    with served(env=env, prefix=_NO_NETWORK.format(body="")) as base:
        status, text = get(f"{base}/api/memory?{urlencode(query)}")
        assert status == 200, text
        assert json.loads(text)["assumptions"]["checkpoint_size"]["total_size"] == QWEN3_32B_FP8_TOTAL_SIZE
        # not in the cache: refused at once (HF_HUB_OFFLINE), though the server's own environment said online
        status, text = get(f"{base}/api/params?model=Qwen/Not-In-The-Cache")
        assert status == 400
        assert "not in the Hugging Face cache" in json.loads(text)["error"] and "HF_HUB_OFFLINE" in json.loads(text)["error"]
        assert get(f"{base}/api/params?model=qwen3-0.6b")[0] == 200


KEYS = ["model", "batch", "seq", "gpu", "train", "infer", "tp", "dp", "zero", "recompute", "precision", "set", "depth", "upload", "past", "json", "junk"]
VALUES = st.one_of(st.text(max_size=12), st.integers(-3, 10**6).map(str), st.sampled_from(["qwen3-0.6b", "h100-sxm", "1", "0", "1e400", "../x", "n_layers=3"]))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(verb=st.sampled_from(["params", "memory", "roofline", "nothing"]), query=st.lists(st.tuples(st.sampled_from(KEYS), VALUES), max_size=6))
def test_any_query_gets_json_a_one_line_message_or_the_result_and_the_server_answers_on(client, verb, query):
    response = client.get(f"/api/{verb}?{urlencode(query)}")
    assert response.status_code in (200, 400, 404), response.text
    report = response.json()
    if response.status_code != 200:
        assert set(report) == {"error"} and report["error"] and "\n" not in report["error"] and "Traceback" not in report["error"]
    assert client.get("/api/params?model=qwen3-0.6b").status_code == 200


def test_requests_at_once_each_get_their_own_answer():
    from concurrent.futures import ThreadPoolExecutor

    queries = [urlencode({"model": "qwen3-0.6b", "infer": 1, "batch": b, "seq": 512}) for b in range(1, 9)] + ["model=qwen3-0.6b&batch=0"] * 2
    with served() as base:
        alone = [get(f"{base}/api/memory?{q}") for q in queries]
        with ThreadPoolExecutor(len(queries)) as pool:
            together = list(pool.map(lambda q: get(f"{base}/api/memory?{q}"), queries))
    assert together == alone
    assert [json.loads(text)["assumptions"]["workload"]["batch"] if status == 200 else status for status, text in alone] == [*range(1, 9), 400, 400]
