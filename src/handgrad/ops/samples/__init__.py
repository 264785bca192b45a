"""Sample inputs and torch counterparts of the larger op families, each imported by its
family's declarations (``ops/<family>.py``, at its end), which are what the test tables
read. The counterparts take and return tensors in handgrad's channels-last layout; the
channel moves live here, not in the tests.
"""


def channels_first(t):
    """(N, *S, C) -> torch's (N, C, *S)."""
    return t.movedim(-1, 1)


def channels_last(t):
    """torch's (N, C, *S) -> (N, *S, C)."""
    return t.movedim(1, -1)
