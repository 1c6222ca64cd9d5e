"""Argument types the commands share: exact numbers and whole numbers with a lower bound, refused in one line.

Every number typed on a command line goes through ``exact_number``: its digits
and exponent are checked against symform's number budget before any arithmetic,
so ``1e100000000`` is refused at once instead of being computed.
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from typing import Sequence

from ...engine.budget import number_from_text, quoted
from ...engine.errors import ConfigError


# what derive and latex take as options: the workload and the parallel layout (training_bytes), in their order
DERIVE_WORKLOAD = ("batch", "seq", "source_seq", "tokens", "tp", "pp", "dp")


def exact_number(text: str) -> int | Fraction:
    """4096, 0.5, 1.5e12 or 1/2: an int when whole, else a Fraction."""
    try:
        value = number_from_text(text, "number")
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("number: ")) from None
    return int(value) if value.denominator == 1 else value


def _whole(text: str) -> int:
    try:
        value = exact_number(text)
    except argparse.ArgumentTypeError as e:
        if "budget" in str(e):
            raise
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a whole number") from None
    if not isinstance(value, int):
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a whole number")
    return value


def positive_int(text: str) -> int:
    value = _whole(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{quoted(text)} must be positive")
    return value


def non_negative_int(text: str) -> int:
    value = _whole(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{quoted(text)} must be 0 or more")
    return value


def _float(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a number") from None


def positive_float(text: str) -> float:
    """A measured or priced quantity (seconds, dollars, requests/s): a float, since it is data, not a size."""
    value = _float(text)
    if not value > 0 or value == float("inf"):  # `not >` also refuses nan
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a positive finite number")
    return value


def non_negative_float(text: str) -> float:
    """An exponent or a weight that may be 0 (a Zipf skew): finite, 0 or more."""
    value = _float(text)
    if not 0 <= value < float("inf"):  # also refuses nan
        raise argparse.ArgumentTypeError(f"{quoted(text)} is not a finite number of 0 or more")
    return value


def fraction(text: str) -> float:
    """A share or a rate from 0 to 1 (memory utilisation, an acceptance rate)."""
    value = _float(text)
    if not 0 <= value <= 1:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{quoted(text)} must be from 0 to 1")
    return value


ATTENTION = ("sdpa", "eager")


def attention_arguments(p, kernels: Sequence[tuple[str, str]] = ()) -> None:
    """The attention kernels a command assumes, defined once for every command: --attention sdpa (FlashAttention
    kernels, the default, as transformers, training frameworks and serving engines run) or eager (score matrices
    materialised, as PyTorch eager keeps them), and the same as --flash / --no-flash; ``kernels``: (name, what it
    is) of further kernels a command times."""
    more = "".join(f"; {name}: {what}" for name, what in kernels)
    p.add_argument("--attention", choices=(*ATTENTION, *(name for name, _ in kernels)), default=None, help="attention kernels: sdpa (FlashAttention, the default, as transformers and serving engines run) or eager (scores materialised, as PyTorch eager keeps them)" + more)
    p.add_argument("--flash", action=argparse.BooleanOptionalAction, default=None, help="the same as --attention sdpa; --no-flash: as --attention eager")


def uses_flash(args: argparse.Namespace) -> bool:
    """True for FlashAttention/SDPA (the default), False for eager; --attention and --flash/--no-flash contradicting refused."""
    if args.attention is not None and args.flash is not None and args.flash != (args.attention != "eager"):
        given = "--flash" if args.flash else "--no-flash"
        raise ConfigError(f"{given} and --attention {args.attention} contradict each other; drop one")
    if args.attention is not None:
        return args.attention != "eager"
    return True if args.flash is None else args.flash


def given_once(names: Sequence[str], flag: str) -> None:
    """A name given twice (--set d_model=1024 --set d_model=2048) is refused: the later one would
    silently win."""
    seen: set[str] = set()
    for name in names:
        if name in seen:
            raise ConfigError(f"{flag} {name} is given more than once; give each name once")
        seen.add(name)
