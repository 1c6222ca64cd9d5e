"""Write the tiny compressed-tensors checkpoints the weight-bytes tests read.

Each is a tiny bf16 Qwen3 (transformers' own model) quantised by compressed-tensors
itself, its linear layers but lm_head taking the scheme, then compressed and saved
as llm-compressor saves a checkpoint (save_pretrained, then the quantization_config
written into config.json). What is kept here is the config.json and the
model.safetensors cut to its header (the u64 length and the JSON that names every
tensor's dtype, shape and byte range): all a reader of the header needs, and a few
kilobytes instead of the weights.

    PYTHONPATH=<worktree> python tests/data/compressed_tensors/make.py

needs torch, transformers and compressed-tensors (the ``oracle`` extra).
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

HERE = Path(__file__).parent

# every linear layer's input a multiple of 128 (compressed-tensors refuses partial groups);
# "odd-kv" has one key-value head of 36, so its zero points fill a partial row of eight (ceil(36 / 8) = 5)
SIZES = {
    "even": dict(hidden_size=256, intermediate_size=384, num_attention_heads=4, num_key_value_heads=2, head_dim=64),
    "odd-kv": dict(hidden_size=256, intermediate_size=384, num_attention_heads=32, num_key_value_heads=1, head_dim=36),
}
# name: (compressed-tensors preset scheme, its format, sizes)
CHECKPOINTS = {
    "w4a16-group128": ("W4A16", "pack-quantized", "even"),
    "w4a16-asym-group128": ("W4A16_ASYM", "pack-quantized", "odd-kv"),
    "nvfp4": ("NVFP4", "nvfp4-pack-quantized", "odd-kv"),
}


def save(name: str, folder: Path) -> None:
    """compressed-tensors' checkpoint ``name`` saved whole (config.json and model.safetensors) into ``folder``."""
    import torch
    import transformers
    from compressed_tensors.compressors import ModelCompressor
    from compressed_tensors.quantization import QuantizationConfig, apply_quantization_config, preset_name_to_scheme

    scheme, fmt, sizes = CHECKPOINTS[name]
    config = dict(model_type="qwen3", architectures=["Qwen3ForCausalLM"], num_hidden_layers=2, vocab_size=101,
                  max_position_embeddings=64, tie_word_embeddings=False, **SIZES[sizes])  # fmt: skip
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.for_model(**config), dtype=torch.bfloat16)
    apply_quantization_config(model, QuantizationConfig(config_groups={"group_0": preset_name_to_scheme(scheme, ["Linear"])}, ignore=["lm_head"]), show_progress=False)
    compressor = ModelCompressor.from_pretrained_model(model, quantization_format=fmt)
    compressor.compress_model(model)
    model.save_pretrained(folder)
    compressor.update_config(folder)


def header_only(path: Path) -> bytes:
    """A safetensors file's first 8 + length bytes: its header, without the tensors' data."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    return data[: 8 + length]


def main() -> None:
    import tempfile

    for name in CHECKPOINTS:
        with tempfile.TemporaryDirectory() as tmp:
            save(name, Path(tmp))
            out = HERE / name
            out.mkdir(exist_ok=True)
            config = json.loads((Path(tmp) / "config.json").read_text())
            (out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
            (out / "model.safetensors").write_bytes(header_only(Path(tmp) / "model.safetensors"))
        print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
