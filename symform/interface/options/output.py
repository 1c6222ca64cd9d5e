"""Writing files users name (charts, reference pages): every filesystem failure as one line."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from ...engine.budget import quoted
from ...engine.errors import OutputError


@contextmanager
def writing(path: str | Path, *, directory: bool = False) -> Iterator[Path]:
    """The target as a Path; an OSError while writing it (a directory of that name, /proc, no permission,
    a name too long, a path under a file) becomes an OutputError naming the path. ``directory``: the
    target is a folder to write files into."""
    target = Path(path)
    try:
        if target.is_dir() and not directory:
            raise OutputError(f"{quoted(str(target))} is a directory; give a file name")
        yield target
    except OSError as e:
        reason = e.strerror or e.__class__.__name__
        raise OutputError(f"{quoted(str(target))}: cannot write ({reason}); give a path in a directory you can write to") from None
