"""Roofline: closed forms of single operations, whole phases of a model on a device, the CLI."""

import json
import sys
from fractions import Fraction

import pytest
import sympy
from checks import run
from hypothesis import given, settings
from hypothesis import strategies as st

import symform
from symform.analysis.time.roofline import Roofline, b, d, dot_product, f, limit_intensity, matmul, n, roofline, small_batch_intensity, split_contraction_matmul
from symform.analysis.time.crossovers import R, decode_context_limit, decode_crossover

H100_SXM_BF16 = 989.4e12  # Hopper whitepaper, dense
H100_SXM_HBM = 3.35e12


@pytest.fixture(scope="module")
def llama():
    return symform.load("llama-3-8b")


# --- single operations -----------------------------------------------------------------


def test_dot_product_intensity_tends_to_one_half():
    work = dot_product()
    assert sympy.simplify(work.intensity - (2 * n - 1) / (4 * n + 2)) == 0
    assert limit_intensity(work, n) == sympy.Rational(1, 2)
    assert dot_product(1).intensity == sympy.Rational(1, 6)


def test_matmul_intensity_is_bdf_over_the_sum_and_b_when_b_is_small():
    work = matmul()
    assert sympy.simplify(work.intensity - b * d * f / (b * d + d * f + b * f)) == 0
    assert small_batch_intensity() == b
    assert sympy.limit(sympy.limit(work.intensity, d, sympy.oo), f, sympy.oo) == b
    assert abs(float(matmul(1, 8192, 8192).intensity) - 1) < 1e-3


def test_split_contraction_over_two_gpus_gives_d_over_two():
    assert split_contraction_matmul().intensity == d / 2


def test_a_symbolic_roofline_keeps_max_and_sum():
    flops, traffic, peak, bandwidth = sympy.symbols("F B P W", positive=True)
    r = Roofline(flops, traffic, peak, bandwidth)
    assert r.time_lower == sympy.Max(flops / peak, traffic / bandwidth)
    assert sympy.simplify(r.time_upper - (flops / peak + traffic / bandwidth)) == 0
    assert r.ridge == peak / bandwidth
    with pytest.raises(symform.SymformError):
        _ = r.bound


@settings(max_examples=300)
@given(
    flops=st.integers(0, 10**20),
    traffic=st.integers(1, 10**15),
    peak=st.floats(1e9, 1e16),
    bandwidth=st.floats(1e9, 1e14),
)
def test_lower_bound_at_most_upper_bound_at_most_twice_lower(
    flops, traffic, peak, bandwidth
):
    r = Roofline(flops, traffic, peak, bandwidth)
    assert r.time_lower <= r.time_upper <= 2 * r.time_lower * (1 + 1e-12)
    # compute-bound where flops/peak > traffic/bandwidth, compared exactly; times equal to within the floats'
    # rounding may fall either way
    math, memory = Fraction(flops) * Fraction(bandwidth), Fraction(traffic) * Fraction(peak)
    if abs(math - memory) > memory * Fraction(1, 10**12):
        assert (r.bound == "compute") == (math > memory)


# --- a model on a device -----------------------------------------------------------------


def test_h100_ridge_from_the_datasheet(llama):
    r = roofline(llama, "h100-sxm", phase="decode", batch=1, context=0)
    assert r.total.ridge == pytest.approx(H100_SXM_BF16 / H100_SXM_HBM)


