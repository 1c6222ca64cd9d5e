"""Hardware as people and programs read it: JSON objects and labelled tables (units in every cell)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ...analysis.devices.hardware import DTYPES, LINKS, Device, Hardware, Link, Source, System, device_names, load_device

def _source_json(source: Source) -> dict[str, Any]:
    return {"title": source.title, "url": source.url, "date": source.date}


def _links_json(device: Device) -> dict[str, Any]:
    return {
        kind: {"name": link.name, "unidirectional_bytes_per_s": link.unidirectional_bytes_per_s, "bidirectional_bytes_per_s": 2 * link.unidirectional_bytes_per_s}
        for kind, link in sorted(device.interconnect.items(), key=lambda kv: LINKS.index(kv[0]))
    }


def _ordered(rates: dict[str, Any], scale: int = 1) -> dict[str, Any]:
    return {dtype: scale * rates[dtype] for dtype in DTYPES if dtype in rates}


def device_json(device: Hardware) -> dict[str, Any]:
    """One accelerator or system as plain JSON types; a system's figures are totals over its accelerators."""
    if isinstance(device, System):
        return _system_json(device)
    return {
        "name": device.name,
        "kind": device.kind,
        "title": device.title,
        "vendor": device.vendor,
        "form_factor": device.form_factor,
        "memory_type": device.memory_type,
        "memory_bytes": device.memory_bytes,
        "hbm_bytes_per_s": device.hbm_bytes_per_s,
        "dense_flops_per_s": _ordered(device.dense_flops_per_s),
        "sparse_flops_per_s": _ordered(device.sparse_flops_per_s),
        "ridge_flops_per_byte": {dtype: device.ridge(dtype) for dtype in _ordered(device.dense_flops_per_s)},
        "interconnect": _links_json(device),
        "tdp_watts": device.tdp_watts,
        "source": _source_json(device.source),
        "see_also": [_source_json(s) for s in device.see_also],
        "notes": list(device.notes),
    }


def _system_json(system: System) -> dict[str, Any]:
    device, n = system.device, system.accelerator_count
    stated = system.stated_totals
    return {
        "name": system.name,
        "kind": system.kind,
        "title": system.title,
        "vendor": system.vendor,
        "accelerator": device.name,
        "accelerator_count": n,
        "memory_bytes": n * device.memory_bytes,
        "hbm_bytes_per_s": n * device.hbm_bytes_per_s,
        "dense_flops_per_s": _ordered(device.dense_flops_per_s, n),
        "sparse_flops_per_s": _ordered(device.sparse_flops_per_s, n),
        "ridge_flops_per_byte": {dtype: device.ridge(dtype) for dtype in _ordered(device.dense_flops_per_s)},
        "interconnect": _links_json(device),
        "accelerators_tdp_watts": n * device.tdp_watts if device.tdp_watts is not None else None,
        "power_watts": system.power_watts,
        "cpu": system.cpu,
        "scale_up_domain": asdict(system.scale_up_domain) if system.scale_up_domain else None,
        "scale_out": asdict(system.scale_out) if system.scale_out else None,
        "stated_totals": {
            **{k: v for k in ("memory_bytes", "hbm_bytes_per_s", "scale_up_bidirectional_bytes_per_s") if (v := getattr(stated, k)) is not None},
            **{k: _ordered(getattr(stated, k)) for k in ("dense_flops_per_s", "sparse_flops_per_s") if getattr(stated, k)},
        },
        "per_accelerator": device_json(device),
        "source": _source_json(system.source),
        "see_also": [_source_json(s) for s in system.see_also],
        "notes": list(system.notes),
    }


# --- tables ----------------------------------------------------------------------

_PREFIXES = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))
_BINARY = ((1 << 50, "Pi"), (1 << 40, "Ti"), (1 << 30, "Gi"), (1 << 20, "Mi"), (1 << 10, "Ki"))


def _si(value: float, unit: str) -> str:
    """989.4e12, "FLOP/s" → "989.4 TFLOP/s"; four significant figures at most."""
    for scale, prefix in _PREFIXES:
        if value >= scale:
            return f"{value / scale:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"


def _bytes(value: float) -> str:
    """85899345920 → "80 GiB (85.9 GB)"."""
    for scale, prefix in _BINARY:
        if value >= scale:
            return f"{value / scale:.4g} {prefix}B ({_si(value, 'B')})"
    return f"{value:.4g} B"


def _watts(value: float) -> str:
    return f"{value:,.0f} W" if value < 1e4 else _si(value, "W")


_LINK_LABELS = {"scale_up": "scale-up", "pcie": "PCIe", "scale_out": "scale-out"}


def _rate_unit(dtype: str) -> str:
    return "OP/s" if dtype.startswith("int") else "FLOP/s"


