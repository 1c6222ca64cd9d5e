"""Notebook display: LaTeX and HTML reprs, and docs/examples/tour.ipynb run top to bottom."""

import html
import os
from pathlib import Path

import pytest

import symform
from symform.analysis.memory.memory import Inference, inference_memory, training_memory
from symform.interface.papers.notebook import Breakdown, breakdown

TOUR = Path(__file__).resolve().parent.parent / "docs" / "examples" / "tour.ipynb"


@pytest.fixture(scope="module")
def model():
    return symform.load("qwen3-0.6b")


def test_formula_renders_as_latex_and_has_a_short_repr(model):
    f = model.expression("params")
    assert f._repr_latex_() == f"${f.latex()}$"
    assert repr(f) == f"Formula(expr={f.expr!r})"  # not the whole symbol table


def test_derivation_renders_as_an_aligned_block(model):
    d = symform.derive(model, "train_flops", assume="standard", leading=True)
    latex = d._repr_latex_()
    assert latex.startswith("$$\\begin{aligned}") and latex.endswith("\\end{aligned}$$")


def test_memory_report_renders_a_table_and_its_total(model):
    report = training_memory(model, batch=1, seq=1024)
    table = report._repr_html_()
    for category in ("weights", "master weights", "gradients", "optimizer", "activations", "total"):
        assert f"<td>{category}</td>" in table or f"<td><b>{category}</b></td>" in table
    assert f"{report.values['weights']:,}" in table
    assert "batch 1, seq 1,024" in table
    assert report._repr_latex_() == f"${report.expression().latex()}$"


def test_inference_report_renders_too(model):
    report = inference_memory(model, batch=4, seq=1, past=1024, setup=Inference())
    assert "kv cache" in report._repr_html_() and "\\max" in report._repr_latex_()


def test_breakdown_is_the_models_breakdown_with_numbers(model):
    b = breakdown(model, "params", depth=2)
    assert isinstance(b, Breakdown)
    assert dict(b) == model.breakdown("params", depth=2)  # reads as the {path: Formula} mapping
    assert b.numbers == model.evaluate_breakdown("params", depth=2)
    assert b.total == model.evaluate("params")
    table = b._repr_html_()
    assert f"{model.evaluate('params'):,}" in table and "100.00%" in table
    assert html.escape(b["embed"].latex()) in table


def test_breakdown_with_a_workload_and_without(model):
    with_workload = breakdown(model, "forward_flops", depth=2, batch=2, seq=512)
    assert with_workload.total == model.evaluate("forward_flops", batch=2, seq=512)
    assert "batch 2, seq 512" in with_workload._repr_html_()
    symbolic = breakdown(model, "forward_flops")
    assert symbolic.total is None and symbolic.numbers["embed"] == 0  # sizes known, batch and seq not
    assert "layers" in symbolic._repr_html_()


def test_breakdown_latex_leaves_out_zero_rows(model):
    latex = breakdown(model, "forward_flops", depth=3)._repr_latex_()  # Qwen3's layers are layers/global/...
    assert "\\text{layers/global/attn} &=" in latex and "attn\\_norm" not in latex
    assert latex.startswith("$$\\begin{aligned}")


def test_breakdown_repr_is_short(model):
    text = repr(breakdown(model, "params"))
    assert text.startswith("Breakdown('qwen3-0.6b', 'params', {'embed': 155582464") and len(text) < 300


def test_the_tour_notebook_is_valid():
    nbformat = pytest.importorskip("nbformat")
    nbformat.validate(nbformat.read(TOUR, as_version=4))


def test_the_tour_notebook_runs_top_to_bottom(tmp_path, monkeypatch):
    pytest.importorskip("matplotlib")
    pytest.importorskip("ipykernel")
    nbclient = pytest.importorskip("nbclient")
    nbformat = pytest.importorskip("nbformat")
    # the kernel imports the symform these tests import, installed or from a checkout
    source = str(Path(symform.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [source, os.environ.get("PYTHONPATH")])))
    notebook = nbformat.read(TOUR, as_version=4)
    nbclient.NotebookClient(notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    kinds = {kind for o in outputs for kind in o.get("data", {})}
    assert {"text/html", "text/latex", "image/png"} <= kinds  # tables, formulas and a chart
