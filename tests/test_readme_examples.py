"""Every ```python, ```sh and ```console block in the README and the guides runs as written.

Python blocks run with ``exec`` in a fresh namespace; shell lines that start
with ``symform`` (``$ symform`` in console blocks) run through the CLI's
``main`` in-process and must exit 0. The output a console block shows under a
command is an excerpt of what the command prints now: its lines appear in the
output in that order (a line ``...`` stands for lines left out, ``…`` inside a
line for text that varies from run to run, such as a time). Both run in a temporary folder that
sees the checkout's ``docs/``, ``formulas/`` and ``hardware/`` (paths as from a
clone), with the document's ```toml blocks that name their file on their first
line (``# my-gpu.toml``) written there; files a command writes (``--out``,
``--plot``, ``> file``) land in that folder. A block that cannot run here
(it installs packages, needs a TeX installation) says so in the Markdown with
``<!-- not run: reason -->`` on the line before it; nothing is skipped silently.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from checks import run

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LANGUAGES = ("python", "sh", "console")
NOT_RUN = re.compile(r"<!--\s*not run:\s*(\S.*?)\s*-->")
OUTPUT_OPTIONS = ("--out", "--plot")


@dataclass(frozen=True)
class Block:
    document: Path
    line: int  # 1-based line of the opening fence
    language: str
    text: str
    not_run: str | None  # the reason given in the Markdown, or None

    @property
    def name(self) -> str:
        return f"{self.document.relative_to(ROOT)}:{self.line}"


def code_blocks(document: Path) -> list[Block]:
    """The fenced blocks of ``document`` in one of LANGUAGES, each with the not-run marker above it, if any."""
    lines = document.read_text(encoding="utf-8").splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(```+)\s*([\w-]*)", lines[i])
        if not fence:
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith(fence.group(1)) and not lines[j].strip("`").strip()), len(lines))
        previous = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        marker = NOT_RUN.search(previous)
        if fence.group(2) in LANGUAGES:
            blocks.append(Block(document, i + 1, fence.group(2), "\n".join(lines[i + 1 : end]), marker.group(1) if marker else None))
        i = end + 1
    return blocks


BLOCKS = [b for d in DOCUMENTS for b in code_blocks(d)]


def shell_commands(block: Block) -> list[str]:
    """The command lines of a sh or console block, continuation lines joined; console output lines dropped."""
    commands, pending = [], ""
    for raw in block.text.splitlines():
        line = raw
        if block.language == "console":
            if not (line.startswith("$ ") or pending):
                continue
            line = line.removeprefix("$ ")
        line = pending + line.strip()
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        pending = ""
        if line:
            commands.append(line)
    return commands


def argv_of(command: str, out_dir: Path) -> list[str]:
    """A ``symform ...`` line as argv for ``main``: comments dropped, written files redirected to ``out_dir``."""
    words = shlex.split(command, comments=True)
    assert words and words[0] == "symform", f"not a symform command (mark the block <!-- not run: reason -->): {command}"
    argv, i = [], 1
    while i < len(words):
        word = words[i]
        if word == ">":  # the command's output to a file: main's stdout is captured anyway
            i += 2
            continue
        if word in OUTPUT_OPTIONS and i + 1 < len(words):
            argv += [word, str(out_dir / Path(words[i + 1]).name)]
            i += 2
            continue
        written = out_dir / Path(word).name
        argv.append(str(written) if "/" not in word and written.is_file() else word)  # a file an earlier line wrote
        i += 1
    return argv


def console_sessions(block: Block) -> list[tuple[str, list[str]]]:
    """(command, the output lines shown under it) for each ``$ `` line of a console block."""
    sessions: list[tuple[str, list[str]]] = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            sessions.append((line[2:], []))
        elif sessions:
            sessions[-1][1].append(line)
    return sessions


def missing_lines(shown: list[str], printed: str) -> list[str]:
    """The shown lines that do not appear, in order, among the printed ones (``…`` matches any text)."""
    lines = [line.rstrip() for line in printed.splitlines()]
    missing, at = [], 0
    for line in shown:
        if line.strip() in ("", "...", "…"):
            continue
        pattern = re.compile(".*".join(re.escape(part) for part in line.rstrip().split("…")) + r"\Z")
        found = next((i for i in range(at, len(lines)) if pattern.match(lines[i])), None)
        if found is None:
            missing.append(line)
        else:
            at = found + 1
    return missing


def test_the_documents_have_blocks_to_run():
    assert len([b for b in BLOCKS if b.not_run is None]) >= 20
    assert {b.document.name for b in BLOCKS} >= {"README.md", "plots.md", "sizing.md"}


def test_every_not_run_marker_gives_a_reason():
    for document in DOCUMENTS:
        for line in document.read_text(encoding="utf-8").splitlines():
            if "not run" in line and line.lstrip().startswith("<!--"):
                assert NOT_RUN.search(line), f"{document.name}: {line!r} gives no reason"


def named_files(document: Path) -> dict[str, str]:
    """The document's ```toml blocks whose first line is a comment naming the file: name -> text."""
    lines = document.read_text(encoding="utf-8").splitlines()
    files = {}
    for i, line in enumerate(lines[:-1]):
        named = re.match(r"^#\s*([\w.-]+\.toml)\s*$", lines[i + 1])
        if line.startswith("```toml") and named:
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            files[named.group(1)] = "\n".join(lines[i + 1 : end]) + "\n"
    return files


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder to run a block in: the checkout's data as from a clone, nothing written into the checkout."""
    def enter(block: Block) -> Path:
        for data in ("docs", "formulas", "hardware"):
            (tmp_path / data).symlink_to(ROOT / data)
        for name, text in named_files(block.document).items():
            (tmp_path / name).write_text(text, encoding="utf-8")
        monkeypatch.chdir(tmp_path)
        return tmp_path

    return enter


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "python"], ids=lambda b: b.name)
def test_python_block_runs(block, workdir):
    if block.not_run:
        pytest.skip(f"marked in the Markdown: {block.not_run}")
    workdir(block)
    code = compile(block.text, block.name, "exec")
    exec(code, {"__name__": "__readme__"})


