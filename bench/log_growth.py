"""What a commit to one of the job's output tables costs as the table's Delta log grows (issue #39).

deltalake 1.6.6 lists the whole ``_delta_log`` folder each time it opens a table on a local lake,
and log cleanup keeps 30 days of commits, so a table written once a batch gains one log file a
batch and each later commit costs more. This times, on fresh tables in a temporary folder:

- ``append``: a 1-row append through the job's ``delta_sink.append_small`` (``--writer job``),
  or through delta-rs as the job did before (``--writer delta-rs``: ``done_before`` then
  ``write_deltalake``), each with its (app id, batch id) txn action;
- ``merge``: a MERGE of 100 changed rows into a 1,300-row table through ``delta_sink.merge``
  (the job's path for ``sketches``, ``reachability``...; ``--writer delta-rs``: delta-rs's MERGE,
  the mirrors' path), idempotent on the batch id;

as the log grows to ``--commits`` commits, with a log checkpoint every ``--checkpoint-every``
commits (what maintenance does; its cleanup keeps 30 days, so no commit file goes). Prints the
median ms of each block of ``--block`` commits, then the first and the last block and their ratio.

Usage: python bench/log_growth.py [--commits 2000] [--block 200] [--writer job|delta-rs]
       [--ops append,merge] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import pyarrow as pa  # noqa: E402 - after the repo is on the path, like the other benches

from connectors import delta_sink as sink  # noqa: E402
from connectors import object_store as store  # noqa: E402

APP = "bench"
MERGE_ROWS, MERGE_CHANGED = 1300, 100


def _append(path: str, writer: str, i: int) -> None:
    row = pa.table({"batch_id": pa.array([i], pa.int64()), "rows": pa.array([i * 7], pa.int64()),
                    "note": [f"batch {i}"]})
    if writer == "job":
        sink.append_small(None, path, row, APP, i)
        return
    from deltalake import CommitProperties, Transaction  # the previous path, spelled out

    if not sink.done_before(path, APP, i):
        store.rs_write(path, row, mode="append",
                       commit_properties=CommitProperties(app_transactions=[Transaction(app_id=APP, version=i)]))


def _merge_rows(i: int) -> pa.Table:
    start = (i * MERGE_CHANGED) % MERGE_ROWS
    ids = [(start + k) % MERGE_ROWS for k in range(MERGE_CHANGED)]
    return pa.table({"id": pa.array(ids, pa.int64()), "v": pa.array([i] * len(ids), pa.int64()),
                     "s": [f"{i}-{k}" for k in ids]})


def run(op: str, writer: str, commits: int, block: int, checkpoint_every: int, root: str) -> list[float]:
    path = os.path.join(root, f"{op}-{writer}")
    if op == "append":
        sink.ensure_table(None, path, "batch_id BIGINT, `rows` BIGINT, note STRING")
    else:
        sink.ensure_table(None, path, "id BIGINT, v BIGINT, s STRING", cdf=True)
        sink.merge(None, path, pa.table({"id": pa.array(range(MERGE_ROWS), pa.int64()),
                                          "v": pa.array([0] * MERGE_ROWS, pa.int64()),
                                          "s": [str(k) for k in range(MERGE_ROWS)]}), ["id"], app_id=APP, batch_id=0,
                   small=writer == "job")
    times = []
    for i in range(1, commits + 1):
        t0 = time.perf_counter()
        if op == "append":
            _append(path, writer, i)
        else:
            sink.merge(None, path, _merge_rows(i), ["id"], app_id=APP, batch_id=i, small=writer == "job")
        times.append((time.perf_counter() - t0) * 1000)
        if checkpoint_every and i % checkpoint_every == 0:
            store.rs_table(path).create_checkpoint()
    log_files = len(os.listdir(os.path.join(path, "_delta_log")))
    blocks = [statistics.median(times[s:s + block]) for s in range(0, len(times), block)]
    for b, ms in enumerate(blocks):
        print(f"  {op:6} {writer:8} commits {b * block + 1:6}-{min((b + 1) * block, commits):6}  median {ms:7.2f} ms")
    print(f"{op} ({writer}): first block {blocks[0]:.2f} ms, last block {blocks[-1]:.2f} ms, "
          f"ratio {blocks[-1] / blocks[0]:.2f}x; {log_files} files in _delta_log")
    return blocks


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--block", type=int, default=200)
    ap.add_argument("--checkpoint-every", type=int, default=100)
    ap.add_argument("--writer", choices=["job", "delta-rs"], default="job",
                    help="the job's paths, or delta-rs as before")
    ap.add_argument("--ops", default="append,merge")
    ap.add_argument("--json", help="write the block medians here")
    args = ap.parse_args()
    load = os.getloadavg()
    print(f"log growth: {args.commits} commits, blocks of {args.block}, checkpoint every {args.checkpoint_every}; "
          f"load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    out = {}
    with tempfile.TemporaryDirectory(prefix="ivm-log-growth-") as root:
        for op in args.ops.split(","):
            out[f"{op}:{args.writer}"] = run(op, args.writer, args.commits, args.block, args.checkpoint_every, root)
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "load": load, "block_median_ms": out}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