def _columns(rows: list[list[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]


def _cite(source: Source) -> str:
    return ", ".join(part for part in (source.title, source.date, source.url) if part)


def device_table(device: Hardware) -> str:
    """One accelerator or system for people: figures with their units, the ridge point per dtype, links, source."""
    if isinstance(device, System):
        return _system_table(device)
    head = ", ".join(p for p in (device.vendor, device.form_factor) if p)
    lines = [f"{device.name}: {device.title} ({head}); one accelerator"]
    facts = [
        ["memory", _bytes(device.memory_bytes) + (f" {device.memory_type}" if device.memory_type else "")],
        ["memory bandwidth", _si(device.hbm_bytes_per_s, "B/s")],
        ["TDP", _watts(device.tdp_watts) if device.tdp_watts else "not given"],
    ]
    lines += _columns(facts)
    lines.append("")
    lines += _rates(device, 1)
    if device.interconnect:
        lines.append("")
        lines.append("  links, per accelerator (datasheets count both directions: twice these)")
        links = [[_LINK_LABELS[kind], link.name, f"{_si(link.unidirectional_bytes_per_s, 'B/s')} each way"] for kind, link in _links_sorted(device)]
        lines += _columns(links)
    lines.append("")
    lines += _provenance(device)
    return "\n".join(lines)


def _links_sorted(device: Device) -> list[tuple[str, Link]]:
    return sorted(device.interconnect.items(), key=lambda kv: LINKS.index(kv[0]))


def _rates(device: Device, n: int) -> list[str]:
    rows = [["dtype", "dense" + (" (total)" if n > 1 else ""), "2:4 sparse" + (" (total)" if n > 1 else ""), "ridge, FLOP/byte"]]
    for dtype in DTYPES:
        if dtype in device.dense_flops_per_s:
            sparse = device.sparse_flops_per_s.get(dtype)
            rows.append([
                dtype,
                _si(n * device.dense_flops_per_s[dtype], _rate_unit(dtype)),
                _si(n * sparse, _rate_unit(dtype)) if sparse else "-",
                f"{device.ridge(dtype):.4g}",
            ])
    return _columns(rows)


def _provenance(item: Device | System) -> list[str]:
    rows = [["source", _cite(item.source)]] + [["see also", _cite(s)] for s in item.see_also] + [["note", note] for note in item.notes]
    return _columns(rows)


def _system_table(system: System) -> str:
    device, n = system.device, system.accelerator_count
    lines = [f"{system.name}: {system.title} ({system.vendor}); a system of {n} × {device.name} ({device.title})"]
    facts = [
        ["memory (total)", _bytes(n * device.memory_bytes)],
        ["memory bandwidth (total)", _si(n * device.hbm_bytes_per_s, "B/s")],
    ]
    if system.scale_up_domain:
        facts.append(["scale-up domain", f"{system.scale_up_domain.accelerators} accelerators: {system.scale_up_domain.name}"])
    if "scale_up" in device.interconnect:
        facts.append(["scale-up, per accelerator", f"{_si(device.interconnect['scale_up'].unidirectional_bytes_per_s, 'B/s')} each way"])
    if system.scale_out:
        nics = system.scale_out
        facts.append(["scale-out", f"{nics.count} × {nics.name}, {_si(nics.unidirectional_bytes_per_s, 'B/s')} each way each"])
    if system.cpu:
        facts.append(["CPU", system.cpu])
    if system.power_watts:
        facts.append(["system power", _watts(system.power_watts)])
    if device.tdp_watts:
        facts.append(["accelerators' TDP (total)", _watts(n * device.tdp_watts)])
    lines += _columns(facts)
    lines.append("")
    lines += _rates(device, n)
    lines.append("")
    lines += _provenance(system)
    lines.append(f"  per-accelerator figures: symform hardware {device.name}")
    return "\n".join(lines)


def devices_table() -> str:
    """Every bundled accelerator and system, one line each."""
    accelerators = [load_device(name) for name in device_names(kind="accelerator")]
    systems = [load_device(name) for name in device_names(kind="system")]
    lines = ["accelerators (one each; dense peaks: bf16, or fp16 where marked; 2:4 sparse ones under symform hardware NAME)"]
    rows = [["name", "title", "memory", "bandwidth", "16-bit dense", "fp8 dense", "TDP"]]
    for d in accelerators:
        rows.append([d.name, d.title, _bytes(d.memory_bytes), _si(d.hbm_bytes_per_s, "B/s"), _sixteen_bit(d, 1), _rate_or_dash(d, "fp8", 1), _watts(d.tdp_watts) if d.tdp_watts else "-"])
    lines += _columns(rows)
    lines.append("")
    lines.append("systems (totals over their accelerators)")
    rows = [["name", "title", "accelerators", "memory", "bandwidth", "16-bit dense", "fp8 dense"]]
    for s in systems:
        d, n = s.device, s.accelerator_count
        rows.append([s.name, s.title, f"{n} × {d.name}", _bytes(n * d.memory_bytes), _si(n * d.hbm_bytes_per_s, "B/s"), _sixteen_bit(d, n), _rate_or_dash(d, "fp8", n)])
    lines += _columns(rows)
    return "\n".join(lines)


def _sixteen_bit(device: Device, n: int) -> str:
    """bf16, or fp16 marked as such on devices without bf16 (V100)."""
    if "bf16" in device.dense_flops_per_s or "fp16" not in device.dense_flops_per_s:
        return _rate_or_dash(device, "bf16", n)
    return _rate_or_dash(device, "fp16", n) + " (fp16)"


def _rate_or_dash(device: Device, dtype: str, n: int) -> str:
    rate = device.dense_flops_per_s.get(dtype)
    return _si(n * rate, _rate_unit(dtype)) if rate else "-"
