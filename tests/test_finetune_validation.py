"""Fine-tuning memory against published measurements (hardware/finetune): the data, the acceptance case, the page."""

from __future__ import annotations

from pathlib import Path

import pytest

from symform.analysis.memory import finetune_validation as fv
from symform.engine.errors import ConfigError
from symform.interface.reports.finetune_validation_report import markdown, section

ROOT = Path(__file__).resolve().parent.parent  # the checkout: docs/ is not installed with the package


@pytest.fixture(scope="module")
def cases():
    return fv.validate()


def test_docs_fine_tuning_shows_what_the_code_estimates(cases):
    page = (ROOT / "docs" / "fine-tuning.md").read_text(encoding="utf-8")
    assert section(page) == markdown(cases), "regenerate: python -m symform.interface.reports.finetune_validation_report docs/fine-tuning.md"


def test_every_source_names_its_address_setup_and_what_it_measured():
    for stem, source in fv.sources().items():
        assert source["url"].startswith("https://"), stem
        assert source["setup"] and source["measures"], stem


def test_qlora_fine_tunes_a_65b_model_on_one_48_gb_gpu_with_room_to_spare(cases):
    # Dettmers et al. 2023: LLaMA 65B fine-tunes on a single 48 GB GPU
    (case,) = [c for c in cases if c.run.name == "llama-65b-48gb"]
    assert case.agrees and 0 < 48e9 - case.estimate < 48e9 * 0.1


def test_a_measured_longest_sequence_is_compared_at_that_length_with_the_gpus_memory(cases):
    for case in cases:
        what, value = case.run.measured
        if what == "longest_seq" and value:
            assert case.seq == value
            assert case.error == pytest.approx(case.estimate / case.run.budget - 1)
            # symform's own longest sequence is where its estimate crosses the memory
            assert case.longest_seq >= 1


def test_a_run_without_its_figure_is_refused_in_one_line(tmp_path, monkeypatch):
    path = tmp_path / "broken.toml"
    path.write_text('[source]\ntitle = "t"\nurl = "https://example.org"\nsetup = "s"\nmeasures = "m"\n\n[[runs]]\nname = "r"\npreset = "qwen3-0.6b"\nmemory_gib = 8\n', encoding="utf-8")
    monkeypatch.setattr(fv, "_paths", lambda: [path])
    with pytest.raises(ConfigError) as caught:
        fv.runs()
    assert "\n" not in str(caught.value) and "measured" in str(caught.value)