def run_commands(block: Block, workdir, capsys, commands: list[str]) -> list[str]:
    """Each command's stdout; every command must exit 0 (a block marked not run is skipped, with its reason)."""
    if block.not_run:
        pytest.skip(f"marked in the Markdown: {block.not_run}")
    assert commands, f"{block.name}: no command"
    out_dir = workdir(block) / "out"
    out_dir.mkdir()
    outputs = []
    for command in commands:
        code, out, err = run(capsys, *argv_of(command, out_dir))
        assert code == 0 and "Traceback" not in err, f"{block.name}: {command}\n{err}"
        outputs.append(out)
    return outputs


CHUNK = 10  # commands a test runs: the README's long block of commands in parts, so that no test runs for long


def _chunks(blocks: list[Block]) -> list[tuple[Block, int]]:
    return [(b, start) for b in blocks for start in range(0, max(len(shell_commands(b)), 1), CHUNK)]


@pytest.mark.parametrize(("block", "start"), _chunks([b for b in BLOCKS if b.language == "sh"]), ids=lambda v: v.name if isinstance(v, Block) else str(v))
def test_shell_block_runs(block, start, workdir, capsys):
    run_commands(block, workdir, capsys, shell_commands(block)[start : start + CHUNK])


@pytest.mark.parametrize("block", [b for b in BLOCKS if b.language == "console"], ids=lambda b: b.name)
def test_console_block_shows_what_the_command_prints(block, workdir, capsys):
    sessions = console_sessions(block)
    outputs = run_commands(block, workdir, capsys, [command for command, _ in sessions])
    for (command, shown), out in zip(sessions, outputs):
        missing = missing_lines(shown, out)
        assert not missing, f"{block.name}: {command} no longer prints (in this order):\n" + "\n".join(missing)


def test_console_excerpts_are_checked_line_by_line():
    printed = "a header\n1,320 candidates screened in 612 ms\nrow 1\nrow 2\nfooter"
    assert missing_lines(["a header", "1,320 candidates screened in … ms", "...", "footer"], printed) == []
    assert missing_lines(["row 2", "row 1"], printed) == ["row 1"]  # order counts
    assert missing_lines(["1,320 candidates screened in 546 ms"], printed) == ["1,320 candidates screened in 546 ms"]
    assert missing_lines(["row"], printed) == ["row"]  # whole lines, not prefixes


def test_the_readme_memory_chart_shows_bars_that_fit_and_bars_that_do_not(capsys):
    """The README's chart is worth drawing: its setup fits some micro-batches on the device and not others."""
    block = next(b for b in BLOCKS if b.document.name == "README.md" and "symform plot memory" in b.text)
    command = next(c for c in shell_commands(block) if c.startswith("symform plot memory"))
    argv = argv_of(command, Path("unused"))
    words = argv[3:]  # plot memory MODEL --option value ... --switch
    options = {w: (words[i + 1] if i + 1 < len(words) and not words[i + 1].startswith("--") else None) for i, w in enumerate(words) if w.startswith("--")}
    setup = [w for k, v in options.items() if k not in ("--batch", "--seq", "--out") for w in (k, v) if w is not None]
    verdicts = set()
    for batch in options["--batch"].split(","):
        for seq in options["--seq"].split(","):
            code, out, err = run(capsys, "memory", argv[2], "--train", "--batch", batch, "--seq", seq, *setup, "--json")
            assert code == 0, err
            verdicts.add(json.loads(out)["device"]["fits"])
    assert verdicts == {True, False}
