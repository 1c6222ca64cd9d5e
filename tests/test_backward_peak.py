"""The training memory's backward peak: the loss's logits gradients, alive only during its backward.

Expected values are hand counts (batch · seq · vocab · bytes written out) and, for the loss itself, PyTorch's
own memory timeline (torch.profiler) of transformers' ForCausalLMLoss running backward.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from checks import run, run_json
from symform import Model
from symform.analysis.memory.finetune import FineTune, finetune_memory
from symform.analysis.memory.memory import Training, training_memory
from symform.analysis.memory.settings import Layout

VOCAB = 1000
TINY_LLAMA = {
    "model_type": "llama", "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "vocab_size": VOCAB, "max_position_embeddings": 4096,
}  # fmt: skip


def tiny(**conventions) -> Model:
    return Model.from_config(TINY_LLAMA, name="tiny-llama", conventions=conventions)


def test_the_loss_gradients_are_two_fp32_tensors_of_batch_seq_vocab():
    # transformers upcasts the logits: nll_loss's gradient and log_softmax's, 4 bytes each, alive together
    report = training_memory(tiny(), batch=2, seq=16)
    assert report.values["backward_peak"] == 2 * 4 * (2 * 16 * VOCAB) == 256_000
    assert report.values["recompute_buffer"] == 0


def test_tensor_parallel_ranks_hold_their_share_of_the_vocabulary():
    report = training_memory(tiny(), batch=2, seq=16, setup=Training(layout=Layout(tensor=2)))
    assert report.values["backward_peak"] == 2 * 4 * 2 * 16 * (VOCAB // 2)


def test_a_loss_that_does_not_upcast_holds_its_gradients_in_the_activations_dtype():
    report = training_memory(tiny(loss_bytes=2), batch=1, seq=8)
    assert report.values["backward_peak"] == 2 * 2 * 8 * VOCAB


def test_a_chunked_compiled_loss_keeps_the_logits_and_holds_one_chunk_gradient():
    plain = training_memory(tiny(), batch=2, seq=16)
    chunked = training_memory(tiny(loss_chunks=8), batch=2, seq=16)
    assert chunked.values["backward_peak"] == 2 * (2 * 16 * VOCAB) // 8  # one bf16 chunk of 32 rows / 8
    # kept: bf16 logits and an fp32 log-sum-exp per row instead of fp32 log-probabilities
    rows = 2 * 16
    assert plain.activations_by_component["loss"] - chunked.activations_by_component["loss"] == (4 - 2) * rows * VOCAB - 4 * rows


def test_recomputation_and_the_loss_gradients_never_add_up():
    """The loss's backward frees its gradients before any layer is rebuilt: the peak is the larger of the two."""
    model = tiny()
    loss = 2 * 4 * 4 * 512 * VOCAB
    report = training_memory(model, batch=4, seq=512, setup=Training(recompute="full"))
    rebuilt = report.values["recompute_buffer"]
    assert 0 < rebuilt and rebuilt + report.values["backward_peak"] == max(rebuilt, loss)


def test_eager_attention_adds_nothing_to_the_loss_gradients():
    flash = training_memory(tiny(), batch=1, seq=64)
    eager = training_memory(tiny(), batch=1, seq=64, setup=Training(flash=False))
    assert flash.values["backward_peak"] == eager.values["backward_peak"] == 2 * 4 * 64 * VOCAB
    assert eager.values["activations"] > flash.values["activations"]


@settings(max_examples=15, deadline=None)
@given(st.integers(1, 4), st.integers(1, 2048), st.sampled_from(["none", "selective", "full"]), st.booleans(), st.booleans())
def test_the_total_is_the_sum_of_its_lines(batch, seq, recompute, flash, adapters):
    model = tiny()
    training = Training(recompute=recompute, flash=flash)
    report = (
        finetune_memory(model, FineTune(rank=4, targets=("q_proj", "v_proj")), batch=batch, seq=seq, training=training)
        if adapters
        else training_memory(model, batch=batch, seq=seq, setup=training)
    )
    assert report.total == sum(report.values.values())
    loss = 2 * 4 * batch * seq * VOCAB  # the loss's fp32 gradients, hand-counted
    assert report.values["backward_peak"] + report.values["recompute_buffer"] == max(loss, report.values["recompute_buffer"])


