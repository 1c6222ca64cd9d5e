"""symform plot and symform.interface.reports.plots: the numbers behind each chart, the charts' labels, and bad input."""

import json
import sys
from fractions import Fraction
from pathlib import Path

import pytest

import symform
from symform.interface.reports import plots
from symform.interface.cli.cli import main
from symform.engine.errors import EvaluationError, SymformError
from symform.analysis.memory.memory import Training, training_memory
from symform.analysis.memory.settings import Layout
from symform.interface.reports.roofline_chart import PlotDependencyError

ROOT = Path(__file__).resolve().parent.parent

QWEN3 = ["qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b"]


# --- grouping and shares (no matplotlib needed) ---------------------------------------------


@pytest.mark.parametrize(
    "path, group",
    [
        ("embed", "embedding"),
        ("embed/wpe", "embedding"),
        ("layers/attn_norm", "norms"),
        ("layers/attn/q_norm", "norms"),
        ("final_norm", "norms"),
        ("layers/attn/q_proj", "attention projections"),
        ("layers/moe/attn/kv_b_proj", "attention projections"),
        ("layers/attn/core/scores", "attention scores"),
        ("layers/mlp/gate_proj", "mlp"),
        ("layers/moe/mlp/router", "mlp"),
        ("layers/moe/mlp/shared_experts/down_proj", "mlp"),
        ("lm_head", "output head"),
        ("lm_head/shared", "output head"),
        ("loss", "other"),
    ],
)
def test_paths_fall_into_groups_by_segment_names(path, group):
    assert plots.component_group(path) == group


def test_every_preset_path_has_a_group_and_shares_sum_to_one():
    table = plots.params_shares(QWEN3 + ["gpt2", "deepseek-v2-lite", "gemma-2-2b"])
    for name, shares in table.items():
        assert sum(shares.values()) == 1, name  # exact: Fractions of integer counts
        assert shares["other"] == 0, name  # every parameter lands in a named group
        assert all(isinstance(s, Fraction) for s in shares.values())


def test_params_shares_match_the_breakdown():
    model = symform.load("qwen3-8b")
    parts = model.evaluate_breakdown("params", depth=None)
    mlp = sum(v for p, v in parts.items() if p.startswith("layers/global/mlp/"))  # Qwen3's layers are layers/global/...
    assert plots.params_shares([model])["qwen3-8b"]["mlp"] == Fraction(mlp, model.evaluate("params"))


def test_embedding_share_falls_as_the_family_grows():
    shares = [plots.params_shares([m])[m]["embedding"] for m in QWEN3]
    assert shares == sorted(shares, reverse=True)


def test_active_parameter_shares_of_a_mixture_of_experts():
    total = plots.params_shares(["qwen3-30b-a3b"])["qwen3-30b-a3b"]
    active = plots.params_shares(["qwen3-30b-a3b"], quantity="active_params")["qwen3-30b-a3b"]
    assert sum(active.values()) == 1
    assert active["mlp"] < total["mlp"]  # only the routed experts' share is active


def test_attention_scores_share_grows_with_context():
    table = plots.flops_shares("qwen3-8b", [512, 2048, 8192, 32768])
    scores = [t["attention scores"] for t in table.values()]
    assert scores == sorted(scores) and scores[-1] > Fraction(1, 2)
    assert all(sum(t.values()) == 1 for t in table.values())


def test_flops_shares_do_not_depend_on_batch():
    assert plots.flops_shares("qwen3-0.6b", [1024], batch=1) == plots.flops_shares("qwen3-0.6b", [1024], batch=8)


def test_memory_grid_is_training_memory():
    model = symform.load("qwen3-0.6b")
    setup = Training(flash=True, layout=Layout(data=2, zero=1))
    grid = plots.memory_grid(model, [1, 2], [1024], setup=setup)
    assert list(grid) == [(1, 1024), (2, 1024)]
    assert grid[2, 1024].values == training_memory(model, batch=2, seq=1024, setup=setup).values


@pytest.mark.parametrize("seqs", [[], [0], [512, -1], [1.5]])
def test_bad_lengths_are_one_line_errors(seqs):
    with pytest.raises(EvaluationError) as e:
        plots.flops_shares("qwen3-0.6b", seqs)
    assert "\n" not in str(e.value)


def test_no_models_is_an_error():
    with pytest.raises(EvaluationError, match="at least one model"):
        plots.params_shares([])


# --- figures --------------------------------------------------------------------------------


@pytest.fixture
def mpl():
    return pytest.importorskip("matplotlib")


def _legend(axes_or_figure) -> list[str]:
    legend = axes_or_figure.get_legend() if hasattr(axes_or_figure, "get_legend") else axes_or_figure.legends[0]
    return [t.get_text() for t in legend.get_texts()]


