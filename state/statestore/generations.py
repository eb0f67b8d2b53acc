"""Checkpoint generations of the statestore backend: a changed set of sketched queries starts a
new Spark checkpoint from the stream position the mirrors reflect.

The keyed state lives in the streaming query's plan and state store, so a checkpoint serves one
set of queries for its life (Spark refuses a plan whose stateful operators change). When the
registered queries differ from the ones a checkpoint was pinned with, the job starts generation
n+1 in ``<checkpoint>/generation-<n+1>/`` (generation 1 is the checkpoint folder itself):

* the position: the last batch the previous generation finished (its ``batches`` row, written
  after every other output of the batch) gives the mirror versions it left, and Spark's offsets
  log of that batch the Kafka offsets those versions reflect; the new query starts there
  (``startingOffsets``), after a capture of every registered query from the mirrors at those
  versions, so nothing is skipped or applied twice;
* a batch the previous generation planned but did not finish (the driver died in it, so some of
  its writes may have landed) is finished first by the previous generation itself, with its
  own queries and state, so that the switch happens at a batch boundary;
* batch ids go on: generation n+1's Spark batch b is batch ``base + b`` of the job, written
  under the writer id (app id) of generation 1, so the idempotent (app id, batch id) of every
  Delta write never repeats and the ``batches`` and ``sketch_deltas`` ids keep increasing.

``<checkpoint>/ivmstream_generation.json`` names the current generation (absent: generation 1);
it is replaced (write, then rename) only after the new generation's capture is complete, so a
crash before that repeats the switch, and one after it resumes the new generation.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

FILE = "ivmstream_generation.json"  # at the checkpoint root: the current generation
PIN = "ivmstream_statestore.json"  # in each generation's folder: what its state was built for
# generation 1's own entries in the checkpoint root (Spark's and ours), removed when it is replaced
_ROOT_ENTRIES = ("offsets", "commits", "state", "sources", "metadata", "capture", PIN, "ivmstream_capture.json")


@dataclass(frozen=True)
class Generation:
    """One Spark checkpoint of the job's statestore query."""

    number: int
    dir: str  # its Spark checkpoint folder
    app_id: str | None = None  # the writer id of its Delta writes; None: ``<job>:<query id>`` (generation 1)
    base: int = 0  # the job's batch id of its Spark batch 0
    starting_offsets: str | None = None  # Kafka startingOffsets of its first batch; None: the config's
    versions: dict | None = None  # mirror versions its capture reads; None: the newest
    added: list | None = None  # queries whose ``sketches`` rows its capture writes; None: all

    @property
    def path(self) -> Path:
        return Path(self.dir)


def current(root) -> Generation:
    """The checkpoint's current generation (generation 1, the root itself, until a switch)."""
    p = Path(root) / FILE
    if not p.exists():
        return Generation(1, str(root))
    return Generation(**json.loads(p.read_text()))


def commit(root, gen: Generation) -> None:
    """Make ``gen`` the current generation (atomically: a crash leaves the old file or the new)."""
    p = Path(root) / FILE
    tmp = p.with_suffix(".tmp")
    tmp.write_text(json.dumps(asdict(gen), indent=1))
    os.replace(tmp, p)


def next_dir(root, number: int) -> Path:
    return Path(root) / f"generation-{number}"


def remove(root, gen: Generation) -> None:
    """Delete a replaced generation's checkpoint (its Spark logs, state store files, capture)."""
    if gen.number == 1:
        for name in _ROOT_ENTRIES:
            p = Path(root) / name
            if p.is_dir():
                shutil.rmtree(p)
            elif p.exists():
                p.unlink()
    else:
        shutil.rmtree(gen.path, ignore_errors=True)


def _batch_files(folder: Path) -> list[int]:
    return sorted(int(p.name) for p in folder.iterdir() if p.name.isdigit()) if folder.is_dir() else []


def last_planned(ckpt) -> int | None:
    """The newest Spark batch in the checkpoint's offsets log (planned, maybe not finished)."""
    ids = _batch_files(Path(ckpt) / "offsets")
    return ids[-1] if ids else None


def unplan_after(ckpt, batch: int) -> list[int]:
    """Forget the Spark batches after ``batch`` that the offsets log planned and the commit log
    does not hold: batches the job refused before they began (``IngestJob.request_stop``), so
    that nothing of theirs ran; without this a restart would take them for batches the driver
    died in and finish them with the old queries first. Returns the batches removed."""
    root = Path(ckpt)
    done = set(_batch_files(root / "commits"))
    gone = [b for b in _batch_files(root / "offsets") if b > batch and b not in done]
    for b in gone:
        (root / "offsets" / str(b)).unlink()
        (root / "offsets" / f".{b}.crc").unlink(missing_ok=True)
    return gone


def source_offsets(ckpt, batch: int) -> str:
    """The Kafka offsets at the end of Spark batch ``batch`` as ``startingOffsets`` takes them
    (``{"topic": {"partition": offset}}``): the offsets log entry's line after its metadata."""
    lines = (Path(ckpt) / "offsets" / str(batch)).read_text().splitlines()
    if len(lines) != 3 or lines[0] != "v1":  # version line, batch metadata, one line per source
        raise ValueError(f"offsets log entry {batch} of {ckpt}: expected one Kafka source in format v1")
    json.loads(lines[2])  # it must be the JSON the Kafka source reads back
    return lines[2]


