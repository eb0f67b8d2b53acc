"""`python -m streaming_app` is the `ivmstream` command."""

from streaming_app.cli import run

run()
