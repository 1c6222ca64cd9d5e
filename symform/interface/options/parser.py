"""The command line's parser: one line and exit status 2 for every mistake, the nearest flag named;
NAME=VALUE settings. The ``symform`` command and the verbs that build a parser of their own use it."""

from __future__ import annotations

import argparse
import difflib
from typing import TYPE_CHECKING

from .cli_args import exact_number
from ...engine.budget import quoted
from ...engine.language.names import is_identifier

if TYPE_CHECKING:
    from ...engine.algebra.evaluate import Number

EXIT_BAD_INPUT = 2

_ARGV: list[str] = []  # the command line being parsed: a parser's error looks in it for a flag no parser knows


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2, as for every other bad input
        verb = self._verb_parser()
        if verb is not None:  # "unrecognized arguments" of a verb's flag: that verb's help tells the flags
            return verb.error(message)
        message = self._unknown_flag() or message  # before "the following arguments are required": the likelier slip
        self.exit(EXIT_BAD_INPUT, f"symform: error: {message} (see {self.prog} --help)\n")

    def _verb_parser(self) -> argparse.ArgumentParser | None:
        """For the top-level parser, the parser of the verb on the command line."""
        if self.prog != "symform" or not self._subparsers:
            return None
        choices = self._subparsers._group_actions[0].choices
        return next((choices[a] for a in _ARGV if a in choices), None)

    def _unknown_flag(self) -> str | None:
        known = _flags(self)
        for token in _ARGV:
            flag = token.split("=", 1)[0]
            if not flag.startswith("--") or flag == "--" or flag in known or sum(k.startswith(flag) for k in known) == 1:
                continue
            near = ["--" + n for n in difflib.get_close_matches(flag[2:], sorted(k[2:] for k in known), n=3, cutoff=0.75)]
            return f"unknown option {quoted(flag)}" + (f"; did you mean {' or '.join(near)}?" if near else "")
        return None


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    """Every --flag the parser and the parsers below it take."""
    found = {s for s in parser._option_string_actions if s.startswith("--")}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _flags(sub)
    return found


def _assignment(text: str) -> tuple[str, Number]:
    name, eq, value = text.partition("=")
    if not eq or not name.strip():
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not NAME=VALUE")
    return name.strip(), exact_number(value)


def _setting(text: str) -> tuple[str, Number | str]:
    """NAME=NUMBER for a size or option, NAME=COMPONENT for a slot (e.g. attention=mla_attention_absorbed)."""
    name, eq, value = text.partition("=")
    if eq and is_identifier(value.strip().removeprefix("@")):
        return name.strip(), value.strip().removeprefix("@")
    return _assignment(text)
