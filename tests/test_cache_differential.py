"""A cache never changes an answer: random sequences of commands, each run in a fresh process sharing one
cache directory, print exactly what the same command prints with SYMFORM_CACHE=off.

The state machine draws commands from a small pool on purpose (two presets, a few sizes and options) so that
a sequence often runs one command on a model and then the same command on the model resized: the order in
which a cache keyed by too little gives the first model's answer to the second.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings, strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from symform.engine.store import derivation, disk_cache
from symform.engine.graph import model as model_module
from symform.interface.cli.cli import main

PRESETS = {"qwen3-0.6b": ("n_layers=4", "d_ff=1024"), "mixtral-8x7b": ("n_experts=4", "top_k=1", "n_layers=4")}
COMMANDS = {
    "params": [],
    "flops": ["--batch", "2", "--seq", "128"],
    "memory-train": ["--train", "--batch", "1", "--seq", "1024", "--recompute", "selective"],
    "memory-infer": ["--infer", "--batch", "4", "--seq", "1", "--past", "1023"],
    "time-decode": ["--gpu", "h100-sxm", "--infer", "--batch", "4", "--prompt", "512", "--output", "64"],
    "time-decode-skewed": ["--gpu", "h100-sxm", "--gpus", "8", "--tp", "8", "--infer", "--batch", "4", "--prompt", "512", "--output", "64", "--expert-skew", "1.5"],
    "roofline-decode": ["--gpu", "h100-sxm", "--phase", "decode", "--batch", "8", "--context", "2048"],
    "derive": ["--assume", "standard", "--leading"],
}
VERB = {"memory-train": "memory", "memory-infer": "memory", "time-decode": "time", "time-decode-skewed": "time", "roofline-decode": "roofline", "derive": "derive"}


def command_line(command: str, preset: str, setting: str | None, accounting: str | None) -> list[str]:
    verb = VERB.get(command, command)
    head = [verb, "params", preset] if verb == "derive" else [verb, preset]
    return [*head, *COMMANDS[command], *(["--set", setting] if setting else []), *(["--accounting", accounting] if accounting else [])]


def run(argv: list[str], cache: Path | None) -> tuple[int, str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SYMFORM_CACHE")}
    env.update({"SYMFORM_CACHE_DIR": str(cache)} if cache is not None else {"SYMFORM_CACHE": "off"})
    done = subprocess.run([sys.executable, "-m", "symform", *argv], env=env, capture_output=True, text=True, timeout=110)
    return done.returncode, done.stdout, done.stderr


_UNCACHED: dict[tuple[str, ...], tuple[int, str, str]] = {}


def uncached(argv: list[str]) -> tuple[int, str, str]:
    key = tuple(argv)
    if key not in _UNCACHED:
        _UNCACHED[key] = run(argv, None)
    return _UNCACHED[key]


commands = st.sampled_from(sorted(COMMANDS))
presets = st.sampled_from(sorted(PRESETS))


@contextlib.contextmanager
def nothing_derived_yet():
    """As a fresh process: symform's in-process memos (derivations, shared structures) empty while inside,
    given back afterwards."""
    saved = [(holder, name, getattr(holder, name)) for holder, name in ((derivation, "_MEMO"), (model_module, "_STRUCTURES"), (model_module, "_GRAPHS"))]
    for holder, name, value in saved:
        setattr(holder, name, type(value)())
    try:
        yield
    finally:
        for holder, name, value in saved:
            setattr(holder, name, value)


def in_process(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(argv)
    return status, out.getvalue(), err.getvalue()


VARIANTS = [(preset, setting) for preset, sizes in PRESETS.items() for setting in (None, *sizes)]


_FRESH: dict[tuple[str, ...], tuple[int, str, str]] = {}


def fresh_process(argv: list[str]) -> tuple[int, str, str]:
    """What the command prints in a process that derived nothing before it (worked out once per command)."""
    if tuple(argv) not in _FRESH:
        with nothing_derived_yet():
            _FRESH[tuple(argv)] = in_process(argv)
    return _FRESH[tuple(argv)]


class OneProcess(RuleBasedStateMachine):
    """Commands one after another in one process (what a notebook or the web page does): each prints what it
    prints in a process that derived nothing before it. A step runs one command on every preset and resized
    model of the pool, in a random order: a memo keyed by too little gives one model's answer to another."""

    @rule(command=commands, order=st.permutations(VARIANTS), eager=st.booleans())
    def a_command_prints_what_a_fresh_process_prints(self, command, order, eager):
        for preset, setting in order:
            argv = command_line(command, preset, setting, "eager" if eager and command.startswith("memory") else None)
            assert in_process(argv) == fresh_process(argv), " ".join(argv)


