"""Device data: every bundled file validates, per-GPU and system figures stay apart, the notes'
errata are corrected, and a bad or hostile file ends in one ConfigError line."""

import json
import math
import tomllib
from pathlib import Path

import pytest

from symform.engine.errors import ConfigError
from symform.analysis.devices.hardware import DTYPES, Device, System, device_names, hardware_dir, load_device
from symform.interface.reports.hardware_report import device_json, device_table, devices_table

ACCELERATORS = {
    "v100-sxm2-16gb", "v100-sxm2-32gb",
    "a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm-40gb", "a100-sxm-80gb",
    "h100-sxm", "h100-pcie", "h100-nvl", "h200-sxm", "h200-nvl",
    "b200", "b300", "gb200", "gb300",
    "h800-sxm", "mi300x", "tpu-v4", "tpu-v5p",
    "h20", "l4", "l40s", "rtx-3090", "rtx-4090", "rtx-5090", "rtx-6000-ada", "rtx-pro-6000-blackwell",
    "mi250x", "mi325x", "mi355x", "tpu-v5e", "tpu-v6e", "tpu7x", "gaudi3",
    "a10g", "apple-m2-max", "apple-m2-ultra", "apple-m3-ultra", "apple-m4-max",
}  # fmt: skip
MEMORY_ONLY = {"a10g", "apple-m2-max", "apple-m2-ultra", "apple-m3-ultra", "apple-m4-max"}  # their vendors publish no FLOP rate
SYSTEMS = {"hgx-h100-8gpu", "dgx-b200", "gb200-nvl72", "tpu-v5e-256", "tpu-v6e-256"} | {f"tpu-v5p-{cores}" for cores in (128, 256, 512, 1024, 2048, 4096)}
GiB = 1 << 30

GOOD = """\
kind = "accelerator"
title = "My GPU"
vendor = "Me"
memory_bytes = 85_899_345_920
hbm_bytes_per_s = 3.35e12
tdp_watts = 700

[dense_flops_per_s]
bf16 = 989.4e12
fp8 = 1978.9e12

[sparse_flops_per_s]
bf16 = 1978.9e12

[interconnect.scale_up]
name = "NVLink 4"
unidirectional_bytes_per_s = 450e9

[source]
title = "my measurements"
date = 2025-01-31
"""

SYSTEM = 'kind = "system"\ntitle = "box"\nvendor = "me"\naccelerator = "{accelerator}"\naccelerator_count = {count}\n{extra}\n[source]\ntitle = "t"\ndate = "2025"\n{tables}'