def test_phases_agree_with_the_models_own_totals(llama):
    # serving runs no loss (training = 0) and turns only each sequence's last position into logits
    # (all_logits = 0: generate's logits_to_keep = 1); a training step runs both over every position
    prefill = roofline(llama, "h100-sxm", phase="prefill", batch=3, seq=512)
    assert prefill.total.flops == llama.evaluate("forward_flops", batch=3, seq=512, training=0, all_logits=0)
    assert prefill.total.bytes == llama.evaluate("bytes_moved", batch=3, seq=512, training=0, all_logits=0)
    d, vocab = llama.values["d_model"], llama.values["vocab"]
    every_position = llama.evaluate("forward_flops", batch=3, seq=512, training=0)
    assert every_position - prefill.total.flops == 2 * 3 * 511 * d * vocab  # the head's product on the 511 positions not sampled
    train = roofline(llama, "h100-sxm", phase="train", batch=3, seq=512)
    assert train.total.flops == llama.evaluate(
        "forward_flops", batch=3, seq=512
    ) + llama.evaluate("backward_flops", batch=3, seq=512)
    assert train.total.bytes == 3 * llama.evaluate("bytes_moved", batch=3, seq=512)
    assert train.total.bytes > 3 * prefill.total.bytes
    decode = roofline(llama, "h100-sxm", phase="decode", batch=5, context=300, depth=2)
    assert decode.total.flops == llama.evaluate(
        "forward_flops", batch=5, seq=1, past=300, training=0
    )
    assert decode.total.bytes == llama.evaluate("bytes_moved", batch=5, seq=1, past=300, training=0)
    assert sum(c.flops for c in decode.components.values()) == decode.total.flops
    assert sum(c.bytes for c in decode.components.values()) == decode.total.bytes


def test_decode_at_batch_one_is_memory_bound_and_large_prefill_compute_bound(llama):
    decode = roofline(llama, "h100-sxm", phase="decode", batch=1, context=1024)
    prefill = roofline(llama, "h100-sxm", phase="prefill", batch=64, seq=1024)
    assert decode.total.bound == "memory"
    assert prefill.total.bound == "compute"
    # one token per sequence reads every weight: about 1 FLOP per byte in bf16
    assert 0.5 < float(decode.total.intensity) < 2


def _decode_compute_bound(model, batch, context):
    flops = model.evaluate("forward_flops", batch=batch, seq=1, past=context, training=0)
    traffic = model.evaluate("bytes_moved", batch=batch, seq=1, past=context, training=0)
    return flops > H100_SXM_BF16 / H100_SXM_HBM * traffic


@pytest.mark.parametrize("context", [0, 16])
def test_decode_crossover_batch_lies_where_the_bound_changes(llama, context):
    found = decode_crossover(llama, "h100-sxm", context=context)
    assert found.expression is not None and found.expression.free_symbols == {R}
    assert (
        1 < found.value < 64 * 1024
    )  # between decode at batch 1 and a large prefill's tokens per step
    assert not _decode_compute_bound(llama, found.first_compute_bound - 1, context)
    assert _decode_compute_bound(llama, found.first_compute_bound, context)


def test_long_context_decode_never_turns_compute_bound(llama):
    limit = decode_context_limit(llama, "h100-sxm")
    assert limit.value is not None and 1 < limit.value < 4096
    beyond = decode_crossover(llama, "h100-sxm", context=int(limit.value) + 1)
    assert beyond.value is None
    assert beyond.limit_intensity < beyond.ridge
    assert (
        decode_crossover(llama, "h100-sxm", context=int(limit.value)).value is not None
    )


def test_a_system_is_refused_with_its_accelerator_named(llama):
    with pytest.raises(symform.SymformError, match="h100-sxm"):
        roofline(llama, "hgx-h100-8gpu", phase="decode", batch=1, context=0)


def test_missing_or_misplaced_workload_is_refused(llama):
    with pytest.raises(symform.SymformError, match="seq"):
        roofline(llama, "h100-sxm", phase="prefill", batch=1)
    with pytest.raises(symform.SymformError, match="context"):
        roofline(llama, "h100-sxm", phase="decode", batch=1)
    with pytest.raises(symform.SymformError, match="phase"):
        roofline(llama, "h100-sxm", phase="inference", batch=1, seq=2)


# --- the command line ---------------------------------------------------------------------


