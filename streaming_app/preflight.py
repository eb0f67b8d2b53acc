"""What `run` and `demo` check before the Spark session starts, so that a newcomer's mistake
is one line instead of a stack trace after Spark has started, or silence.

- the lake and checkpoint folders must be writable;
- one job per lake and per checkpoint: a lock file in each (``.ivmstream.lock``, an
  ``flock`` the kernel drops when the holder dies, SIGKILL included) refuses a second job or
  demo with the holder's pid;
- the broker must answer: until it does, a line says so every few seconds (never a silent
  wait, never an exit 0 that read nothing);
- every topic the tables read must exist (the broker does not create topics on demand).
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import ssl
import time
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Callable

from connectors import object_store
from connectors.avro import check_access
from connectors.kafka_client import python_options
from connectors.s3_lease import S3Lease
from core.errors import ConfigError, IvmError

LOCK_NAME = ".ivmstream.lock"
BROKER_RETRY_S = 5.0

class InUseError(IvmError):
    """The lake or checkpoint folder is held by another running job or demo."""

    code = "IVM120"

def local(path) -> bool:
    """A folder of this machine (not ``s3a://...``, ``abfss://...``: those have no flock)."""
    return not re.match(r"[A-Za-z][A-Za-z0-9+.-]*:/", str(path)) or str(path).startswith("file:")

def check_writable(path: Path, what: str) -> None:
    """``path`` exists or can be made, and a file can be written in it."""
    if not local(path):
        return
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / f".ivmstream-write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise ConfigError(f"{what} {path} cannot be written ({e.strerror or e}); give a folder this user "
                          "may write") from None

def empty_folder(path: Path) -> None:
    """Remove everything in ``path`` but its lock file (a demo starting afresh, lock held)."""

    if not path.is_dir():
        return
    for child in path.iterdir():
        if child.name == LOCK_NAME:
            continue
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()

_held: dict[str, list] = {}  # lock file -> [fd, holders in this process]

