"""A checkpoint's dtypes from its safetensors headers: files written by safetensors itself, read from disk and over
HTTP range requests from a stand-in Hub on the loopback interface (HF_ENDPOINT), never from the network.

Expected values come from the tensors the test wrote (their numel, element size and count), not from symform.
"""

from __future__ import annotations

import http.server
import json
import re
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from symform.engine.store import hub
from symform.engine.errors import ConfigError, SymformError
from test_hub import COMMIT, DATA, hub_cache, symform

np = pytest.importorskip("numpy")
safetensors_numpy = pytest.importorskip("safetensors.numpy")

TENSORS = {  # three dtypes, shapes with a zero-free product each
    "a.weight": np.zeros((3, 5), dtype=np.float32),
    "a.bias": np.zeros((5,), dtype=np.float32),
    "b.packed": np.zeros((4, 2), dtype=np.int32),
    "b.scales": np.zeros((7,), dtype=np.uint8),
}
# by hand from TENSORS: F32 15 + 5 elements of 4 bytes, I32 8 of 4, U8 7 of 1
EXPECTED = {
    "F32": {"tensors": 2, "elements": 20, "bytes": 80},
    "I32": {"tensors": 1, "elements": 8, "bytes": 32},
    "U8": {"tensors": 1, "elements": 7, "bytes": 7},
}


def written(tensors: dict) -> bytes:
    return safetensors_numpy.save(tensors, metadata={"format": "pt"})


def test_headers_of_files_safetensors_wrote_give_tensors_elements_and_bytes(tmp_path):
    (tmp_path / "model-00001-of-00002.safetensors").write_bytes(written({k: TENSORS[k] for k in ("a.weight", "b.packed")}))
    (tmp_path / "model-00002-of-00002.safetensors").write_bytes(written({k: TENSORS[k] for k in ("a.bias", "b.scales")}))
    assert hub.safetensors_dtypes(tmp_path) == EXPECTED


def test_bfloat16_and_fp8_headers_written_by_torch(tmp_path):
    torch = pytest.importorskip("torch")
    safetensors_torch = pytest.importorskip("safetensors.torch")
    tensors = {"w": torch.zeros(6, 4, dtype=torch.bfloat16), "q": torch.zeros(8, 8, dtype=torch.float8_e4m3fn), "s": torch.zeros(2, dtype=torch.float32)}
    safetensors_torch.save_file(tensors, tmp_path / "model.safetensors")
    expected = {}
    for t in tensors.values():
        name = {torch.bfloat16: "BF16", torch.float8_e4m3fn: "F8_E4M3", torch.float32: "F32"}[t.dtype]
        expected[name] = {"tensors": 1, "elements": t.numel(), "bytes": t.numel() * t.element_size()}
    assert hub.safetensors_dtypes(tmp_path) == expected


def _framed(header: dict) -> bytes:
    text = json.dumps(header).encode()
    return len(text).to_bytes(8, "little") + text


def _reader(data: bytes):
    position = [0]

    def read(n: int) -> bytes:
        chunk = data[position[0] : position[0] + n]
        position[0] += n
        return chunk

    return read


@pytest.mark.parametrize(
    "data, words",
    [
        (b"", ("header length missing",)),
        ((10**12).to_bytes(8, "little") + b"{}", ("not a safetensors file",)),
        ((100).to_bytes(8, "little") + b"{}", ("cut short",)),
        ((4).to_bytes(8, "little") + b"{no}", ("unreadable safetensors header",)),
        ((2).to_bytes(8, "little") + b"[]", ("JSON object",)),
        (_framed({"t": {"dtype": "F32", "data_offsets": [0, 4]}}), ("'t'", "shape")),
        (_framed({"t": {"dtype": "F32", "shape": [1], "data_offsets": [4, 0]}}), ("'t'", "data_offsets")),
    ],
)
def test_malformed_headers_are_one_line(data, words):
    with pytest.raises(ConfigError) as caught:
        hub.read_header(_reader(data), "x.safetensors")
    message = str(caught.value)
    assert "\n" not in message and message.startswith("x.safetensors")
    for word in words:
        assert word in message


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=64), st.integers(min_value=0, max_value=80))
def test_any_bytes_are_a_header_or_one_line_error(tail, length):
    """Whatever a file holds, the reader answers with a header or a SymformError, never another exception."""
    try:
        header = hub.read_header(_reader(length.to_bytes(8, "little") + tail), "f")
    except SymformError as e:
        assert "\n" not in str(e)
    else:
        assert isinstance(header, dict)


class _Files(http.server.BaseHTTPRequestHandler):
    """A stand-in Hub serving files at /{repo}/resolve/{revision}/{name}, honouring a Range header as the Hub does
    (206 and the asked bytes), or ignoring it (200 and the whole file) when ``honour_range`` is off."""

    files: dict[str, bytes] = {}
    honour_range = True
    ranges: list[str] = []

    def do_GET(self):
        data = self.files.get(self.path)
        if data is None:
            self.send_response(404)
            self.send_header("X-Error-Code", "EntryNotFound")
            self.send_header("X-Error-Message", "Entry not found")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        asked = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        type(self).ranges.append(self.headers.get("Range", ""))
        if asked and self.honour_range:
            start, end = int(asked[1]), min(int(asked[2]), len(data) - 1)
            body = data[start : end + 1]
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        else:
            body = data
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the reader stops once it has the header

    def log_message(self, *args):
        pass


