"""``python -m handgrad``: the command line (:mod:`.commands`), its parser and one-line
errors (:mod:`.args`) and the ``train`` command (:mod:`.train`)."""

from .commands import main

__all__ = ["main"]