def write(tmp_path: Path, text: str, name: str = "my-gpu.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def replaced(old: str, new: str, text: str = GOOD) -> str:
    assert old in text
    return text.replace(old, new, 1)


# --- the bundled files ----------------------------------------------------------------


def test_the_bundled_names_are_the_devices_and_systems_asked_for():
    assert set(device_names(kind="accelerator")) == ACCELERATORS
    assert set(device_names(kind="system")) == SYSTEMS
    assert set(device_names()) == ACCELERATORS | SYSTEMS


@pytest.mark.parametrize("name", sorted(ACCELERATORS | SYSTEMS))
def test_every_bundled_file_validates_and_renders(name):
    found = load_device(name)
    assert found.name == name
    assert found.source.title and found.source.date
    report = device_json(found)
    json.dumps(report, allow_nan=False)
    assert {"name", "kind", "memory_bytes", "hbm_bytes_per_s", "dense_flops_per_s", "sparse_flops_per_s", "interconnect", "source"} <= set(report)
    assert report["name"] == name
    assert all(isinstance(v, (int, float)) and v > 0 for v in report["dense_flops_per_s"].values())
    table = device_table(found)
    assert name in table and "source" in table


@pytest.mark.parametrize("name", sorted(ACCELERATORS))
def test_sparse_figures_sit_only_beside_their_dense_ones(name):
    device = load_device(name)
    assert set(device.dense_flops_per_s) <= set(DTYPES)
    for dtype, sparse in device.sparse_flops_per_s.items():
        assert device.dense_flops_per_s[dtype] < sparse <= 2.02 * device.dense_flops_per_s[dtype]


def test_every_listed_file_is_in_the_hardware_folder():
    on_disk = {p.stem for p in hardware_dir().glob("*.toml")} | {p.stem for p in (hardware_dir() / "systems").glob("*.toml")}
    assert on_disk == ACCELERATORS | SYSTEMS


def test_the_table_of_all_devices_lists_every_one():
    table = devices_table()
    for name in ACCELERATORS | SYSTEMS:
        assert name in table
    assert "989.4 TFLOP/s" in table and "576 TB/s" in table


# --- per-GPU versus system figures ----------------------------------------------------


def test_per_gpu_files_and_system_files_are_kept_apart():
    for name in ACCELERATORS:
        path = hardware_dir() / f"{name}.toml"
        assert isinstance(load_device(name), Device) and path.is_file()
        assert "accelerator_count" not in tomllib.loads(path.read_text())
    for name in SYSTEMS:
        path = hardware_dir() / "systems" / f"{name}.toml"
        system = load_device(name)
        assert isinstance(system, System) and path.is_file()
        raw = tomllib.loads(path.read_text())
        # a system names its accelerator and adds system-level figures; it never repeats per-GPU ones
        assert not {"memory_bytes", "hbm_bytes_per_s", "dense_flops_per_s", "sparse_flops_per_s", "interconnect", "tdp_watts"} & set(raw)
        assert system.device.name == system.accelerator and system.device.name in ACCELERATORS


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_system_figures_are_count_times_the_accelerator(name):
    system = load_device(name)
    report, per = device_json(system), device_json(system.device)
    n = system.accelerator_count
    assert report["per_accelerator"] == per
    assert report["memory_bytes"] == n * per["memory_bytes"]
    assert report["hbm_bytes_per_s"] == n * per["hbm_bytes_per_s"]
    assert report["dense_flops_per_s"] == {k: n * v for k, v in per["dense_flops_per_s"].items()}
    assert report["interconnect"] == per["interconnect"]  # links stay per accelerator


def test_the_stated_system_totals_agree_with_the_per_gpu_figures():
    nvl72 = device_json(load_device("gb200-nvl72"))
    stated = nvl72["stated_totals"]
    assert stated["hbm_bytes_per_s"] == 576e12  # GB200 NVL72 specifications: 576 TB/s for the rack
    assert math.isclose(stated["scale_up_bidirectional_bytes_per_s"], 72 * 1.8e12, rel_tol=0.01)  # 130 TB/s
    assert stated["sparse_flops_per_s"]["fp4"] == nvl72["sparse_flops_per_s"]["fp4"] == 1440e15
    dgx = device_json(load_device("dgx-b200"))
    assert dgx["stated_totals"]["memory_bytes"] == dgx["memory_bytes"] == 1440 * GiB  # DGX B200: "1,440GB total"
    assert dgx["stated_totals"]["hbm_bytes_per_s"] == dgx["hbm_bytes_per_s"] == 64e12  # DGX B200: "64TB/s"


# --- the notes' errata (reference/seed-formulas.md §4), corrected from datasheets -----------


def test_h100_and_h200_sxm_dense_bf16_is_989_tflops_and_1979_is_sparse():
    # NVIDIA H100 datasheet: BF16 Tensor Core 1,979 TFLOPS "shown with sparsity, 1/2 lower without";
    # the Hopper whitepaper: 989.4 dense, 1,978.9 sparse. The notes' intensity table used 495.
    for name in ("h100-sxm", "h200-sxm"):
        device = load_device(name)
        assert math.isclose(device.dense_flops_per_s["bf16"], 989e12, rel_tol=1e-3)
        assert math.isclose(device.sparse_flops_per_s["bf16"], 2 * device.dense_flops_per_s["bf16"], rel_tol=1e-3)
        assert math.isclose(device.sparse_flops_per_s["bf16"], 1979e12, rel_tol=1e-3)
    assert math.isclose(load_device("h100-sxm").ridge("bf16"), 989.4e12 / 3.35e12)


def test_a100_dense_bf16_is_312_tflops_and_156_is_tf32():
    # NVIDIA A100 datasheet: BF16 Tensor Core 312 | 624* TFLOPS, TF32 Tensor Core 156 | 312* TFLOPS.
    for name in ("a100-pcie-40gb", "a100-pcie-80gb", "a100-sxm-40gb", "a100-sxm-80gb"):
        device = load_device(name)
        assert device.dense_flops_per_s["bf16"] == 312e12
        assert device.dense_flops_per_s["tf32"] == 156e12
        assert device.sparse_flops_per_s["bf16"] == 624e12
    assert load_device("a100-sxm-80gb").hbm_bytes_per_s == 2039e9  # A100 datasheet: 2,039 GB/s


def test_v100_hbm_is_900_gbs_and_300_is_nvlink():
    # NVIDIA V100 datasheet: memory bandwidth 900 GB/s (SXM2), NVLink 300 GB/s (both directions).
    for name in ("v100-sxm2-16gb", "v100-sxm2-32gb"):
        device = load_device(name)
        assert device.hbm_bytes_per_s == 900e9
        assert device_json(device)["interconnect"]["scale_up"]["bidirectional_bytes_per_s"] == 300e9


def test_one_b200_has_about_8_tbs_and_576_is_the_nvl72_rack():
    # DGX B200 datasheet: 64 TB/s for 8 GPUs; GB200 NVL72 specifications: 576 TB/s for 72 GPUs.
    for name in ("b200", "gb200"):
        hbm = load_device(name).hbm_bytes_per_s
        assert 7.5e12 <= hbm <= 8e12 and hbm != 576e12
    assert device_json(load_device("gb200-nvl72"))["hbm_bytes_per_s"] == 576e12


def test_memory_capacities_are_binary_as_the_hardware_is():
    # "80GB" of HBM is 80 GiB: A100 80GB reports 81,920 MiB; an H100 80GB, 81,559 MiB usable.
    assert load_device("a100-sxm-80gb").memory_bytes == 80 * GiB
    assert load_device("h100-sxm").memory_bytes == 80 * GiB
    assert load_device("h200-sxm").memory_bytes == 141 * GiB
    assert load_device("mi300x").memory_bytes == 192 * GiB


def test_the_table_labels_every_value_with_its_unit():
    table = device_table(load_device("h100-sxm"))
    for text in ("80 GiB (85.9 GB)", "3.35 TB/s", "989.4 TFLOP/s", "1.979 PFLOP/s", "295.3", "450 GB/s each way", "700 W"):
        assert text in table


# --- users' files -------------------------------------------------------------------


def test_a_users_device_file_loads_from_a_path(tmp_path):
    path = write(tmp_path, GOOD)
    for given in (path, str(path)):
        device = load_device(given)
        assert isinstance(device, Device)
        assert device.name == "my-gpu" and device.source.date == "2025-01-31"
        report = device_json(device)
        assert report["dense_flops_per_s"] == {"bf16": 989.4e12, "fp8": 1978.9e12}
        assert report["interconnect"]["scale_up"]["bidirectional_bytes_per_s"] == 900e9
    named = load_device(write(tmp_path, 'name = "lab-gpu"\n' + GOOD, "other.toml"))
    assert named.name == "lab-gpu"


def test_a_users_system_names_a_bundled_or_a_neighbouring_accelerator(tmp_path):
    write(tmp_path, GOOD)
    for accelerator, count in (("h100-sxm", 8), ("my-gpu.toml", 4)):
        path = write(tmp_path, SYSTEM.format(accelerator=accelerator, count=count, extra="", tables=""), "box.toml")
        system = load_device(path)
        assert isinstance(system, System) and system.device.hbm_bytes_per_s == 3.35e12
        assert device_json(system)["hbm_bytes_per_s"] == count * 3.35e12


# --- bad and hostile files: one line, naming the problem and the fix, no traceback, nothing run ---

BAD = {
    "missing source": (replaced('[source]\ntitle = "my measurements"\ndate = 2025-01-31\n', ""), "source: required field missing"),
    "negative value": (replaced("hbm_bytes_per_s = 3.35e12", "hbm_bytes_per_s = -3.35e12"), "hbm_bytes_per_s: a positive finite number is needed"),
    "zero value": (replaced("tdp_watts = 700", "tdp_watts = 0"), "tdp_watts: a positive finite number is needed"),
    "nan": (replaced("tdp_watts = 700", "tdp_watts = nan"), "tdp_watts: a positive finite number is needed"),
    "infinity": (replaced("bf16 = 989.4e12", "bf16 = inf"), "dense_flops_per_s.bf16: a positive finite number is needed"),
    "unknown field": (replaced("tdp_watts = 700", "tdp_watts = 700\nmemory_GiB = 80"), "memory_GiB: unknown field; the fields here are"),
    "unknown nested field": (replaced('name = "NVLink 4"', 'name = "NVLink 4"\nbandwidth = 1'), "interconnect.scale_up.bandwidth: unknown field"),
    "unknown dtype": (replaced("fp8 = 1978.9e12", "fp7 = 1978.9e12"), "dense_flops_per_s.fp7: Input should be"),
    "unknown link": (replaced("[interconnect.scale_up]", "[interconnect.warp_drive]"), "interconnect.warp_drive: Input should be"),
    "wrong type": (replaced("memory_bytes = 85_899_345_920", 'memory_bytes = "80GB"'), "memory_bytes: a number in SI base units is needed"),
    "boolean": (replaced("tdp_watts = 700", "tdp_watts = true"), "tdp_watts: a number in SI base units is needed (e.g. 3.35e12), not the boolean true"),
    "table for a number": (replaced("tdp_watts = 700", "tdp_watts = {watts = 700}"), "not a table"),
    "code in a number": (replaced("hbm_bytes_per_s = 3.35e12", "hbm_bytes_per_s = \"__import__('os').system('touch PWNED')\""), "hbm_bytes_per_s: a number in SI base units is needed"),
    "code as a dtype": (replaced("fp8 = 1978.9e12", "\"__import__('os')\" = 1"), "Input should be"),
    "sparse listed as dense": (replaced("[sparse_flops_per_s]\nbf16 = 1978.9e12", "[sparse_flops_per_s]\nbf16 = 3957.8e12"), "at most twice it"),
    "sparse without dense": (replaced("[sparse_flops_per_s]\nbf16 = 1978.9e12", "[sparse_flops_per_s]\nint8 = 1978.9e12"), "sparse_flops_per_s.int8: has no dense figure"),
    "bad date": (replaced("date = 2025-01-31", 'date = "last year"'), "source.date: a date is needed"),
    "bad url": (replaced('title = "my measurements"', 'title = "my measurements"\nurl = "javascript:alert(1)"'), "source.url"),
    "newline in a title": (replaced('title = "My GPU"', 'title = "My\\nGPU"'), "title: a single line of printable text is needed"),
    "bad kind": (replaced('kind = "accelerator"', 'kind = "toaster"'), "kind must be 'accelerator' or 'system', not the string 'toaster'"),
    "bad name": (replaced('kind = "accelerator"', 'kind = "accelerator"\nname = "../etc/passwd"'), "name: '../etc/passwd' is not a device name"),
    "not TOML": ("def f():\n    return 1\n", "not valid TOML"),
    "json": ('{"title": "x"}', "not valid TOML"),
    "hostile key": (replaced("tdp_watts = 700", '"evil\\nkey" = 1'), "evil\\nkey: unknown field"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_device_files_end_in_one_configerror_line(tmp_path, monkeypatch, case):
    text, expected = BAD[case]
    monkeypatch.chdir(tmp_path)
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_device(path)
    message = str(caught.value)
    assert "\n" not in message and "\r" not in message
    assert message.startswith(str(path)), message
    assert expected in message, message
    assert not (tmp_path / "PWNED").exists()


BAD_SYSTEMS = {  # accelerator, count, extra top-level lines, tables, expected
    "unknown accelerator": ("h900", 8, "", "", "accelerator 'h900' is neither a bundled accelerator nor a .toml path"),
    "a system as accelerator": ("dgx-b200", 8, "", "", "accelerator 'dgx-b200' is a system"),
    "device figures in a system": ("h100-sxm", 8, "hbm_bytes_per_s = 3.35e12", "", "hbm_bytes_per_s: unknown field"),
    "wrong total": ("b200", 8, "", "[stated_totals]\nhbm_bytes_per_s = 576e12", "stated_totals.hbm_bytes_per_s is 5.76e+14 but 8 × b200 gives 6.4e+13"),
    "total without a figure": ("v100-sxm2-16gb", 8, "", "[stated_totals.dense_flops_per_s]\nfp8 = 1e15", "stated_totals.dense_flops_per_s.fp8 has no per-accelerator figure"),
    "domain larger than system": ("b200", 8, "", "[scale_up_domain]\nname = 'x'\naccelerators = 72", "scale_up_domain.accelerators (72) exceeds accelerator_count (8)"),
    "itself as accelerator": ("box.toml", 8, "", "", "accelerator 'box.toml' is a system"),
    "fractional count": ("b200", 8.5, "", "", "accelerator_count: a whole number is needed, not the number 8.5"),
}


@pytest.mark.parametrize("case", list(BAD_SYSTEMS))
def test_bad_system_files_end_in_one_configerror_line(tmp_path, case):
    accelerator, count, extra, tables, expected = BAD_SYSTEMS[case]
    path = write(tmp_path, SYSTEM.format(accelerator=accelerator, count=count, extra=extra, tables=tables), "box.toml")
    with pytest.raises(ConfigError) as caught:
        load_device(path)
    message = str(caught.value)
    assert "\n" not in message and message.startswith(str(path)) and expected in message, message


def test_unreadable_inputs_end_in_one_configerror_line(tmp_path):
    cases = {
        "nonexistent.toml": ("no such file", None),
        "not-utf8.toml": ("not UTF-8", b"title = \"\xff\xfe\"\n"),
        "huge.toml": ("too large", b"# " + b"x" * (2 << 20) + b"\n"),
        "deep.toml": ("nested too deeply", b"x = " + b"[" * 100_000 + b"]" * 100_000 + b"\n"),
    }
    for name, (expected, content) in cases.items():
        path = tmp_path / name
        if content is not None:
            path.write_bytes(content)
        with pytest.raises(ConfigError) as caught:
            load_device(path)
        assert "\n" not in str(caught.value) and expected in str(caught.value), str(caught.value)
    (tmp_path / "dir.toml").mkdir()
    with pytest.raises(ConfigError, match="is a directory"):
        load_device(tmp_path / "dir.toml")


def test_a_missing_dtype_is_named():
    with pytest.raises(ConfigError, match="h100-sxm has no dense 'fp4' figure; it has fp64, fp32"):
        load_device("h100-sxm").ridge("fp4")
    with pytest.raises(ConfigError, match="no 2:4 sparse 'fp64' figure"):
        load_device("h100-sxm").flops_per_s("fp64", sparse=True)
    assert load_device("b200").flops_per_s("fp4", sparse=True) == 18e15


def test_an_unknown_name_lists_the_bundled_devices():
    with pytest.raises(ConfigError) as caught:
        load_device("h900")
    message = str(caught.value)
    assert "\n" not in message and "h100-sxm" in message and "gb200-nvl72" in message and "docs/hardware.md" in message
    with pytest.raises(ConfigError, match="unknown hardware kind"):
        device_names(kind="gpu")


# --- devices with memory figures only -----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(MEMORY_ONLY))
def test_a_device_without_a_published_rate_sizes_memory_and_refuses_times_in_one_line(capsys, name):
    from checks import run

    device = load_device(name)
    assert device.dense_flops_per_s == {} and device.memory_bytes > 0 and device.source.url
    code, out, _ = run(capsys, "memory", "qwen3-0.6b", "--infer", "--batch", "1", "--seq", "8", "--gpu", name)
    assert code == 0 and f"{name}: " in out
    for argv in (("time", "qwen3-0.6b", "--gpu", name, "--infer", "--batch", "1", "--prompt", "8", "--output", "2"), ("roofline", "qwen3-0.6b", "--gpu", name, "--phase", "decode", "--batch", "1", "--context", "8")):
        code, out, err = run(capsys, *argv)
        assert code == 2 and not out and err.count("\n") == 1 and "no published FLOP rate" in err, err


def test_apple_unified_memory_is_read_as_binary_gigabytes():
    """Apple's "192GB" of unified memory is 192 GiB, as for every other device; the bandwidths are decimal."""
    assert load_device("apple-m2-ultra").memory_bytes == 192 * GiB and load_device("apple-m2-ultra").hbm_bytes_per_s == 800e9
    assert load_device("apple-m3-ultra").memory_bytes == 512 * GiB and load_device("apple-m4-max").hbm_bytes_per_s == 546e9
