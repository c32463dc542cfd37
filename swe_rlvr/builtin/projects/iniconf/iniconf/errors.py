"""Exceptions raised by iniconf."""


class ParseError(ValueError):
    """The text is not valid INI. `lineno` is 1-based."""

    def __init__(self, lineno, message):
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno
        self.message = message


class InterpolationError(ValueError):
    """A ${...} reference could not be resolved."""
