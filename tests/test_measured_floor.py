"""symform's floor (the datasheet peaks, everything overlapped) is the least time any implementation takes for a setup.
A published figure better than the floor says the setup as recorded is not what ran: each such run names why
(beyond_floor in hardware/measured), and no other run lies beyond its floor."""

import pytest

from symform.analysis.time import calibration
from symform.analysis.time.measured_runs import runs, runs_in
from symform.engine.errors import ConfigError


def test_a_published_figure_beyond_the_floor_names_why():
    beyond = {run.name for run in runs() if calibration.beyond_floor(run)}
    named = {run.name for run in runs() if run.beyond_floor}
    assert beyond == named, f"beyond the floor without a reason: {sorted(beyond - named)}; a reason but within it: {sorted(named - beyond)}"


def test_the_floor_figure_of_a_serving_run_is_its_bounds_at_the_run_s_sizes():
    """The floor's tokens a second: batch × output over the lower bound of the whole request, per GPU."""
    run = next(r for r in runs() if r.name == "v09-a100-mixtral-8x7b-tp2-b32-2048-2048")
    bounds = calibration._prepared(run).bounds
    assert calibration.floor_figure(run) == pytest.approx(32 * 2048 / bounds.total_lower / 2, rel=1e-12)


@pytest.mark.parametrize("reason", ["", "   ", 3])
def test_a_reason_must_be_words(tmp_path, reason):
    data = {"kind": "measured_serving", "runs": [{"name": "r", "split": "check", "preset": "gpt2", "gpu": "h100-sxm", "batch": 1, "prompt": 8, "output": 2, "measured": {"ttft_ms": 1.0}, "beyond_floor": reason}]}
    with pytest.raises(ConfigError, match="beyond_floor must say why"):
        runs_in([(tmp_path / "x.toml", data)])
