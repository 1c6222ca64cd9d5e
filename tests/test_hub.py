"""Models by Hugging Face Hub id, resolved offline against a real Hub cache laid out on disk.

The cache is the layout huggingface_hub itself reads (models--Org--Name/blobs,
snapshots/<commit>/<file> linking to a blob, refs/main, .no_exist/<commit>/<file>),
written here file by file; symform runs in a child process with HF_HUB_CACHE
pointing at it, HF_HUB_OFFLINE=1 and every socket connection refused, so a
test fails if anything reaches for the network.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from symform.engine.store.data import formulas_dir
from symform.engine.language.families import presets

DATA = Path(__file__).parent / "data" / "hub"
ROOT = Path(__file__).resolve().parents[1]
COMMIT = "a" * 40

# Qwen/Qwen3-32B-FP8: tensors per dtype as its safetensors headers give them
# (index id 68931636948 quotes {"BF16": 1558406144, "F8_E4M3": 31205621760} elements):
# 2 × 1558406144 + 31205621760 bytes.
QWEN3_32B_FP8_TOTAL_SIZE = 2 * 1558406144 + 31205621760

_NO_NETWORK = (
    "import socket, sys\n"
    "connect, create = socket.socket.connect, socket.create_connection\n"
    "def local(address):\n"
    "    return isinstance(address, tuple) and address[0] in ('127.0.0.1', 'localhost')\n"
    "def guarded_connect(self, address):\n"
    "    if not local(address):\n"
    "        raise OSError('network access during a test')\n"
    "    return connect(self, address)\n"
    "def guarded_create(address, *args, **kwargs):\n"
    "    if not local(address):\n"
    "        raise OSError('network access during a test')\n"
    "    return create(address, *args, **kwargs)\n"
    "socket.socket.connect = guarded_connect\n"
    "socket.create_connection = guarded_create\n"
    "{body}\n"
)


def hub_cache(root: Path, repo_id: str, files: dict[str, bytes], *, absent: tuple[str, ...] = ()) -> None:
    """A repository in huggingface_hub's cache format: blobs by sha256, a snapshot of links, refs/main."""
    repo = root / f"models--{repo_id.replace('/', '--')}"
    snapshot = repo / "snapshots" / COMMIT
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    snapshot.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        digest = hashlib.sha256(data).hexdigest()
        (repo / "blobs" / digest).write_bytes(data)
        (snapshot / name).symlink_to(Path("..") / ".." / "blobs" / digest)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(COMMIT)
    for name in absent:  # how the cache remembers that the repository has no such file
        (repo / ".no_exist" / COMMIT).mkdir(parents=True, exist_ok=True)
        (repo / ".no_exist" / COMMIT / name).touch()