# --- the CLI -------------------------------------------------------------------------------------


def test_training_memory_defaults_to_flash_attention_and_says_so(capsys):
    default = run_json(capsys, "memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "1024")
    assert default["assumptions"]["flash_attention"] is True and default["assumptions"]["attention"].startswith("sdpa")
    for eager in (("--no-flash",), ("--attention", "eager")):
        report = run_json(capsys, "memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "1024", *eager)
        assert report["assumptions"]["flash_attention"] is False and report["assumptions"]["attention"].startswith("eager")
        assert report["components"]["activations"] > default["components"]["activations"]
    assert default["components"]["backward_peak"] == 2 * 4 * 1024 * 151_936  # qwen3's vocabulary, fp32 gradients


def test_the_table_names_the_backward_peak_and_the_attention(capsys):
    code, out, _ = run(capsys, "memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "1024")
    assert code == 0
    assert "\nbackward_peak " in out and "backward_peak: the loss's logits gradients" in out
    assert "attention: sdpa (FlashAttention kernels" in out
    code, out, _ = run(capsys, "memory", "qwen3-0.6b", "--infer", "--batch", "1", "--seq", "1024", "--no-flash")
    assert code == 0 and "attention: eager" in out


def test_fit_defaults_to_flash_attention_and_counts_the_backward_peak(capsys):
    flash = run_json(capsys, "fit", "qwen3-0.6b", "--train", "--memory", "40GB", "--solve", "seq", "--batch", "1")
    eager = run_json(capsys, "fit", "qwen3-0.6b", "--train", "--memory", "40GB", "--solve", "seq", "--batch", "1", "--attention", "eager")
    assert flash["largest"] > eager["largest"]
    assert flash["at_largest"]["assumptions"]["flash_attention"] is True
    assert flash["at_largest"]["components"]["backward_peak"] == 2 * 4 * flash["largest"] * 151_936


def test_contradicting_attention_options_are_refused_in_one_line(capsys):
    code, _, err = run(capsys, "memory", "qwen3-0.6b", "--train", "--batch", "1", "--seq", "8", "--no-flash", "--attention", "sdpa")
    assert code == 2 and "contradict" in err and len(err.strip().splitlines()) == 1


# --- the oracle: PyTorch's memory timeline ---------------------------------------------------------


@pytest.mark.oracle
def test_the_declared_backward_peak_is_what_pytorch_allocates_in_the_losss_backward():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from torch.profiler import ProfilerActivity, profile
    from torch.profiler._memory_profiler import Action
    from transformers.loss.loss_utils import ForCausalLMLoss

    rows = 64
    torch.manual_seed(0)
    hidden = torch.randn(rows, 32, dtype=torch.bfloat16, requires_grad=True)
    head = torch.randn(VOCAB, 32, dtype=torch.bfloat16)  # frozen, as under adapters: no weight gradient
    labels = torch.randint(0, VOCAB, (1, rows))

    def forward():
        # the model's output is not held through backward (the Trainer keeps only the loss)
        return ForCausalLMLoss((hidden @ head.T).view(1, rows, VOCAB), labels, VOCAB)

    forward().backward()  # warm-up: lazily created buffers stay out of the timeline
    hidden.grad = None
    loss = forward()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, record_shapes=True, with_stack=True) as prof:
        loss.backward()
    beyond, peak = 0, 0  # bytes allocated in backward beyond what the forward left alive
    for _, action, _, size in prof._memory_profile().timeline:
        beyond += size if action == Action.CREATE else -size if action == Action.DESTROY else 0
        peak = max(peak, beyond)
    seed = 4  # the fp32 scalar gradient backward() starts from
    assert peak - seed == training_memory(tiny(), batch=1, seq=rows).values["backward_peak"] == 2 * 4 * rows * VOCAB
