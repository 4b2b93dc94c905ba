"""One exception type for bad input: its message is the one-line error users see."""


class VxError(Exception):
    """A user-facing error: the message says what is wrong and what to do."""
