"""How much the declarations repeat themselves: the share of non-blank lines of the family files (bases/ included)
that occur verbatim in another family file; the components whose names cite a model, and of those the ones that
the families of another model reach (a name that says less than the truth about where the layer is used).

A model's name is a bundled family file's name (gpt2, gpt_neo, roberta ...) or one of MODELS (lines of models
that no single family file names: qwen, llama ...). A component cites it when the name's words (split at "_")
hold the model's words in a row, the model's last word possibly followed by a version number (qwen → qwen3,
gemma → gemma4), the longest such model counting: qwen2_5_vision cites qwen2_5, not qwen. A family is that model
or a variant of it when its name is the model's name or starts with the model's name and "_" (gemma4_text, llama4_vl,
qwen2_5_vl); every other family is another model.

A family reaches its root and the components its choices name (with its extends chain applied, as symform reads
it), and every component those extend, use as a part, bind to a part's slot (with = { mlp = "@moe" }) or name as
a slot's default (attention = @gqa_attention) where the family chooses no component for a slot of that name,
transitively. A part that repeats 0 times by default (GPT-2's cross-attention) is reached all the same: the
declaration names it.

usage: python benchmarks/declaration_repetition.py [CHECKOUT]   (default: this checkout)
"""

import glob
import re
import sys
import tomllib
from pathlib import Path

MODELS = ("gemma", "llama", "qwen", "mistral", "mixtral", "deepseek", "gpt2", "gpt_oss", "olmo", "phi", "apertus", "ernie",
          "exaone", "glm", "minimax", "nemotron", "modernbert", "bert", "starcoder", "smollm", "seed", "clip", "siglip", "pixtral")
# family files named after the layer kind the model introduced, which every hybrid names it by (the Mamba-2 mixer)
LAYER_KINDS = ("mamba2",)


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
    families = sorted(Path(f).stem for f in glob.glob(f"{root}/formulas/families/*.toml"))
    models = sorted({*MODELS, *families} - set(LAYER_KINDS))
    cited = {c: m for c in components if (m := cited_model(c, models))}
    reach = reached_by(root, families, components)
    foreign = {c: sorted(f for f in reach.get(c, ()) if not is_variant(f, m)) for c, m in cited.items()}
    foreign = {c: f for c, f in foreign.items() if f}
    print(f"components: {len(components)}, named after a model: {len(cited)}: {' '.join(sorted(cited))}")
    print(f"named after a model and reached by another model's families: {len(foreign)}")
    for c in sorted(foreign):
        print(f"  {c} ({cited[c]}): {' '.join(foreign[c])}")


def cited_model(component: str, models: list[str]) -> str | None:
    """The longest model whose words the component's name holds in a row (see the module's doc), else None."""
    words = component.split("_")
    best = None
    for model in models:
        want = model.split("_")
        for i in range(len(words) - len(want) + 1):
            got = words[i:i + len(want)]
            last = got[-1]
            if got[:-1] == want[:-1] and (last == want[-1] or re.fullmatch(re.escape(want[-1]) + r"\d+", last)):
                name = "_".join(got)
                if i + len(want) < len(words) and words[i + len(want)].isdigit():  # qwen2 _5: the version goes on
                    name += "_" + words[i + len(want)]
                if best is None or len(name) > len(best):
                    best = name
    return best


def is_variant(family: str, model: str) -> bool:
    return family == model or family.startswith(model + "_")


def reached_by(root: str, families: list[str], components: dict) -> dict[str, set[str]]:
    """component -> the families that reach it."""
    sys.path.insert(0, str(Path(root).resolve()))
    from symform.engine.language.family_files import family_table

    edges = {c: component_references(table, components) for c, table in components.items()}
    reach: dict[str, set[str]] = {}
    for family in families:
        table = family_table(Path(root, "formulas", "families", f"{family}.toml"))
        chosen = {slot: choice_names(choice) for slot, choice in table.get("choose", {}).items()}
        todo = [table["root"], *(n for names in chosen.values() for n in names)]
        seen: set[str] = set()
        while todo:
            c = todo.pop()
            if c in seen or c not in components:
                continue
            seen.add(c)
            fixed, defaults = edges[c]
            todo.extend(fixed)
            todo.extend(n for slot, n in defaults.items() if slot not in chosen)  # a chosen slot's default never runs
        for c in seen:
            reach.setdefault(c, set()).add(family)
    return reach


def choice_names(choice) -> list[str]:
    return [choice] if isinstance(choice, str) else list(choice.get("cases", {}).values())


def component_references(table: dict, components: dict) -> tuple[set[str], dict[str, str]]:
    """The components a declaration extends, uses as a part or binds with @name, and its slots' defaults
    (slot -> component; a family that chooses the slot replaces it, passed down by name)."""
    args = [a for a in table.get("args", []) if isinstance(a, str)]
    defaults = {m[1]: m[2] for a in args if (m := re.fullmatch(r"(\w+)\s*=\s*@(\w+)", a.strip()))}
    found = {table["extends"]} if "extends" in table else set()
    found |= {p["use"] for p in table.get("parts", []) if not p.get("use", "@").startswith("@")}
    rest = {k: v for k, v in table.items() if k != "args"}
    found |= {n for text in strings(rest) for n in re.findall(r"@(\w+)", text) if n in components}
    return found, defaults


def strings(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


if __name__ == "__main__":
    main(*sys.argv[1:])
