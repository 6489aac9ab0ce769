"""Errors that the command-line layer turns into one clear line and a non-zero exit."""


class ScalescopeError(Exception):
    """Base class: a user-facing problem whose message is complete on one line."""


class ConfigError(ScalescopeError):
    """A config file, an override or a cluster profile is wrong; nothing was started."""


class TopologyError(ScalescopeError):
    """The allocation or the machine does not match what the config asks for."""


class SameOnEveryRankError(ScalescopeError):
    """Found by every rank of a run alike (a check of the loaders inside ``fit``): only
    rank 0 prints it, so a run of any size says it once."""

    def __init__(self, message: str, *, rank: int) -> None:
        super().__init__(message)
        self.rank = rank


def first_line(exc: BaseException) -> str:
    """An error's message in one line: its first (empty where it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""


def described(exc: BaseException) -> str:
    """An error as one line names it: ``ValueError: its first line`` (``(no message)`` where
    it has none)."""
    return f"{type(exc).__name__}: {first_line(exc) or '(no message)'}"


def yaml_problem(exc: BaseException) -> str:
    """A YAML parser's error in one line, where it is first: ``line 3, column 1: expected the
    node content, but found '<stream end>'`` (the first line of its message where it gives no
    position)."""
    mark, problem = getattr(exc, "problem_mark", None), getattr(exc, "problem", None)
    if mark is None or not problem:
        return first_line(exc) or type(exc).__name__
    return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
