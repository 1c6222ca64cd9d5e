"""The one error family symform raises: every message is one line naming the problem and the fix."""


class SymformError(Exception):
    """Base class of every error symform raises on bad input."""


class ExpressionError(SymformError):
    """An expression string is malformed, refers to unknown names or is not allowed."""


class DeclarationError(SymformError):
    """A component or family declaration is inconsistent."""


class ConfigError(SymformError):
    """A model configuration (config.json, preset or bindings) is missing, malformed or invalid."""


class EvaluationError(SymformError):
    """An expression cannot be evaluated as asked (free symbols left, bad values)."""


def describe_validation(error) -> str:
    """The first problem a validation found (symform's schema or pydantic), as 'field.path: message' (a message symform's own check raised, without
    the "Value error, " before it)."""
    first = error.errors()[0]
    where = ".".join(str(p) for p in first["loc"])
    message = first["msg"].removeprefix("Value error, ")
    return f"{where}: {message}" if where else message


class BudgetError(SymformError):
    """A request would cost more work or memory than symform allows (symform.engine.budget names each limit)."""


class OutputError(SymformError):
    """A file symform was asked to write cannot be written there."""


class FileBudgetError(BudgetError, ConfigError):
    """A file too large or nested too deep to read: a budget, and a bad configuration file."""
