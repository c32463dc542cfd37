"""The one error type, with the column it points at."""


class ExprError(ValueError):
    def __init__(self, message, column=None):
        super().__init__(message if column is None else f"{message} at column {column}")
        self.column = column
