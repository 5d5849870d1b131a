"""The one exception the runner reports: its message is the whole error line."""


class RefrunError(Exception):
    """A user-visible error: a malformed IR, bad inputs, an unsupported layer or mode."""
