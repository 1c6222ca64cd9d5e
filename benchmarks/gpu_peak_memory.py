"""Measure a real training step's peak memory on a GPU and print symform's prediction beside it.

For whoever has a CUDA device (symform's tests never need one): a small Llama (random weights, no download) trains
one bf16 AdamW step under two frameworks' settings, and the script prints torch.cuda.max_memory_allocated and
max_memory_reserved beside `symform memory --train` for the same setup:

  eager       transformers' modules, SDPA attention, no recomputation        (--framework eager)
  torchtitan  the same with torchtitan's per-op selective checkpointing      (--framework torchtitan --recompute selective)
              policy on every decoder layer (every second aten.mm and the attention kernel saved)

    python benchmarks/gpu_peak_memory.py                      # on cuda:0
    python benchmarks/gpu_peak_memory.py --batch 4 --seq 2048 --json
    python benchmarks/gpu_peak_memory.py --device cpu         # a smoke run of the same code, no memory figures

A measurement, not a test: it never asserts and exits 0 once it has printed.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import defaultdict
from pathlib import Path

import torch

CONFIG = {  # a Llama 3 shape, small enough for any GPU: GQA 4:1, SwiGLU, tied nothing
    "model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 2048, "intermediate_size": 8192,
    "num_hidden_layers": 8, "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32768,
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "tie_word_embeddings": False,
    "attention_bias": False, "mlp_bias": False, "torch_dtype": "bfloat16",
}  # fmt: skip


def torchtitan_policy():
    """torchtitan's _apply_op_sac policy (torchtitan/distributed/activation_checkpoint.py): save every aten.mm but the
    second of each pair and the attention kernels' results, recompute the rest."""
    from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

    save = {torch.ops.aten.mm.default, torch.ops.aten._scaled_dot_product_efficient_attention.default, torch.ops.aten._scaled_dot_product_flash_attention.default}

    def context():
        meta = defaultdict(int)

        def policy(ctx, func, *args, **kwargs):
            key = f"{'recompute' if ctx.is_recompute else 'forward'}_mm_count"
            if func == torch.ops.aten.mm.default:
                meta[key] += 1
            keep = func in save and not (func == torch.ops.aten.mm.default and meta[key] % 2 == 0)
            return CheckpointPolicy.MUST_SAVE if keep else CheckpointPolicy.PREFER_RECOMPUTE

        return create_selective_checkpoint_contexts(policy)

    return context


def checkpointed(layer: torch.nn.Module, context_fn) -> torch.nn.Module:
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    return checkpoint_wrapper(layer, context_fn=context_fn, preserve_rng_state=False)


def measure(setting: str, batch: int, seq: int, device: str) -> dict[str, int | None]:
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**{k: v for k, v in CONFIG.items() if k not in ("model_type", "architectures")}, attn_implementation="sdpa"))
    model = model.to(device=device, dtype=torch.bfloat16)
    if setting == "torchtitan":
        context = torchtitan_policy()
        model.model.layers = torch.nn.ModuleList(checkpointed(layer, context) for layer in model.model.layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=False)  # bf16 states, as --precision bf16
    ids = torch.randint(0, CONFIG["vocab_size"], (batch, seq), device=device)

    def step():
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)  # gradients stay allocated between steps, as symform counts them

    step()  # the optimizer's states and the gradients exist from here on
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    step()
    if not device.startswith("cuda"):
        return {"max_allocated": None, "max_reserved": None}
    torch.cuda.synchronize()
    return {"max_allocated": torch.cuda.max_memory_allocated(), "max_reserved": torch.cuda.max_memory_reserved()}


def predict(setting: str, batch: int, seq: int) -> dict[str, int]:
    from symform import load
    from symform.analysis.memory.memory import Training, training_memory

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "config.json"
        path.write_text(json.dumps(CONFIG))
        model = load(str(path))
        recompute = "selective" if setting == "torchtitan" else "none"
        report = training_memory(model, batch=batch, seq=seq, setup=Training(precision="bf16", recompute=recompute, flash=True, framework=setting))
    values = {k: int(v) for k, v in report.values.items()}
    allocated = sum(v for k, v in values.items() if k not in ("cuda_context", "allocator_reserve"))
    return {"allocated": allocated, "reserved": allocated + values.get("allocator_reserve", 0), "categories": values}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--seq", type=int, default=4096)
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: run on a GPU machine, or --device cpu for a smoke run without memory figures")
        return
    rows = []
    for setting in ("eager", "torchtitan"):
        measured, predicted = measure(setting, args.batch, args.seq, args.device), predict(setting, args.batch, args.seq)
        rows.append({"setting": setting, "batch": args.batch, "seq": args.seq, "measured": measured, "symform": predicted})
    if args.json:
        print(json.dumps({"device": torch.cuda.get_device_name() if args.device.startswith("cuda") else args.device, "rows": rows}))
        return
    print(f"{'setting':<11} {'measured alloc GiB':>18} {'symform GiB':>12} {'measured reserved GiB':>21} {'symform GiB':>12}")
    for row in rows:
        m, p = row["measured"], row["symform"]
        show = (lambda v: f"{v / 2**30:.3f}" if v is not None else "n/a")  # noqa: E731
        print(f"{row['setting']:<11} {show(m['max_allocated']):>18} {show(p['allocated']):>12} {show(m['max_reserved']):>21} {show(p['reserved']):>12}")


if __name__ == "__main__":
    main()
