"""`symform time`'s layout options (--sp, --chunks, --tp-comm-overlap) and its decode attention kernels."""

from fractions import Fraction

import pytest

from checks import run, run_json

STEP = ["time", "llama-3.1-70b", "--gpu", "h100-sxm", "--gpus", "64", "--train", "--global-batch", "512", "--seq", "4096", "--tp", "8", "--pp", "4", "--zero", "1"]
SERVE = ["time", "mistral-7b-v0.1", "--gpu", "h200-sxm", "--infer", "--batch", "56", "--prompt", "128", "--output", "128"]


def test_chunks_shrink_the_bubble_of_the_interleaved_schedule(capsys):
    """Narayanan et al. 2021, sec. 2.2.2: the interleaved schedule's bubble is (p − 1)/(v·m); here p = 4 stages,
    v = 5 chunks and m = 512 / (1 × 2 data-parallel ranks) = 256 micro-batches: 3/1280."""
    plain = run_json(capsys, *STEP)
    chunked = run_json(capsys, *STEP, "--chunks", "5")
    assert plain["bubble_ratio"] == pytest.approx(float(Fraction(3, 256)), rel=1e-12)
    assert chunked["bubble_ratio"] == pytest.approx(float(Fraction(3, 1280)), rel=1e-12)
    assert chunked["layout"]["schedule"] == "interleaved" and chunked["layout"]["chunks"] == 5
    # each micro-batch crosses every stage boundary once per chunk
    assert chunked["comm"]["pipeline"]["bytes_per_rank"] == pytest.approx(5 * plain["comm"]["pipeline"]["bytes_per_rank"], rel=1e-12)


def test_chunks_hold_a_layer_each_and_need_the_interleaved_schedule(capsys):
    """80 layers in 4 stages × 3 chunks do not split evenly: the chunks are balanced like stages (the step is timed);
    4 × 21 chunks leave some with no layer, which is refused in one line."""
    code, _, err = run(capsys, *STEP, "--chunks", "3")
    assert code == 0
    code, _, err = run(capsys, *STEP, "--chunks", "21")
    assert code == 2 and "80 layers" in err and "21 chunks" in err and "a chunk holds at least one layer" in err
    code, _, err = run(capsys, *STEP, "--chunks", "5", "--schedule", "1f1b")
    assert code == 2 and "interleaved" in err


def test_sequence_parallelism_moves_what_the_all_reduces_move(capsys):
    """Korthikanti et al. 2022, sec. 4.2.2: an all-reduce is a reduce-scatter and an all-gather, so sequence
    parallelism sends the same bytes per rank."""
    plain = run_json(capsys, *STEP)
    sp = run_json(capsys, *STEP, "--sp")
    assert sp["layout"]["sequence"] is True
    assert sp["comm"]["tensor"]["bytes_per_rank"] == pytest.approx(plain["comm"]["tensor"]["bytes_per_rank"], rel=1e-12)


def test_tp_comm_overlap_hides_the_tensor_communication_under_the_gemms(capsys):
    sp = run_json(capsys, *STEP, "--sp")["estimate"]
    overlapped = run_json(capsys, *STEP, "--sp", "--tp-comm-overlap")["estimate"]
    assert sp["exposed_comm_s"]["tensor"] == pytest.approx(sp["comm_s"]["tensor"])  # Megatron's default: all exposed
    assert overlapped["comm_s"]["tensor"] == pytest.approx(sp["comm_s"]["tensor"])
    assert 0 <= overlapped["exposed_comm_s"]["tensor"] < sp["comm_s"]["tensor"]
    assert overlapped["estimate_s"]["estimate"] < sp["estimate_s"]["estimate"]
    code, _, err = run(capsys, *STEP, "--no-sp", "--tp-comm-overlap")
    assert code == 2 and "--sp" in err


def test_tp_comm_overlap_with_adapters_is_one_line_that_names_the_option_to_drop(capsys):
    """It pipelines sequence parallelism's transfers, which adapters do not run (their gathers are not modelled):
    the message says to drop it, not to add --sp, which adapters refuse."""
    lora = ["time", "llama-3.1-8b", "--gpu", "h100-sxm", "--gpus", "8", "--train", "--global-batch", "8", "--seq", "2048", "--tp", "2", "--lora-rank", "16", "--lora-targets", "q_proj,v_proj"]
    code, _, err = run(capsys, *lora, "--tp-comm-overlap")
    assert code == 2 and "drop --tp-comm-overlap" in err and err.count("\n") == 1
    assert run(capsys, *lora)[0] == 0


def test_the_per_head_decode_kernel_reads_the_cache_once_per_query_head(capsys):
    """Mistral-7B: 32 query heads share 8 key/value heads, so a kernel reading the cache per query head moves
    its bytes 4 times over: the decode step's floor and its estimate grow; GPT-2 (one query head per key/value
    head) does not change."""
    grouped = run_json(capsys, *SERVE)
    per_head = run_json(capsys, *SERVE, "--attention", "fused_per_head")
    assert per_head["attention"] == "fused_per_head"
    assert per_head["first_decode"]["bytes"] > grouped["first_decode"]["bytes"]
    assert per_head["tpot_s"]["estimate"] > grouped["tpot_s"]["estimate"]
    gpt2 = ["time", "gpt2", "--gpu", "h100-sxm", "--infer", "--batch", "8", "--prompt", "128", "--output", "16"]
    assert run_json(capsys, *gpt2, "--attention", "fused_per_head")["first_decode"]["bytes"] == run_json(capsys, *gpt2)["first_decode"]["bytes"]


def test_the_per_head_decode_kernel_is_for_serving(capsys):
    code, _, err = run(capsys, "time", "gpt2", "--gpu", "h100-sxm", "--train", "--global-batch", "8", "--seq", "128", "--attention", "fused_per_head")
    assert code == 2 and "decode kernel" in err and "\n" not in err.strip()
    code, _, err = run(capsys, *SERVE, "--attention", "fused_per_head", "--no-flash")
    assert code == 2 and "contradict" in err
