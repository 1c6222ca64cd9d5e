"""``symform check``: symform's numbers beside a tiny real PyTorch module's, as a table or JSON."""

from __future__ import annotations

import argparse
import json

from ...engine.graph.model import Model


def check_arguments(p: argparse.ArgumentParser) -> None:
    """No options of its own: MODEL, --set, --convention and --json come from the CLI."""


def check_command(model: Model, args: argparse.Namespace) -> str:
    from ...analysis.memory.oracle_check import check  # torch and transformers only when asked

    report = check(model)
    if args.json:
        return json.dumps(report.as_dict())
    return check_table(report)


def check_table(report) -> str:
    sizes = ", ".join(f"{k} {v}" for k, v in report.sizes.items() if isinstance(v, int) and not isinstance(v, bool) and k.endswith(("size", "layers", "heads", "dim", "experts", "_tok")))
    lines = [f"check of {report.model} against transformers' {report.transformers_class} (float32, eager attention, batch 2 × seq 8; {sizes})"]
    if report.dropout:
        lines.append(f"training forward with dropout {report.dropout}")
    width = max(len(f"{r.quantity} {r.part}") for r in report.rows)
    lines.append(f"{'quantity':<{width}}  {'symform':>14}  {'pytorch':>14}  ")
    for row in report.rows:
        mark = "ok" if row.agrees else f"DIFFERS by {(row.symform or 0) - (row.pytorch or 0):+,}"
        ours = "-" if row.symform is None else f"{row.symform:,}"
        theirs = "-" if row.pytorch is None else f"{row.pytorch:,}"
        lines.append(f"{row.quantity + ' ' + row.part:<{width}}  {ours:>14}  {theirs:>14}  {mark}")
    for quantity, why in report.not_exact.items():  # what symform import could not map: named, never claimed
        lines.append(f"{quantity}: not exact, as the declaration says: {why}")
    wrong = report.differences
    if wrong:
        parts = ", ".join(dict.fromkeys(f"{r.part} ({r.quantity})" for r in wrong if r.part != "total")) or ", ".join(r.quantity for r in wrong)
        lines.append(f"{len(wrong)} difference(s): look first at {parts}")
    elif report.not_exact:
        lines.append(f"every number agrees here, but the declaration says {', '.join(report.not_exact)} is not exact in general")
    else:
        lines.append("every number agrees")
    return "\n".join(lines)