def test_cli_json_has_the_documented_keys(capsys):
    code, out, err = run(
        capsys,
        "roofline",
        "llama-3-8b",
        "--gpu",
        "h100-sxm",
        "--phase",
        "decode",
        "--batch",
        "1",
        "--context",
        "1024",
        "--json",
    )
    assert code == 0, err
    report = json.loads(out)
    assert {
        "flops",
        "bytes",
        "intensity",
        "ridge",
        "bound",
        "time_lower_s",
        "time_upper_s",
        "components",
    } <= set(report)
    assert report["bound"] == "memory"
    assert report["time_lower_s"] <= report["time_upper_s"]
    assert set(report["components"]) >= {"embed", "layers", "lm_head"}
    assert "crossover" in report


def test_cli_prefill_table(capsys):
    code, out, err = run(
        capsys,
        "roofline",
        "llama-3-8b",
        "--gpu",
        "h100-sxm",
        "--phase",
        "prefill",
        "--batch",
        "64",
        "--seq",
        "1024",
    )
    assert code == 0, err
    assert "compute-bound" in out and "ridge 295.3 FLOP/byte" in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--gpu", "no-such-gpu", "--phase", "decode", "--batch", "1", "--context", "8"],
        ["--gpu", "h100-sxm", "--phase", "inference", "--batch", "1", "--seq", "8"],
        ["--gpu", "h100-sxm", "--phase", "prefill", "--batch", "1"],
        ["--gpu", "h100-sxm", "--phase", "train", "--batch", "1"],
        ["--gpu", "h100-sxm", "--phase", "decode", "--batch", "1"],
        ["--gpu", "h100-sxm", "--phase", "decode", "--batch", "1", "--seq", "8"],
        ["--gpu", "h100-sxm", "--phase", "prefill", "--batch", "0", "--seq", "8"],
        [
            "--gpu",
            "h100-sxm",
            "--phase",
            "prefill",
            "--batch",
            "1",
            "--seq",
            "8",
            "--dtype",
            "fp4",
        ],
        [
            "--gpu",
            "h100-sxm",
            "--phase",
            "prefill",
            "--batch",
            "1",
            "--seq",
            "8",
            "--plot",
            "chart.pdf",
        ],
    ],
)
def test_cli_bad_input_exits_2_with_one_line(capsys, argv):
    code, out, err = run(capsys, "roofline", "llama-3-8b", *argv)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1 and err.startswith("symform: error:")


