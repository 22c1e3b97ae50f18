"""The exception the engine's errors are raised as."""


class InvarError(RuntimeError):
    """An error reported by the invar C library; the message is the engine's own."""