def test_params_share_figure_is_labelled(mpl):
    figure = plots.params_share_figure(QWEN3)
    (axes,) = figure.axes
    assert axes.get_title() == "Share of parameters by component"
    assert "(%)" in axes.get_ylabel() and "parameters" in axes.get_xlabel()
    assert axes.get_ylim() == (0, 100)
    ticks = [t.get_text() for t in axes.get_xticklabels()]
    assert ticks[0] == "qwen3-0.6b\n596 M" and ticks[-1] == "qwen3-32b\n32.8 B"
    legend = _legend(axes)
    assert legend[:3] == ["embedding", "attention projections (Q, K, V, O)", "MLP / experts (incl. router)"]
    assert any(t.startswith("norms (at most") for t in legend)  # too thin to see: the legend says how thin
    assert not any("scores" in t for t in legend)  # no parameters there: not in the legend


def test_bars_stack_to_one_hundred_percent(mpl):
    (axes,) = plots.params_share_figure(["qwen3-0.6b", "gpt2"]).axes
    tops = {}
    for bar in axes.patches:
        x = round(bar.get_x() + bar.get_width() / 2)
        tops[x] = max(tops.get(x, 0), bar.get_y() + bar.get_height())
    assert tops == pytest.approx({0: 100, 1: 100})


def test_flops_share_figure_is_labelled(mpl):
    figure = plots.flops_share_figure("qwen3-8b", [512, 32768])
    (axes,) = figure.axes
    assert "qwen3-8b" in axes.get_title() and "context length" in axes.get_title()
    assert "tokens" in axes.get_xlabel() and "(%)" in axes.get_ylabel()
    assert [t.get_text().split("\n")[0] for t in axes.get_xticklabels()] == ["512", "32,768"]
    assert axes.get_xticklabels()[1].get_text().endswith("PFLOP")
    assert any("attention scores" in t for t in _legend(axes))


def test_memory_figure_draws_the_device_limit(mpl):
    device = symform.load_device("h100-sxm")
    figure = plots.memory_figure("qwen3-0.6b", "h100-sxm", [1, 2, 4], [1024, 4096])
    panels = figure.axes
    assert len(panels) == 2 and [a.get_title() for a in panels] == ["seq 1,024 tokens", "seq 4,096 tokens"]
    assert "GiB" in panels[0].get_ylabel() and "batch" in panels[0].get_xlabel()
    assert "qwen3-0.6b" in figure.get_suptitle() and device.title in figure.get_suptitle()
    for axes in panels:
        (limit,) = [line for line in axes.get_lines() if line.get_linestyle() == "--"]
        assert limit.get_ydata()[0] == pytest.approx(device.memory_bytes / 2**30) == pytest.approx(80)
    legend = _legend(figure)
    assert f"{device.title}: 80 GiB" in legend
    assert {"weights", "gradients", "optimizer", "activations"} <= set(legend)


def test_memory_bars_are_the_reports_totals(mpl):
    figure = plots.memory_figure("qwen3-0.6b", "h100-sxm", [2], [1024])
    (axes,) = figure.axes
    top = max(bar.get_y() + bar.get_height() for bar in axes.patches)
    total = training_memory(symform.load("qwen3-0.6b"), batch=2, seq=1024).total
    assert top == pytest.approx(float(total) / 2**30)


@pytest.mark.parametrize("framework", [[], ["--framework", "megatron"]])
def test_the_memory_chart_counts_what_symform_memory_counts(mpl, capsys, framework):
    """`symform plot memory` takes `symform memory`'s options and counts them as it does: the default framework's
    (torchtitan's) per-op recomputation, FSDP buffers, CUDA context and reserve, sequence parallelism beside --tp;
    each bar's top is `symform memory --train --json`'s total, the framework's part a group of its own."""
    from symform.interface.cli.cli import build_parser

    layout = ["--batch", "2", "--seq", "1024", "--recompute", "selective", "--zero", "3", "--dp", "4", "--tp", "2", *framework]
    assert main(["memory", "qwen3-0.6b", "--train", *layout, "--json"]) == 0
    total = json.loads(capsys.readouterr().out)["total"]
    figure = plots._figure_for(build_parser().parse_args(["plot", "memory", "qwen3-0.6b", "--gpu", "h100-sxm", *layout, "--out", "x.png"]))
    (axes,) = figure.axes
    assert max(bar.get_y() + bar.get_height() for bar in axes.patches) == pytest.approx(total / 2**30, rel=1e-9)
    assert plots.FRAMEWORK_LABEL in _legend(figure)


