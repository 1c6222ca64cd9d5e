"""The reference pages in docs/reference are generated from the declarations and kept current."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import sympy

import symform
from symform.interface.papers import docgen
from symform.interface.papers import latex as tex
from symform.interface.papers.latex_parse import parse_back
from symform.interface.cli.cli import main

from checks import run

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference"


SHARDS = 6  # every page takes minutes on one core; a shard each, so that no test runs for long and workers share them
SAMPLE = ("README.md", "components/gqa_attention.md", "families/qwen3.md", "families/llama.md")  # what the other tests read


@pytest.fixture(scope="module")
def pages():
    makers = docgen.page_makers()
    return {rel: makers[rel]() for rel in SAMPLE}


def _committed() -> dict[str, Path]:
    return {p.relative_to(REFERENCE).as_posix(): p for p in REFERENCE.rglob("*.md")}


def test_the_committed_reference_pages_are_the_declared_ones():
    """Fails when a component or family was added or removed and docs/reference was not regenerated."""
    assert sorted(_committed()) == sorted(docgen.page_makers()), "regenerate with: symform docs --out docs/reference"


@pytest.mark.parametrize("shard", range(SHARDS))
def test_committed_reference_pages_are_current(shard):
    """Fails when a declaration changed and docs/reference was not regenerated (symform docs --out docs/reference)."""
    makers, committed = docgen.page_makers(), _committed()
    mine = sorted(makers)[shard::SHARDS]
    stale = [rel for rel in mine if rel not in committed or makers[rel]() != committed[rel].read_text(encoding="utf-8")]
    assert stale == [], "regenerate with: symform docs --out docs/reference"


def test_a_page_per_component_and_family(pages):
    library = symform.Model.load("qwen3-0.6b").library
    named = docgen.page_makers().keys()
    assert {f"components/{n}.md" for n in library.components} <= named
    assert {f"families/{f}.md" for f in docgen.family_specs()} <= named
    gqa = pages["components/gqa_attention.md"]
    assert "Ainslie et al. 2023" in gqa and "## Assumption sets" in gqa and "`n_heads % n_kv_heads == 0`" in gqa
    assert "](linear.md)" in gqa  # parts link to the components they use


def test_family_page_formulas_parse_back_to_the_model_s_expressions(pages):
    page = pages["families/qwen3.md"]
    model = docgen.family_model("qwen3", docgen.family_specs()["qwen3"])
    blocks = dict(re.findall(r"\*\*[^*]+\*\* \(`(\w+)`\)\n\n\$\$\n[^=]+ = (.*)\n\$\$", page))
    assert set(blocks) >= {"params", "forward_flops", "kv_cache", "train_flops"}
    for quantity, text in blocks.items():
        expr = model.expression(quantity).expr
        assert sympy.expand(parse_back(text, expr.free_symbols) - expr) == 0, quantity
    assert "&= 6 N D" in page and r"\approx 12 d^{2} n" in page


def test_docs_command_writes_the_pages(tmp_path, capsys, pages, monkeypatch):
    monkeypatch.setattr(docgen, "page_makers", lambda: {rel: (lambda text=text: text) for rel, text in pages.items()})  # a few pages, made once per module
    stale = tmp_path / "components" / "no_longer_declared.md"
    stale.parent.mkdir(parents=True)
    stale.write_text(docgen.HEADER + "# a page of a component no longer declared")
    notes = tmp_path / "components" / "my_notes.md"
    notes.write_text("written by hand")
    assert main(["docs", "--out", str(tmp_path)]) == 0
    assert f"wrote {len(pages)} pages" in capsys.readouterr().out
    assert not stale.exists()
    assert notes.read_text() == "written by hand"  # not symform's: left alone
    assert (tmp_path / "families" / "llama.md").read_text(encoding="utf-8") == pages["families/llama.md"]
    assert set((tmp_path / docgen.MANIFEST).read_text().split()) == set(pages)


def test_docs_refuses_to_overwrite_a_file_it_did_not_write(tmp_path, capsys, pages, monkeypatch):
    monkeypatch.setattr(docgen, "page_makers", lambda: {rel: (lambda text=text: text) for rel, text in pages.items()})
    readme = tmp_path / "README.md"
    readme.write_text("my project")
    code, out, err = run(capsys, "docs", "--out", str(tmp_path))
    assert code == 2 and err.count("\n") == 1 and "README.md exists and was not written by symform docs" in err
    assert readme.read_text() == "my project" and not (tmp_path / "components").exists()


def test_docs_removes_only_what_its_manifest_lists(tmp_path, capsys, pages, monkeypatch):
    monkeypatch.setattr(docgen, "page_makers", lambda: {rel: (lambda text=text: text) for rel, text in pages.items()})
    assert main(["docs", "--out", str(tmp_path)]) == 0
    elsewhere = tmp_path / "keep.md"
    elsewhere.write_text("mine")
    (tmp_path / docgen.MANIFEST).write_text("../keep.md\nkeep.md\ncomponents/gone.md\n")  # a tampered manifest
    gone = tmp_path / "components" / "gone.md"
    gone.write_text(docgen.HEADER + "listed, and symform wrote it")
    assert main(["docs", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    assert elsewhere.read_text() == "mine" and not gone.exists()


def test_docs_into_a_file_is_one_line(tmp_path, capsys, pages, monkeypatch):
    monkeypatch.setattr(docgen, "page_makers", lambda: {rel: (lambda text=text: text) for rel, text in pages.items()})
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    code, out, err = run(capsys, "docs", "--out", str(blocker / "reference"))
    assert code == 2 and err.count("\n") == 1 and "cannot write" in err
