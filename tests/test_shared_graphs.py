"""Models that differ only in their conventions share one graph, and what it derives is kept: the numbers
must be those of a model built from nothing with the same conventions (the independent oracle here)."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings, strategies as st

from symform import Model
from symform.analysis.memory.memory import Training, saved_activations, training_memory
from symform.analysis.time.roofline import phase_work

PRESETS = st.sampled_from(["qwen3-0.6b", "gpt2", "qwen1.5-moe-a2.7b"])
CONVENTIONS = st.fixed_dictionaries(
    {},
    optional={
        "causal": st.sampled_from([1, Fraction(1, 2)]),
        "act_bytes": st.sampled_from([1, 2, 4]),
        "flops_per_mac": st.sampled_from([1, 2]),
        "count_elementwise": st.sampled_from([0, 1]),
        "training": st.sampled_from([0, 1]),
    },
)


@settings(max_examples=12, deadline=None)
@given(PRESETS, CONVENTIONS, st.integers(1, 8), st.integers(1, 4096))
def test_a_model_with_changed_conventions_counts_as_one_built_with_them(name, conventions, batch, seq):
    shared = Model.load(name).with_conventions(**conventions)
    fresh = Model.load(name, conventions=conventions)
    for quantity in ("params", "forward_flops", "backward_flops", "bytes_moved", "saved_activations"):
        assert shared.evaluate(quantity, batch=batch, seq=seq) == fresh.evaluate(quantity, batch=batch, seq=seq)
    assert shared.evaluate_breakdown("forward_flops", batch=batch, seq=seq) == fresh.evaluate_breakdown("forward_flops", batch=batch, seq=seq)


@settings(max_examples=6, deadline=None)
@given(PRESETS, st.sampled_from(["none", "selective", "full"]), st.booleans(), st.integers(1, 4), st.integers(1, 2048))
def test_analyses_on_a_shared_graph_match_a_fresh_model(name, recompute, flash, batch, seq):
    warm = Model.load(name)
    for mode in ("none", "selective", "full"):  # fill the shared graph's store under other options first
        training_memory(warm, batch=batch, seq=seq, setup=Training(recompute=mode, flash=not flash))
    setup = Training(recompute=recompute, flash=flash)
    assert training_memory(warm, batch=batch, seq=seq, setup=setup).values == training_memory(Model.load(name), batch=batch, seq=seq, setup=setup).values


def test_what_is_kept_is_handed_out_as_fresh_containers():
    model = Model.load("qwen3-0.6b")
    _, _, by_component = saved_activations(model, recompute="full")
    by_component.clear()
    assert saved_activations(model, recompute="full")[2]
    work = phase_work(model, "train", depth=None)
    work.components.clear()
    assert phase_work(model, "train", depth=None).components
    leaves = model.graph().leaf_terms("params")
    leaves.clear()
    assert model.graph().leaf_terms("params")
