"""The command line's one error type (imports nothing, so every cli module may raise it)."""


class UsageError(Exception):
    """A bad option, file or dataset, or a failed run: reported in one line; ``status``
    is the exit status (2: a bad option, file or dataset; 1: training failed)."""

    def __init__(self, message, status=2):
        super().__init__(message)
        self.status = status


def configured(model_class, *args, **kwargs):
    """``model_class(*args, **kwargs)``; a ValueError or TypeError (a bad option's value) is
    a UsageError (status 2), not a failed training."""
    try:
        return model_class(*args, **kwargs)
    except (ValueError, TypeError) as error:
        raise UsageError(str(error)) from None
