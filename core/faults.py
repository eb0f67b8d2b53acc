"""Kill points: where the recovery tests and the kill campaign SIGKILL the job on purpose.

Every step of a batch that writes (the mirror MERGE, a maintainer, the quarantine, the batch
record, a sketch registration...) names itself here; ``IVMSTREAM_KILL_AT`` picks one. Unset, a
kill point costs one environment lookup.
"""

from __future__ import annotations

import os
import signal
import threading

from core.config.common import env


def kill_point(step: str, batch_id: int) -> None:
    """SIGKILL this process at ``step`` of ``batch_id`` when IVMSTREAM_KILL_AT names it.

    ``<step>:<batch>`` kills on reaching the step; ``<step>:<batch>@<ms>`` arms a timer there
    that kills ``ms`` milliseconds later, wherever the process is then (inside the Delta
    commit or Spark job that follows the step, for the kill campaign)."""
    spec = env("kill_at")
    if not spec:
        return
    point, _, delay = spec.partition("@")
    if point != f"{step}:{batch_id}":
        return
    if not delay:
        print(f"fault injection: SIGKILL at {spec}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    print(f"fault injection: SIGKILL armed at {spec}", flush=True)

    def fire() -> None:
        print(f"fault injection: SIGKILL at {spec}", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)

    timer = threading.Timer(float(delay) / 1000.0, fire)
    timer.daemon = True
    timer.start()