def test_the_memory_chart_takes_no_sp_for_a_sequence_the_tensor_ranks_cannot_split(mpl, capsys, tmp_path):
    """Sequence parallelism (torchtitan's, beside --tp) splits each sequence over the tensor ranks, so 4,095 tokens
    on 2 ranks are refused as symform memory refuses them; --no-sp draws them without it."""
    argv = ["plot", "memory", "qwen3-0.6b", "--gpu", "h100-sxm", "--batch", "1", "--seq", "1000,4095", "--tp", "2", "--out", str(tmp_path / "m.png")]
    assert main(argv) == 2 and "--no-sp" in capsys.readouterr().err
    assert main([*argv, "--no-sp"]) == 0


def test_memory_refuses_a_system():
    with pytest.raises(SymformError, match="system"):
        plots.device_memory("hgx-h100-8gpu")


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml")])
def test_save_writes_png_and_svg(mpl, tmp_path, suffix, magic):
    path = plots.save(plots.params_share_figure(["qwen3-0.6b"]), tmp_path / "sub" / f"p{suffix}")
    assert path.read_bytes().startswith(magic)


def test_save_refuses_other_formats(mpl, tmp_path):
    with pytest.raises(SymformError, match=r"\.png or \.svg"):
        plots.save(plots.params_share_figure(["qwen3-0.6b"]), tmp_path / "p.pdf")


def test_missing_matplotlib_gives_the_install_hint(monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)  # importing it now raises ImportError
    with pytest.raises(PlotDependencyError, match=r"pip install matplotlib"):
        plots.params_share_figure(["qwen3-0.6b"])


# --- command line ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, magic",
    [
        (["params-share", "qwen3-0.6b", "qwen3-1.7b"], b"\x89PNG"),
        (["params-share", "qwen3-30b-a3b", "--active"], b"\x89PNG"),
        (["flops-share", "qwen3-0.6b", "--seq", "512,4096"], b"\x89PNG"),
        (["memory", "qwen3-0.6b", "--gpu", "h100-sxm", "--batch", "1,2", "--seq", "1024,4096", "--flash", "--zero", "1", "--dp", "2"], b"\x89PNG"),
        (["roofline", "qwen3-0.6b", "--gpu", "h100-sxm", "--phase", "prefill", "--batch", "1", "--seq", "1024"], b"\x89PNG"),
    ],
)
@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_cli_writes_each_chart(mpl, capsys, tmp_path, argv, magic, suffix):
    out = tmp_path / f"chart{suffix}"
    assert main(["plot", *argv, "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"wrote {out}"
    assert out.read_bytes().startswith(magic if suffix == ".png" else b"<?xml")


@pytest.mark.parametrize(
    "argv, message",
    [
        (["flops-share", "qwen3-0.6b", "--seq", "512", "--out", "x.pdf"], ".png or .svg"),
        (["flops-share", "qwen3-0.6b", "--seq", "512,zero", "--out", "x.png"], "not a whole number"),
        (["flops-share", "qwen3-0.6b", "--seq", "0", "--out", "x.png"], "must be positive"),
        (["params-share", "no-such-model", "--out", "x.png"], "neither a bundled preset nor a file"),
        (["memory", "qwen3-0.6b", "--gpu", "hgx-h100-8gpu", "--batch", "1", "--seq", "512", "--out", "x.png"], "system"),
        (["memory", "qwen3-0.6b", "--gpu", "no-such-gpu", "--batch", "1", "--seq", "512", "--out", "x.png"], "no-such-gpu"),
        (["memory", "qwen3-0.6b", "--batch", "1", "--seq", "512", "--out", "x.png"], "--gpu"),
        (["roofline", "qwen3-0.6b", "--gpu", "h100-sxm", "--phase", "decode", "--batch", "1", "--out", "x.png"], "--past"),
        (["bar-chart", "qwen3-0.6b"], "invalid choice"),
    ],
)
def test_cli_bad_input_is_one_line_and_status_2(capsys, tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    assert main(["plot", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_cli_without_matplotlib_says_how_to_install(capsys, tmp_path, monkeypatch):
    for name in ("matplotlib", "matplotlib.figure", "matplotlib.pyplot"):
        monkeypatch.setitem(sys.modules, name, None)
    assert main(["plot", "flops-share", "qwen3-0.6b", "--seq", "512", "--out", str(tmp_path / "x.png")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "pip install matplotlib" in err


def test_the_install_hint_installs_the_plot_extra_without_an_index_entry_for_symform():
    import tomllib

    from symform.interface.reports.roofline_chart import INSTALL_HINT

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["plot"]
    assert INSTALL_HINT == "pip install " + " ".join(extra)  # works from a clone and from an index alike
    hints = [p for p in [ROOT / "README.md", *(ROOT / "docs").glob("*.md"), *(ROOT / "docs" / "examples").glob("*.ipynb"), *(ROOT / "symform").rglob("*.py")]
             if "symform[plot]" in p.read_text()]
    assert not hints, f"advice that needs symform on a package index: {hints}"