def test_cli_plot_writes_png_and_svg(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    for name in ("chart.png", "chart.svg"):
        code, _, err = run(
            capsys,
            "roofline",
            "llama-3-8b",
            "--gpu",
            "h100-sxm",
            "--phase",
            "prefill",
            "--batch",
            "8",
            "--seq",
            "512",
            "--plot",
            str(tmp_path / name),
        )
        assert code == 0, err
    assert (tmp_path / "chart.png").read_bytes().startswith(b"\x89PNG")
    assert b"<svg" in (tmp_path / "chart.svg").read_bytes()[:2000]


def test_cli_plot_without_matplotlib_says_how_to_install(capsys, tmp_path, monkeypatch):
    monkeypatch.setitem(
        sys.modules, "matplotlib", None
    )  # import matplotlib now raises ImportError
    code, _, err = run(
        capsys,
        "roofline",
        "llama-3-8b",
        "--gpu",
        "h100-sxm",
        "--phase",
        "prefill",
        "--batch",
        "1",
        "--seq",
        "8",
        "--plot",
        str(tmp_path / "c.png"),
    )
    assert code == 2
    assert "pip install matplotlib" in err


def test_rooflines_crossovers_and_transfers_render_as_latex():
    from symform.analysis.parallel import parallel_comm
    from symform.analysis.time.roofline import roofline
    from symform.analysis.time.crossovers import decode_crossover

    model = symform.load("llama-3-8b")
    total = roofline(model, "h100-sxm", phase="decode", batch=1, context=16).total._repr_latex_()
    assert total.startswith("$F = ") and "I^{*} = 295.3" in total and "\\times 10^{10}" in total
    crossover = decode_crossover(model, "h100-sxm", context=16)._repr_latex_()
    assert "R" in crossover and f"= {decode_crossover(model, 'h100-sxm', context=16).value:.1f}$" in crossover
    (first, *_) = parallel_comm.tensor_parallel_layer(batch=1, seq=4096, d_model=4096, bytes_per_element=2, tensor=8)
    assert first._repr_latex_() == "$t = 28 \\alpha + 117440512 \\beta$"  # 2 runs × ring: 2·2·(8−1) α, 2·2·(7/8)·2²⁵ β


@pytest.mark.parametrize("preset", ["llama-3-8b", "qwen3-30b-a3b"])
@pytest.mark.parametrize("phase,flash", [("train", False), ("train", True), ("prefill", True)])
def test_sizes_put_into_each_leaf_give_the_work_with_sizes_put_in_afterwards(preset, phase, flash):
    # the planner's screen and training_time put the sizes (per tensor-parallel rank) into each leaf before
    # multiplying out; it must be the same work as the symbolic one with the sizes put in afterwards
    from symform.analysis.time.roofline import phase_work
    from symform.analysis.time.step_model import TENSOR, rank_sizes

    model = symform.load(preset)
    v = model.vocabulary
    seq = {v["seq"]: sympy.Integer(1000)}
    again = {"recomputed_forward": True} if phase == "prefill" else {}  # the prefill a training step's recomputation runs
    later = phase_work(model, phase, depth=None, flash=flash, **again)
    first = phase_work(model, phase, depth=None, flash=flash, values=rank_sizes(model, seq=1000), **again)
    split = {s: s / TENSOR for s in v.tensor_parallel}
    plain = {v[name]: sympy.Integer(value) for name, value in model.values.items() if name in v} | seq
    for symbolic, sized in ((later.total.flops, first.total.flops), (later.total.bytes, first.total.bytes)):
        assert sized.free_symbols <= {v["batch"], TENSOR}
        assert sympy.expand(symbolic.xreplace(split).xreplace(plain)) == sized
    assert set(later.components) == set(first.components)


def test_sizes_put_into_the_leaves_first_are_refused_for_a_served_step():
    # a decode step's expert routing reads top_k and n_experts in the leaves: they must still be there
    from symform.analysis.time.roofline import phase_work
    from symform.analysis.time.step_model import rank_sizes

    model = symform.load("qwen3-30b-a3b")
    with pytest.raises(symform.EvaluationError, match="train and a training step's recomputed forward"):
        phase_work(model, "decode", values=rank_sizes(model))
    with pytest.raises(symform.EvaluationError, match="for prefill, substitute them in the result"):
        phase_work(model, "prefill", values=rank_sizes(model))


@pytest.mark.parametrize("preset, share", [("qwen3-0.6b", "18.7%"), ("llama-3.1-8b", "6.5%"), ("llama-2-7b", "1.8%")])
def test_generating_computes_the_last_positions_logits_alone(preset, share):
    """docs/conventions.md's shares: of a 2,048-token prefill, the head's product on the 2,047 positions a
    generating prefill does not turn into logits (2·(s − 1)·d·V FLOPs)."""
    model = symform.load(preset)
    d, vocab, seq = model.values["d_model"], model.values["vocab"], 2048
    every = model.evaluate("forward_flops", batch=1, seq=seq, training=0)
    last = model.evaluate("forward_flops", batch=1, seq=seq, training=0, all_logits=0)
    assert every - last == 2 * (seq - 1) * d * vocab
    assert f"{(every - last) / every:.1%}" == share
    assert roofline(model, "h100-sxm", phase="prefill", batch=1, seq=seq).total.flops == last
