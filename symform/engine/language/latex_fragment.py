"""The grammar a symbol's LaTeX letter must follow, so that a data file cannot steer pdflatex.

A symbol's ``latex`` text goes verbatim into every formula symform prints and
into ``--standalone`` documents. It is checked when the vocabulary loads: ASCII
letters, digits, sub- and superscripts, braces, a little punctuation, and a
whitelist of commands (Greek letters, font switches, accents, ``\\text`` with
plain text). Everything else (``\\input``, ``\\write``, ``\\def``, ``^^``
character codes, ``%``, ``#``, ``$``, unbalanced braces) is refused.
"""

from __future__ import annotations

import re

MAX_LENGTH = 80

_GREEK = (
    "alpha beta gamma delta epsilon varepsilon zeta eta theta vartheta iota kappa lambda mu nu xi pi varpi rho varrho "
    "sigma varsigma tau upsilon phi varphi chi psi omega Gamma Delta Theta Lambda Xi Pi Sigma Upsilon Phi Psi Omega"
).split()
_COMMANDS = frozenset(
    _GREEK
    + "mathrm mathit mathbf mathsf mathtt mathcal mathbb boldsymbol text textrm textit operatorname".split()
    + "hat bar tilde vec dot ddot check breve widehat widetilde overline underline prime ell hbar imath jmath".split()
    + "cdot times ast star dagger circ ldots cdots max min log exp infty partial nabla".split()
)
_TOKEN = re.compile(r"\\([A-Za-z]+)|\\([,;:! _{}])|([A-Za-z0-9 _^{}()\[\]'+\-*/|.,=<>:;])")


def latex_problem(text: str) -> str | None:
    """Why ``text`` is not a safe LaTeX fragment, or None when it is."""
    if not isinstance(text, str) or not text.strip():
        return "it is empty; give the letter, e.g. 'd_{ff}'"
    if len(text) > MAX_LENGTH:
        return f"it is longer than {MAX_LENGTH} characters"
    if not text.isascii():
        return "it has non-ASCII characters; use commands such as \\alpha"
    if "^^" in text:
        return "'^^' is TeX's character-code escape; write the character itself"
    depth = 0
    position = 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            return f"{text[position]!r} is not allowed; use letters, digits, _ ^ {{ }} and commands such as \\mathrm"
        command = match.group(1)
        if command is not None and command not in _COMMANDS:
            return f"the command \\{command} is not allowed; allowed: Greek letters, \\mathrm, \\text, accents and a few operators"
        char = match.group(3)
        depth += 1 if char == "{" else -1 if char == "}" else 0
        if depth < 0:
            return "its braces do not balance"
        position = match.end()
    if depth != 0:
        return "its braces do not balance"
    return None