@contextmanager
def folder_lock(folder: Path, what: str, owner: str):
    """Hold ``folder``'s lock file while the block runs. A second process is refused at once
    with the holder's pid; the same process may take it again (the demo, then its job)."""
    if not local(folder):
        yield
        return
    key = str((folder / LOCK_NAME).resolve())
    if key in _held:
        _held[key][1] += 1
    else:
        fd = os.open(key, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(fd, 200, 0).decode("utf-8", "replace").split()
            os.close(fd)
            pid = holder[0] if holder else "unknown"
            name = f" ({' '.join(holder[1:])})" if len(holder) > 1 else ""
            raise InUseError(f"{what} {folder} is in use by pid {pid}{name}; stop that job first, or give "
                             "this one another folder") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {owner}\n".encode(), 0)
        _held[key] = [fd, 1]
    try:
        yield
    finally:
        _held[key][1] -= 1
        if _held[key][1] == 0:
            fd = _held.pop(key)[0]
            os.close(fd)  # closing drops the flock

@contextmanager
def job_folders(cfg):
    """The job's lake and checkpoint folders: writable, and held by this process alone (a lake
    on S3 by a lease object: connectors/s3_lease.py)."""
    check_writable(cfg.lake_root, "lake_root")
    check_writable(cfg.checkpoint_dir, "checkpoint folder")
    with ExitStack() as stack:
        if object_store.is_s3(cfg.lake_root):  # a bucket has no flock: a lease object in the lake
            object_store.use(cfg.s3)
            stack.enter_context(S3Lease(cfg.lake_root, f"job {cfg.name}"))
        stack.enter_context(folder_lock(cfg.lake_root, "lake_root", f"job {cfg.name}"))
        stack.enter_context(folder_lock(cfg.checkpoint_dir, "checkpoint folder", f"job {cfg.name}"))
        yield

def wait_for_broker(bootstrap: str, *, give_up_at: float | None = None,
                    say: Callable[[str], None] = print) -> None:
    """Return once a server of ``bootstrap`` accepts a connection. While none does, say so at
    once and again every few seconds; past ``give_up_at`` (monotonic) raise BrokerError."""
    from connectors.kafka import BrokerError, unreachable

    t0 = time.monotonic()
    why = unreachable(bootstrap, timeout_s=2.0)
    while why:
        waited = time.monotonic() - t0
        if give_up_at is not None and time.monotonic() + BROKER_RETRY_S > give_up_at:
            raise BrokerError(f"no Kafka broker answered at {bootstrap} in {waited:.0f} s ({why}); nothing was "
                              "read. Start one (`ivmstream broker start`) or give --bootstrap-servers")
        say(f"no Kafka broker answers at {bootstrap} ({why}); retrying every {BROKER_RETRY_S:.0f} s "
            f"(waited {waited:.0f} s; `ivmstream broker start` starts one, Ctrl-C stops)")
        time.sleep(BROKER_RETRY_S)
        why = unreachable(bootstrap, timeout_s=2.0)

def refused(kafka, e: Exception) -> str:
    """The one line for a broker that refuses the job's client (login, certificate), never a secret."""
    who = f" as {kafka.username!r}" if kafka.username else ""
    why = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
    if kafka.password:
        why = why.replace(kafka.password, "********")
    return (f"the Kafka broker at {kafka.bootstrap_servers} refused the job's connection{who} "
            f"({type(e).__name__}: {why}); check [kafka] username, password_file (or IVMSTREAM_KAFKA_PASSWORD) "
            "and the truststore in options")


def check_registry(cfg, say: Callable[[str], None] = print) -> None:
    """A job with Avro tables asks its schema registry once before Spark starts: credentials it
    refuses end the job here in one line (RegistryRefused, IVM531); a registry that does not
    answer yet is said, and the batches wait for it."""
    if cfg.registry is None or not any(t.encoding == "avro" for t in cfg.tables):
        return
    line = check_access(cfg.registry)
    if line:
        say(line)


def check_topics(cfg, say: Callable[[str], None] = print) -> None:
    """Every topic the tables read exists on the broker; a topic of more than one partition is
    said (README, Ordering: a TRUNCATE and the two halves of a primary-key change are applied
    exactly only when a table's topic has one partition)."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    from connectors.kafka import BrokerError, live_brokers

    try:
        admin = KafkaAdminClient(bootstrap_servers=cfg.kafka.bootstrap_servers, client_id="ivmstream-preflight",
                                 **python_options(cfg.kafka))
        try:
            existing = set(admin.list_topics())
            ours = sorted({t.topic for t in cfg.tables} & existing)
            partitions = {d["name"]: len(d["partitions"]) for d in admin.describe_topics(ours)} if ours else {}
            brokers = live_brokers(admin) if cfg.kafka.replication_factor > 1 else 1
        finally:
            admin.close()
    except (KafkaError, ssl.SSLError) as e:  # refused login or certificate: one line, before Spark starts
        raise BrokerError(refused(cfg.kafka, e)) from None
    if cfg.kafka.replication_factor > brokers:  # the job reads only; what makes topics refuses it
        say(f"note: [kafka] replication_factor = {cfg.kafka.replication_factor} but {brokers} broker(s) answer at "
            f"{cfg.kafka.bootstrap_servers}: `ivmstream produce`, `connect register` and `connect start` will "
            "refuse to create topics until that many brokers run")
    many = {t: n for t, n in partitions.items() if n > 1}
    if many:
        say(f"note: {', '.join(f'topic {t} has {n} partitions' for t, n in sorted(many.items()))}: a TRUNCATE "
            "and a primary-key change are applied exactly only on a topic of one partition (README: Ordering)")
    missing = [t for t in cfg.tables if t.topic not in existing]
    if missing:
        t = missing[0]
        more = f" (and {len(missing) - 1} more: {', '.join(m.topic for m in missing[1:])})" if len(missing) > 1 else ""
        raise BrokerError(
            f"topic {t.topic!r} of table {t.name!r} does not exist on {cfg.kafka.bootstrap_servers}{more}; "
            f"create it: `ivmstream produce --config {cfg.source_file or 'job.toml'} --table {t.name} --count 0` "
            "(or kafka-topics.sh --create, or register the Debezium connector that writes it)")
