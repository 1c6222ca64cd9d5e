"""Weight bytes against checkpoints compressed-tensors itself wrote: int4 pack-quantized in groups of 128
(symmetric, and with zero points) and NVFP4.

The oracle is the safetensors header of each checkpoint, as compressed-tensors saved it
(tests/data/compressed_tensors/make.py writes them; only the headers are kept): every tensor's
byte range, summed here from the JSON, independently of symform's reader. symform reads the
format from the config's quantization_config and counts the bytes from its weight formats
(formulas/memory.toml); the two must agree to the byte, with nothing left to explain.
"""

from __future__ import annotations

import importlib.util
import json
import struct
from pathlib import Path

import pytest

from checks import run_json

DATA = Path(__file__).parent / "data" / "compressed_tensors"
# checkpoint: the weight format symform must read from its quantization_config
FORMATS = {"w4a16-group128": "int4-packed", "w4a16-asym-group128": "int4-packed-zero", "nvfp4": "nvfp4"}


def header(path: Path) -> dict:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8 : 8 + length])


def stored_bytes(path: Path) -> int:
    """The bytes the header says the tensors take: the sum of their data_offsets ranges."""
    return sum(end - start for name, entry in header(path).items() if name != "__metadata__" for start, end in [entry["data_offsets"]])


def measured(capsys, folder: Path) -> dict:
    report = run_json(capsys, "memory", str(folder / "config.json"), "--infer", "--batch", "1", "--seq", "1")
    return {"size": report["assumptions"]["checkpoint_size"], "weights": report["components"]["weights"], "format": report["assumptions"]["weight_format"]}


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_weight_bytes_equal_what_compressed_tensors_stored(capsys, name):
    folder = DATA / name
    expected = stored_bytes(folder / "model.safetensors")
    got = measured(capsys, folder)
    assert got["format"] == FORMATS[name]
    assert got["size"]["total_size"] == got["size"]["symform_weight_bytes"] == got["weights"] == expected
    assert got["size"]["unexplained"] == 0 and not got["size"]["explained"]


def test_the_stored_headers_hold_the_layouts_the_formats_describe():
    """The tensors behind each format's formula, by name, dtype and shape (one layer's down_proj: in 384, out 256)."""
    down = {name: {k: header(DATA / name / "model.safetensors")[f"model.layers.0.mlp.down_proj.{k}"] for k in keys} for name, keys in {
        "w4a16-group128": ["weight_packed", "weight_scale", "weight_shape"],
        "w4a16-asym-group128": ["weight_packed", "weight_scale", "weight_shape", "weight_zero_point"],
        "nvfp4": ["weight_packed", "weight_scale", "weight_global_scale", "input_global_scale"],
    }.items()}  # fmt: skip
    shapes = {name: {k: (v["dtype"], v["shape"]) for k, v in tensors.items()} for name, tensors in down.items()}
    assert shapes["w4a16-group128"] == {"weight_packed": ("I32", [256, 48]), "weight_scale": ("BF16", [256, 3]), "weight_shape": ("I64", [2])}
    assert shapes["w4a16-asym-group128"]["weight_zero_point"] == ("I32", [32, 3])  # 256 rows / 8 per int32, 384 / 128 groups
    assert shapes["nvfp4"] == {"weight_packed": ("U8", [256, 192]), "weight_scale": ("F8_E4M3", [256, 24]), "weight_global_scale": ("F32", [1]), "input_global_scale": ("F32", [1])}
    kv = header(DATA / "w4a16-asym-group128" / "model.safetensors")["model.layers.0.self_attn.k_proj.weight_zero_point"]
    assert kv["shape"] == [5, 2]  # one key-value head of 36 rows: ceil(36 / 8) int32 rows of zero points


@pytest.mark.oracle
@pytest.mark.parametrize("name", sorted(FORMATS))
def test_compressed_tensors_still_writes_the_stored_checkpoints(tmp_path, capsys, name):
    """Rewrite each checkpoint with compressed-tensors and its full weights: the same header as the one kept,
    and symform's bytes equal the file's."""
    pytest.importorskip("compressed_tensors")
    spec = importlib.util.spec_from_file_location("make_compressed_tensors", DATA / "make.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    make.save(name, tmp_path)
    assert header(tmp_path / "model.safetensors") == header(DATA / name / "model.safetensors")
    written = json.loads((tmp_path / "config.json").read_text())["quantization_config"]
    kept = json.loads((DATA / name / "config.json").read_text())["quantization_config"]
    assert {k: v for k, v in written.items() if k != "version"} == {k: v for k, v in kept.items() if k != "version"}
    got = measured(capsys, tmp_path)
    data = (tmp_path / "model.safetensors").stat().st_size - 8 - struct.unpack("<Q", (tmp_path / "model.safetensors").read_bytes()[:8])[0]
    assert got["size"]["total_size"] == got["size"]["symform_weight_bytes"] == data
