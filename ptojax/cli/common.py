"""What the commands share: the bad-input error and the rich console."""

from __future__ import annotations

import sys


class CliError(Exception):
    """Bad input: printed as one line, exit status 2."""


def console(stderr: bool = False):
    from rich.console import Console
    return Console(stderr=stderr, highlight=False, width=None if sys.stdout.isatty() else 110)
