"""The one exception type the CLI turns into a one-line message and a non-zero exit."""


class NERError(ValueError):
    """A user-facing error: bad input, bad config, bad checkpoint. Its message is one line."""

    def __init__(self, message: str, path: str | None = None, line: int | None = None):
        where = ""
        if path is not None:
            where = f"{path}:{line}: " if line is not None else f"{path}: "
        super().__init__(where + " ".join(str(message).split()))


def first_line(exc: BaseException, limit: int = 200) -> str:
    """The first line of an exception's message (its type's name if it has none), cut at
    `limit` characters: a library's deep error inside one of ours."""
    text = str(exc).strip().splitlines()
    return text[0][:limit] if text else type(exc).__name__
