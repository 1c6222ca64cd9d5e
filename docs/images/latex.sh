#!/usr/bin/env bash
# The pictures in docs/latex.md: each kind of standalone document `symform latex` writes, compiled with
# pdflatex and its first page rendered with pdftoppm (poppler-utils), cropped to the text.
# Run from the repository root: bash docs/images/latex.sh
set -euo pipefail
out="$(pwd)/docs/images"
work="$(mktemp -d)"
cd "$work"
symform() { python -m symform "$@"; }
symform latex train-flops llama-3-8b --derivation --seq 4096 --standalone > latex-dense.tex
symform latex active-params deepseek-v3 --derivation --standalone > latex-moe-mla.tex
symform latex active-params nemotron-h-8b --derivation --standalone > latex-hybrid.tex
symform latex forward-flops deepseek-v3 --blocks --leading --batch 1 --seq 4096 --standalone > latex-blocks.tex
symform latex --compare deepseek-v3 qwen3-32b --standalone > latex-compare.tex
symform latex --formulas qwen3-32b deepseek-v3 mixtral-8x7b gpt-oss-120b nemotron-h-8b --standalone > latex-appendix.tex
symform latex --paper deepseek-v2 --standalone > latex-paper.tex
for tex in latex-*.tex; do
  name="${tex%.tex}"
  pdflatex -interaction=nonstopmode -halt-on-error "$tex" > /dev/null
  pdflatex -interaction=nonstopmode -halt-on-error "$tex" > /dev/null  # a longtable settles its widths on the second run
  pdftoppm -r 90 -f 1 -l 1 -singlefile -png "$name.pdf" "$name"
  python - "$name.png" "$out/$name.png" <<'PY'
import sys
from PIL import Image, ImageChops, ImageOps
page = Image.open(sys.argv[1]).convert("L")
page = page.crop((0, 0, page.width, int(page.height * 0.92)))  # without the page number
box = ImageChops.invert(page).getbbox()  # the printed part of the page
ImageOps.expand(page.crop(box), border=12, fill=255).save(sys.argv[2], optimize=True)
PY
done
