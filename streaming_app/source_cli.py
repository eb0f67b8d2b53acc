"""`ivmstream postgres` and `ivmstream connect`: the real CDC chain (being built)."""

from __future__ import annotations


def add_commands(sub, common) -> None:
    """Register the subcommands on the top-level parser (filled in by the source-chain work)."""
