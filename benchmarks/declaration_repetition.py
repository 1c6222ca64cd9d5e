"""How much the declarations repeat themselves: the share of non-blank lines of the family files (bases/ included)
that occur verbatim in another family file, and the components whose names cite a model.

usage: python benchmarks/declaration_repetition.py [CHECKOUT]   (default: this checkout)
"""

import glob
import sys
import tomllib

MODELS = ("gemma", "llama", "qwen", "mistral", "mixtral", "deepseek", "gpt2", "gpt_oss", "olmo", "phi", "apertus", "ernie",
          "exaone", "glm", "minimax", "nemotron", "modernbert", "bert", "starcoder", "smollm", "seed")


def main(root: str = ".") -> None:
    files = sorted(glob.glob(f"{root}/formulas/families/**/*.toml", recursive=True))
    lines = {f: [line.strip() for line in open(f, encoding="utf-8") if line.strip()] for f in files}
    total = repeated = 0
    for name, own in lines.items():
        others = set().union(*(set(v) for k, v in lines.items() if k != name))
        total += len(own)
        repeated += sum(line in others for line in own)
    print(f"family files: {total} non-blank lines, {repeated} occur in another family file ({100 * repeated / total:.1f} %)")
    components = {}
    for path in sorted(glob.glob(f"{root}/formulas/components/*.toml")):
        with open(path, "rb") as f:
            components.update(tomllib.load(f))
    named = sorted(c for c in components if any(m in c for m in MODELS))
    print(f"components: {len(components)}, named after a model: {len(named)}: {' '.join(named)}")


if __name__ == "__main__":
    main(*sys.argv[1:])
