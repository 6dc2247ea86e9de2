"""The error of a data set that cannot be used as given (one message: what and where)."""


class DataError(ValueError):
    """A data set that cannot be used as given; the message says what and where."""
