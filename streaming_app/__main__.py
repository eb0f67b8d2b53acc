"""`python -m streaming_app` is the `ivmstream` command."""

import sys

from streaming_app.cli import main

sys.exit(main())
