"""Whether a process id names a running process on this machine.

The S3 lease (a holder on this host that is gone is taken over) and the dev stack's servers
(a recorded pid is signalled only while it runs) both ask it.
"""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child still answers kill(0); treat it as gone.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return True
