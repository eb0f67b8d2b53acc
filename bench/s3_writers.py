"""Why a lake on S3Proxy has one writer: concurrent delta-rs appends to one table lose commits.

Starts the S3 server (S3Proxy, `ivmstream s3`'s code) on a free port, then W threads each append
N one-row commits to the same Delta table through delta-rs with the job's storage options, and
counts the rows that survive. A store that honours conditional PUT (``If-None-Match``, as AWS S3
does) keeps every row or fails a writer; S3Proxy 2.7.0 ignores it, so two writers of the same
version both "succeed" and the later overwrites the earlier. The same appends one writer at a
time (what the job does) keep every row.

Usage: python bench/s3_writers.py [--writers 4] [--appends 8]   (prints; figures go to RESULTS.md)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--appends", type=int, default=8)
    args = ap.parse_args()

    import pyarrow as pa

    from connectors import object_store as store
    from core.config import S3Config
    from devstack.process import free_port
    from devstack.s3_server import S3Server

    srv = S3Server(Path(tempfile.mkdtemp(prefix="ivm-s3-writers-")), port=free_port())
    srv.start()
    try:
        store.use(S3Config(**srv.s3_section()))
        for mode in ("concurrent", "one at a time"):
            path = srv.lake(f"writers-{mode.replace(' ', '-')}/t")
            store.rs_write(path, pa.table({"w": pa.array([-1], pa.int64()), "i": pa.array([-1], pa.int64())}))
            errors: list[str] = []

            def writer(w: int) -> None:
                for i in range(args.appends):
                    try:
                        store.rs_write(path, pa.table({"w": pa.array([w], pa.int64()), "i": pa.array([i], pa.int64())}),
                                       mode="append")
                    except Exception as e:  # noqa: BLE001 - a refused commit is counted, not fatal
                        errors.append(type(e).__name__)

            if mode == "concurrent":
                threads = [threading.Thread(target=writer, args=(w,)) for w in range(args.writers)]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join()
            else:
                for w in range(args.writers):
                    writer(w)
            rows = store.rs_table(path).to_pyarrow_table().num_rows - 1
            sent = args.writers * args.appends
            print(f"{mode:>14}: {args.writers} writers x {args.appends} appends = {sent} commits sent, {rows} rows "
                  f"kept, {sent - rows - len(errors)} lost silently, {len(errors)} refused with an error", flush=True)
    finally:
        srv.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
