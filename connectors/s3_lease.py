"""One job per lake on an object store: a lease object in the lake that a second job is refused by.

A local lake is held with an ``flock`` (streaming_app.preflight); a bucket has no locks, and
S3Proxy (before 2.8.0) ignores the conditional PUT that would make creating the lease atomic.
So the lease is a small object, ``<lake>/_ivmstream.lease``, naming its holder (job, host, pid,
a random token) and an expiry that a thread of the holder renews. A job that finds a live
lease of another holder is refused before Spark starts, with the holder named; a lease past
its expiry, or one of a process on this host that is gone (a SIGKILLed job restarting), is
taken over. After writing its lease a job reads it back a moment later: when two start at
once, the later write wins and the other sees a foreign token and stops (a window of one
read, not a guarantee; on a store with conditional PUT, as AWS S3 has since 2024, delta-rs's
own commits fail rather than overwrite).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
import uuid

from connectors import object_store as store
from core.errors import IvmError
from core.process import alive

LEASE_NAME = "_ivmstream.lease"
LEASE_S = 60.0  # a lease not renewed for this long is free
RENEW_S = 15.0
SETTLE_S = 1.0  # wait before reading the lease back (the other of two racing writers has written by then)


class LakeInUse(IvmError):
    code = "IVM120"


class LakeUnreachable(IvmError):
    code = "IVM500"


class S3Lease:
    """Hold the lease of the s3 lake at ``root`` while ``with`` runs (renewed by a thread)."""

    def __init__(self, root: str, owner: str):
        self.root, self.owner = root, owner
        self.uri = store.join(root, LEASE_NAME)
        self.token = uuid.uuid4().hex
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def read(self) -> dict | None:
        status, body = store.request("GET", self.uri)
        if status == 404:
            return None
        try:
            return json.loads(body.decode() or "null")
        except ValueError:
            return None

    def _write(self) -> None:
        body = {"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(), "token": self.token,
                "expires": time.time() + LEASE_S}
        store.request("PUT", self.uri, json.dumps(body).encode())

    def _free(self, held: dict | None) -> bool:
        if held is None or held.get("token") == self.token:
            return True
        if float(held.get("expires", 0)) < time.time():
            return True
        # a holder on this machine that is gone (a killed job): its lease is stale at once
        return held.get("host") == socket.gethostname() and not alive(int(held.get("pid", 0) or 0))

    def _refuse(self, held: dict) -> LakeInUse:
        return LakeInUse(f"lake_root {self.root} is in use by pid {held.get('pid')} on {held.get('host')} "
                         f"({held.get('owner')}); stop that job first, or give this one another lake "
                         f"(the lease {LEASE_NAME} frees itself {LEASE_S:.0f} s after its holder stops renewing it)")

    def acquire(self) -> "S3Lease":
        try:
            return self._acquire()
        except OSError as e:  # refused connection, 403, unknown bucket: one line, before Spark starts
            raise LakeUnreachable(unreachable(self.root, e)) from None

    def _acquire(self) -> "S3Lease":
        held = self.read()
        if not self._free(held):
            raise self._refuse(held)
        self._write()
        time.sleep(SETTLE_S)
        held = self.read()
        if held is None or held.get("token") != self.token:
            raise self._refuse(held or {})
        self._thread = threading.Thread(target=self._renew, name="ivmstream-s3-lease", daemon=True)
        self._thread.start()
        return self

    def _renew(self) -> None:
        while not self._stop.wait(RENEW_S):
            try:
                self._write()
            except OSError as e:  # the store is away: the next renewal tries again
                print(f"lake lease: renewal failed ({type(e).__name__}); retrying in {RENEW_S:.0f} s", flush=True)

    def release(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        try:
            held = self.read()
            if held is not None and held.get("token") == self.token:
                store.request("DELETE", self.uri)
        except OSError:
            pass  # it expires on its own

    def __enter__(self) -> "S3Lease":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def unreachable(root: str, e: OSError) -> str:
    """The one line for a bucket that does not answer, or refuses the job's keys (HTTP 403: say
    where the keys came from, never the keys, and what to export)."""
    s = store.settings()
    where = s.endpoint or f"AWS S3 ({s.region})"
    if " HTTP 403 " in str(e):
        source = {"config": "the [s3] section", "environment": "AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY",
                  "local server": "the local S3 server's own pair (no keys given, loopback endpoint)"}
        keys = source.get(s.keys_from, "none (no [s3] keys, no AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY)")
        return (f"lake_root {root}: {where} refused the job's keys (HTTP 403 AccessDenied; keys from {keys}); "
                "give the job the pair the store was started with: export AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (the same for `ivmstream s3 start`, the job and every reader) or set "
                "[s3] access_key and secret_key")
    return (f"lake_root {root}: the bucket does not answer at {where} ({e}); start the S3 server "
            "(`ivmstream s3 start`) or check [s3] endpoint and the keys (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