def query_id(ckpt) -> str | None:
    """The streaming query id Spark keeps in the checkpoint's ``metadata`` (None before the first start)."""
    p = Path(ckpt) / "metadata"
    return json.loads(p.read_text())["id"] if p.exists() else None


def writer_id(gen: Generation, job: str) -> str | None:
    """The app id of ``gen``'s Delta writes: generation 1's (``<job>:<query id>``), inherited."""
    if gen.app_id is not None:
        return gen.app_id
    qid = query_id(gen.dir)
    return f"{job}:{qid}" if qid else None


def read_pin(ckpt) -> dict | None:
    p = Path(ckpt) / PIN
    return json.loads(p.read_text()) if p.exists() else None


def write_pin(ckpt, pin: dict) -> None:
    Path(ckpt).mkdir(parents=True, exist_ok=True)
    (Path(ckpt) / PIN).write_text(json.dumps(pin, indent=1))


def differs(was: dict, now: dict) -> bool:
    """Whether state pinned as ``was`` cannot serve ``now``. Partitions are compared only when
    both pins record them (pins written before they did name the queries' SQL alone)."""
    keys = {"queries", "cdc_buckets", "state", "group_buckets"} | ({"partitions"} if "partitions" in was else set())
    return any(was.get(k) != now.get(k) for k in keys)


def describe(was: dict, now: dict) -> str:
    """What changed between two pins, for the console line: ``queries changed (+q3, -q1)``."""
    wq, nq = was.get("queries", {}), now.get("queries", {})
    wp, np_ = was.get("partitions", {}), now.get("partitions", {})
    qs = [f"+{n}" for n in sorted(set(nq) - set(wq))] + [f"-{n}" for n in sorted(set(wq) - set(nq))]
    qs += [f"~{n}" for n in sorted(set(wq) & set(nq))
           if wq[n] != nq[n] or (n in wp and n in np_ and wp[n] != np_[n])]
    out = [f"queries changed ({', '.join(qs)})"] if qs else []
    for k in ("cdc_buckets", "state", "group_buckets"):
        if was.get(k) != now.get(k):
            out.append(f"{k} {was.get(k)} -> {now.get(k)}")
    return "; ".join(out) or "state layout changed"


def layout_changed(was: dict, now: dict) -> bool:
    """Whether the state variables' layout (names, the group stage's buckets) differs: this
    release's operators cannot read the older one (a new generation recaptures from the mirrors)."""
    return any(was.get(k) != now.get(k) for k in ("state", "group_buckets"))


def unfinished_layout(was: dict, now: dict, pos: "Position") -> str | None:
    """The one line refusing to start when a batch did not finish under another state layout
    (only the previous release's operators can finish it, ``_finish`` runs this one's), else None."""
    if not (pending(pos) and layout_changed(was, now)):
        return None
    return (f"batch {pos.last_planned} did not finish under state layout {was.get('state')} (this release keeps "
            f"{now.get('state')}); finish it once with the previous release, then start this one")


def added(was: dict | None, now: dict) -> list[str]:
    """Queries of ``now`` that ``was`` did not maintain as they are now (new, or re-registered
    with other SQL or partitions): the ones whose ``sketches`` rows a capture writes."""
    if was is None:
        return sorted(now["queries"])
    wq, wp = was.get("queries", {}), was.get("partitions", {})
    return sorted(n for n, sql in now["queries"].items()
                  if wq.get(n) != sql or (n in wp and wp[n] != now.get("partitions", {}).get(n)))


@dataclass(frozen=True)
class Position:
    """Where the previous generation stands, from its logs and the job's ``batches`` table."""

    last_done: int  # the job's last finished batch id (-1: none)
    last_planned: int | None  # the job's batch id of the previous generation's newest offsets entry


def position(gen: Generation, last_done: int) -> Position:
    """``last_done``: the job's last batch with a ``batches`` row of ``gen``'s writer."""
    planned = last_planned(gen.dir)
    return Position(last_done, None if planned is None else gen.base + planned)


def pending(pos: Position) -> bool:
    """A batch planned (in Spark's offsets log) whose ``batches`` row is missing: the driver died
    in it, and some of its writes may have landed."""
    return pos.last_planned is not None and pos.last_planned > pos.last_done


def successor(root, gen: Generation, app_id: str | None, pos: Position, offsets_json: str | None,
              versions: dict | None, added_queries: list) -> Generation:
    """Generation n+1 continuing after ``pos`` (which must not be ``pending``): batch ids from
    ``last_done + 1``; ``offsets_json``/``versions`` those of the last finished batch. With no
    batch finished in ``gen``, the new one starts where ``gen`` would have."""
    if pending(pos):
        raise ValueError("a pending batch must be finished before a new generation starts")
    if pos.last_done < gen.base:  # nothing finished in gen: its own start
        return Generation(gen.number + 1, str(next_dir(root, gen.number + 1)), app_id, gen.base,
                          gen.starting_offsets, gen.versions, added_queries)
    return Generation(gen.number + 1, str(next_dir(root, gen.number + 1)), app_id, pos.last_done + 1,
                      offsets_json, dict(versions or {}), added_queries)