def symform(cache: Path, *argv: str, body: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """symform in a child process: the given cache, offline, no sockets."""
    code = body or "from symform.interface.cli.cli import main\nsys.exit(main(sys.argv[1:]))"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    environment.update({"HF_HOME": str(cache.parent / "hf-home"), "HF_HUB_CACHE": str(cache), "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}, **(env or {}))
    return subprocess.run([sys.executable, "-c", _NO_NETWORK.format(body=code), *argv], capture_output=True, text=True, env=environment, timeout=120)


@pytest.fixture
def cache(tmp_path: Path) -> Path:
    root = tmp_path / "hub"
    config = (DATA / "qwen3-32b-fp8.config.json").read_bytes()
    index = json.dumps({"metadata": {"total_size": QWEN3_32B_FP8_TOTAL_SIZE}, "weight_map": {}}).encode()
    hub_cache(root, "Qwen/Qwen3-32B-FP8", {"config.json": config, "model.safetensors.index.json": index}, absent=("hf_quant_config.json",))
    return root


def test_a_checkpoint_by_id_reads_its_fp8_blocks_and_size_from_the_cache(cache):
    done = symform(cache, "memory", "Qwen/Qwen3-32B-FP8", "--infer", "--batch", "1", "--seq", "1", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["assumptions"]["weight_format"] == "fp8-block"
    assert "128×128" in report["assumptions"]["weight_format_read"]
    size = report["assumptions"]["checkpoint_size"]
    assert size["total_size"] == QWEN3_32B_FP8_TOTAL_SIZE
    # every byte of the gap is named: Qwen stores its block scales in bf16 where symform's fp8-block assumes float32
    assert size["unexplained"] == 0 and list(size["explained"]) == ["block scales stored in bf16, not float32"]
    assert report["components"]["weights"] == size["symform_weight_bytes"]


def test_the_api_resolves_an_id_and_a_second_run_stays_offline(cache):
    body = "import symform\nm = symform.load('Qwen/Qwen3-32B-FP8')\nprint(m.evaluate('params'), m.spec.checkpoint.total_size)"
    # the second run is not even told to stay offline: what is cached is read without asking the Hub
    first, second = symform(cache, body=body), symform(cache, body=body, env={"HF_HUB_OFFLINE": "0"})
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout, second.stderr
    params, total = map(int, first.stdout.split())
    assert total == QWEN3_32B_FP8_TOTAL_SIZE
    # the FP8 checkpoint has the shapes of Qwen3-32B: the same parameter count as the preset's
    import symform as api

    assert params == api.load("qwen3-32b").evaluate("params")


def test_presets_answer_their_own_hub_ids_without_any_cache(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    by_id = symform(empty, "params", "Qwen/Qwen3-8B", "--json")
    by_name = symform(empty, "params", "QWEN3-8B", "--json")
    assert by_id.returncode == 0 and by_name.returncode == 0, by_id.stderr + by_name.stderr
    assert json.loads(by_id.stdout)["total"] == json.loads(by_name.stdout)["total"]
    assert not any(empty.iterdir())  # nothing was downloaded or written


@pytest.mark.parametrize(
    "argv, words",
    [
        (("params", "Org/Not-Cached"), ("Org/Not-Cached", "HF_HUB_OFFLINE", "cache")),
        (("params", "Qwen/Qwen3-8B", "--revision", "v9"), ("Qwen/Qwen3-8B", "cache")),
        (("params", "qwen3-8"), ("did you mean", "qwen3-8b")),
    ],
)
def test_unresolvable_ids_end_with_one_line_and_exit_2(cache, argv, words):
    done = symform(cache, *argv)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_without_huggingface_hub_an_id_names_the_package_to_install(cache):
    body = "sys.modules['huggingface_hub'] = None\nfrom symform.interface.cli.cli import main\nsys.exit(main(sys.argv[1:]))"
    done = symform(cache, "params", "Qwen/Qwen3-32B-FP8", body=body)
    assert done.returncode == 2 and "pip install huggingface_hub" in done.stderr and done.stderr.count("\n") == 1


def test_starting_symform_does_not_import_huggingface_hub(cache):
    done = symform(cache, body="from symform.interface.cli.cli import main\nmain(['params', 'qwen3-0.6b'])\nprint('huggingface_hub' in sys.modules)")
    assert done.stdout.strip().endswith("False"), done.stdout + done.stderr


def test_an_unknown_quantization_method_is_one_line(tmp_path, cache):
    config = json.loads((DATA / "qwen3-32b-fp8.config.json").read_text())
    config["quantization_config"] = {"quant_method": "mystery"}
    hub_cache(cache, "Org/Mystery", {"config.json": json.dumps(config).encode()}, absent=("hf_quant_config.json", "model.safetensors.index.json"))
    done = symform(cache, "memory", "Org/Mystery", "--infer", "--batch", "1", "--seq", "1")
    assert done.returncode == 2 and "mystery" in done.stderr and "--weight-format" in done.stderr
    overridden = symform(cache, "memory", "Org/Mystery", "--infer", "--batch", "1", "--seq", "1", "--weight-format", "bf16")
    assert overridden.returncode == 0, overridden.stderr


def test_every_preset_id_is_unique_ignoring_case():
    ids = [e.hub.lower() for e in presets().values()] + [n.lower() for n in presets()]
    assert len(ids) == len(set(ids))
    assert (formulas_dir() / "checkpoints.toml").is_file()


def test_gpt_oss_by_id_serves_from_mxfp4_weights(cache):
    from symform.engine.language.families import supported_model_types

    if "gpt_oss" not in supported_model_types():
        pytest.skip("the gpt_oss family is not bundled in this checkout")
    config = (DATA / "gpt-oss-20b.config.json").read_bytes()
    index = json.dumps({"metadata": {"total_size": 13761264768}, "weight_map": {}}).encode()  # index id 31112482743
    hub_cache(cache, "openai/gpt-oss-20b-copy", {"config.json": config, "model.safetensors.index.json": index}, absent=("hf_quant_config.json",))
    done = symform(cache, "memory", "openai/gpt-oss-20b-copy", "--infer", "--batch", "1", "--seq", "1", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["assumptions"]["weight_format"] == "mxfp4"
    assert report["components"]["weights"] == 13761264768 == report["assumptions"]["checkpoint_size"]["total_size"]


class _Hub(http.server.BaseHTTPRequestHandler):
    """A stand-in Hub on the loopback interface answering as huggingface.co does for gated and unknown repositories."""

    def do_HEAD(self):
        self._refuse()

    def do_GET(self):
        self._refuse()

    def _refuse(self):
        gated = "/Gated/" in self.path
        self.send_response(403 if gated else 404)
        self.send_header("X-Error-Code", "GatedRepo" if gated else "RepoNotFound")
        self.send_header("X-Error-Message", "Access to this repository is restricted" if gated else "Repository not found")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def local_hub():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(
    "repo, words",
    [
        ("Gated/Model", ("gated", "HF_TOKEN", "https://huggingface.co/Gated/Model")),
        ("Nobody/Nothing", ("no such model", "HF_TOKEN")),
    ],
)
def test_gated_and_unknown_repositories_are_one_line(cache, local_hub, repo, words):
    done = symform(cache, "params", repo, env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": local_hub})
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    for word in words:
        assert word in done.stderr, done.stderr


def test_no_network_is_one_line(cache):
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    done = symform(cache, "params", "Org/Unreachable", env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "cannot be reached" in done.stderr or "cannot fetch" in done.stderr


def test_a_repository_whose_config_names_no_architecture_is_one_line(cache):
    # a non-transformers repository: a config.json without model_type or architectures
    hub_cache(cache, "Org/Adapter", {"config.json": json.dumps({"r": 8, "lora_alpha": 16}).encode()}, absent=("hf_quant_config.json", "model.safetensors.index.json"))
    done = symform(cache, "params", "Org/Adapter")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "model_type" in done.stderr, done.stderr
