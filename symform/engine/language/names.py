"""What a name in symform's files must look like: checked before any expression is built, so without sympy."""


def is_identifier(name: object) -> bool:
    """An ASCII identifier: what names of symbols, components, arguments and parts must be."""
    return isinstance(name, str) and name.isascii() and name.isidentifier()