@pytest.fixture
def serve():
    servers = []

    def start(files: dict[str, bytes], *, honour_range: bool = True) -> str:
        handler = type("Files", (_Files,), {"files": files, "honour_range": honour_range, "ranges": []})
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append((server, handler))
        start.handler = handler
        return f"http://127.0.0.1:{server.server_address[1]}"

    yield start
    for server, _ in servers:
        server.shutdown()
        server.server_close()


def _repo(cache: Path, repo_id: str, *, sharded: bool) -> dict[str, bytes]:
    """A cached config (and index) of ``repo_id``; returns the weights the Hub serves, by URL path."""
    config = (DATA / "qwen3-32b-fp8.config.json").read_bytes()
    if sharded:
        shards = {"model-00001-of-00002.safetensors": ("a.weight", "b.packed"), "model-00002-of-00002.safetensors": ("a.bias", "b.scales")}
        index = {"metadata": {"total_size": 119}, "weight_map": {t: shard for shard, names in shards.items() for t in names}}
        hub_cache(cache, repo_id, {"config.json": config, "model.safetensors.index.json": json.dumps(index).encode()}, absent=("hf_quant_config.json",))
        return {f"/{repo_id}/resolve/{COMMIT}/{shard}": written({t: TENSORS[t] for t in names}) for shard, names in shards.items()}
    hub_cache(cache, repo_id, {"config.json": config}, absent=("hf_quant_config.json", "model.safetensors.index.json"))
    return {f"/{repo_id}/resolve/{COMMIT}/model.safetensors": written(TENSORS)}


def _stored(done) -> dict:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout).get("checkpoint_dtypes")


@pytest.mark.parametrize("sharded", [False, True], ids=["single-file", "sharded"])
def test_headers_are_read_over_http_ranges_once_then_from_the_cache(tmp_path, serve, sharded):
    cache = tmp_path / "hub"
    endpoint = serve(_repo(cache, "Org/Weights", sharded=sharded))
    online = symform(cache, "params", "Org/Weights", "--json", env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": endpoint})
    assert _stored(online) == EXPECTED
    # offline, and the stand-in Hub would refuse: the facts come from what the first run kept
    offline = symform(cache, "params", "Org/Weights", "--json", env={"HF_HUB_OFFLINE": "1", "HF_ENDPOINT": "http://127.0.0.1:9"})
    assert _stored(offline) == EXPECTED


def test_every_request_asks_for_a_range_and_a_server_ignoring_it_still_gives_the_header(tmp_path, serve):
    cache = tmp_path / "hub"
    files = _repo(cache, "Org/Whole", sharded=True)
    endpoint = serve(files, honour_range=False)
    done = symform(cache, "params", "Org/Whole", "--json", env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": endpoint})
    assert _stored(done) == EXPECTED
    assert len(serve.handler.ranges) == 2 and all(r.startswith("bytes=0-") for r in serve.handler.ranges)


def test_offline_without_kept_headers_reads_nothing(tmp_path):
    cache = tmp_path / "hub"
    _repo(cache, "Org/Offline", sharded=False)
    done = symform(cache, "params", "Org/Offline", "--json")
    assert _stored(done) is None


def test_a_repository_without_safetensors_has_no_dtypes(tmp_path, serve):
    cache = tmp_path / "hub"
    _repo(cache, "Org/Bins", sharded=False)
    done = symform(cache, "params", "Org/Bins", "--json", env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": serve({})})
    assert _stored(done) is None


def test_a_malformed_remote_header_is_one_line(tmp_path, serve):
    cache = tmp_path / "hub"
    _repo(cache, "Org/Broken", sharded=False)
    endpoint = serve({f"/Org/Broken/resolve/{COMMIT}/model.safetensors": (10**12).to_bytes(8, "little") + b"{}"})
    done = symform(cache, "params", "Org/Broken", env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": endpoint})
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "Org/Broken/model.safetensors: not a safetensors file" in done.stderr


@pytest.mark.oracle
def test_a_saved_model_served_over_http_stores_as_many_elements_as_symform_counts(tmp_path, serve):
    """transformers' save_pretrained of a tiny Qwen3 (untied head): its header elements are the module's numel()."""
    pytest.importorskip("transformers")
    from oracle import save_tiny_qwen3

    saved = tmp_path / "saved"
    module = save_tiny_qwen3(saved)
    cache = tmp_path / "hub"
    hub_cache(cache, "Org/Tiny", {"config.json": (saved / "config.json").read_bytes()}, absent=("hf_quant_config.json", "model.safetensors.index.json"))
    endpoint = serve({f"/Org/Tiny/resolve/{COMMIT}/model.safetensors": (saved / "model.safetensors").read_bytes()})
    done = symform(cache, "params", "Org/Tiny", "--json", env={"HF_HUB_OFFLINE": "0", "HF_ENDPOINT": endpoint})
    numel = sum(p.numel() for p in module.parameters())
    assert _stored(done) == {"BF16": {"tensors": len(module.state_dict()), "elements": numel, "bytes": 2 * numel}}
    assert json.loads(done.stdout)["total"] == numel