def test_random_command_sequences_in_one_process_print_what_fresh_processes_print(monkeypatch):
    monkeypatch.setenv("SYMFORM_CACHE", "off")  # the disk cache has its own test below: here, what one process keeps
    OneProcess.TestCase.settings = settings(max_examples=3, stateful_step_count=8, deadline=None, suppress_health_check=list(HealthCheck))
    OneProcess.TestCase().runTest()


class SharedCache(RuleBasedStateMachine):
    @initialize()
    def fresh_directory(self):
        import tempfile

        self.cache = Path(tempfile.mkdtemp(prefix="symform-differential-"))

    @rule(command=commands, preset=presets, resized=st.booleans(), which=st.integers(0, 2), eager=st.booleans())
    def a_command_prints_what_it_prints_uncached(self, command, preset, resized, which, eager):
        sizes = PRESETS[preset]
        argv = command_line(command, preset, sizes[which % len(sizes)] if resized else None, "eager" if eager and command.startswith("memory") else None)
        assert run(argv, self.cache) == uncached(argv), " ".join(argv)

    def teardown(self):
        for f in disk_cache.info_at(self.cache)["files"]:  # every store within its bound
            assert f["bytes"] <= disk_cache.MAX_BYTES


def test_random_command_sequences_in_fresh_processes_sharing_a_cache_print_what_they_print_uncached():
    SharedCache.TestCase.settings = settings(max_examples=1, stateful_step_count=8, deadline=None, suppress_health_check=list(HealthCheck))
    SharedCache.TestCase().runTest()


def test_a_resized_mixture_of_experts_after_its_default_prints_its_own_tpot(tmp_path):
    """The order that once printed 2.507 ms where 2.104 ms is right: the default Mixtral, then 4 experts."""
    first = command_line("time-decode-skewed", "mixtral-8x7b", None, None)
    second = command_line("time-decode-skewed", "mixtral-8x7b", "n_experts=4", None)
    run(first, tmp_path)
    assert run(second, tmp_path) == uncached(second)


def test_processes_writing_one_fresh_cache_at_once_print_what_they_print_uncached(tmp_path):
    argvs = [command_line(c, p, None, None) for c, p in (("params", "qwen3-0.6b"), ("memory-train", "mixtral-8x7b"), ("flops", "qwen3-0.6b"))]
    with ThreadPoolExecutor(len(argvs)) as pool:
        cached = list(pool.map(lambda argv: run(argv, tmp_path), argvs))
    assert cached == [uncached(argv) for argv in argvs]
    assert [run(argv, tmp_path) for argv in argvs] == cached  # and read back from what they wrote together


def test_a_damaged_store_is_rebuilt_never_trusted(tmp_path):
    argv = command_line("params", "qwen3-0.6b", None, None)
    run(argv, tmp_path)
    stores = sorted(tmp_path.glob("*.json"))
    assert [s.name.split("-")[0] for s in stores] == ["expressions", "tables"]
    for store, damage in zip(stores, ("cut short", "edited without its hash")):
        text = store.read_text()
        store.write_text(text[: len(text) // 2] if damage == "cut short" else text.replace("1", "2", 5))
    assert run(argv, tmp_path) == uncached(argv)
    # written again, whole: each reads back (its hash holds) with entries in it. Read as files, not through this
    # process's store names: the command may run another copy of symform's code (a checkout beside an install)
    assert all(disk_cache._read(store) for store in stores)
