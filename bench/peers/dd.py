"""Differential dataflow as a peer in our benchmarks: build, export a stream, run, read back.

The peer is the Rust program in ``bench/peers/dd/`` (crates ``differential-dataflow`` 0.25.1 and
``timely`` 0.31.0 from crates.io, one timely worker). It is built here, by the benchmark, with
``cargo build --release`` the first time it is needed (about three minutes on 2 cores; output in
``bench/peers/dd/target/``, git-ignored), never by ``make setup``. Without cargo the benchmarks
say so and skip the peer.

Streams are exported as per-batch edge differences ``(src, dst, cost, ±1)``: the views' own
front (``LinkFront``) turns each batch of inserts / deletes / expirations into the live edges
it removes and adds, so the peer sees exactly the base relation our views see (refreshes,
replacements by another cost and expiries included). Batch 0 is the load.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections import Counter

HERE = os.path.dirname(os.path.abspath(__file__))
CRATE = os.path.join(HERE, "dd")
BINARY = os.path.join(CRATE, "target", "release", "ivmstream-dd-peer")


def build(log=print) -> str | None:
    """The peer's binary, built if needed; None (and a line saying why) when cargo is absent or fails."""
    cargo = shutil.which("cargo") or (os.path.expanduser("~/.cargo/bin/cargo")
                                      if os.path.exists(os.path.expanduser("~/.cargo/bin/cargo")) else None)
    if cargo is None:
        log("differential dataflow peer skipped: cargo not found (install Rust to compare with DD)")
        return None
    log("building the differential dataflow peer (cargo build --release in bench/peers/dd; "
        "crates.io: differential-dataflow 0.25.1, timely 0.31.0; first build ~3 min)")
    r = subprocess.run([cargo, "build", "--release", "--quiet"], cwd=CRATE, capture_output=True, text=True)
    if r.returncode != 0 or not os.path.exists(BINARY):
        log("differential dataflow peer skipped: cargo build failed:\n" + r.stderr[-2000:])
        return None
    return BINARY


class Ids:
    """Vertex ids (int or str) <-> u32."""

    def __init__(self) -> None:
        self.of: dict = {}
        self.back: list = []

    def __call__(self, v) -> int:
        i = self.of.get(v)
        if i is None:
            i = self.of[v] = len(self.back)
            self.back.append(v)
        return i


def link_batches(load, stream, weighted: bool) -> list:
    """Per batch (load first) the net live-edge changes ``[(src, dst, cost, diff)]`` our views see."""
    from operators.recursive.fronts import LinkFront

    # the views' own front: reachability's is unweighted (a re-insert with another cost refreshes)
    front = LinkFront(lambda s, d, c: (s, d, c), lambda s, d, c: (s, d, c), weighted=weighted)
    out = []
    for ins, dels, now in [(load, [], 0)] + list(stream):
        net: Counter = Counter()
        for ev in (front.delete(dels), front.insert(ins), front.expire(now)):
            for s, d, c in ev.removed_edges:
                net[(s, d, c if weighted else 1)] -= 1
            for (s, d, c), _ in ev.edges:
                net[(s, d, c if weighted else 1)] += 1
        out.append([(s, d, c, n) for (s, d, c), n in sorted(net.items(), key=repr) if n])
    return out


def run(view: str, batches: list, ids: Ids | None = None) -> dict:
    """Run the peer on ``batches`` (lists of (src, dst, cost, diff)); ``view`` is reach, sp or tri.

    Returns ``{"cpu_ms": [...], "wall_ms": [...], "changes": [Counter((src, dst, value) -> diff)],
    "peak_mb": ...}`` with batch 0 the load; vertex ids are translated back through ``ids``.
    """
    ids = ids or Ids()
    with tempfile.TemporaryDirectory(prefix="ivmstream-dd-") as tmp:
        src = os.path.join(tmp, "in.txt")
        with open(src, "w") as fh:
            fh.write(view + "\n")
            for i, batch in enumerate(batches):
                if i:
                    fh.write("B\n")
                for s, d, c, n in batch:
                    if not float(c).is_integer():
                        raise ValueError(f"the DD peer takes integer costs, got {c!r}")
                    fh.write(f"{ids(s)} {ids(d)} {int(c)} {n}\n")
            fh.write("B\n")
        out = os.path.join(tmp, "out.txt")
        with open(src) as fin, open(out, "w") as fout:
            proc = subprocess.Popen([BINARY], stdin=fin, stdout=fout)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode != 0:
            raise RuntimeError(f"DD peer exited with {proc.returncode}")
        res = {"cpu_ms": [], "wall_ms": [], "changes": [], "peak_mb": usage.ru_maxrss / 1024}
        back = ids.back
        with open(out) as fh:
            for line in fh:
                f = line.split()
                if f[0] == "B":
                    res["cpu_ms"].append(int(f[2]) / 1e6)
                    res["wall_ms"].append(int(f[3]) / 1e6)
                    res["changes"].append(Counter())
                    continue
                u, v, c, n = int(f[0]), int(f[1]), int(f[2]), int(f[3])
                key = (u, v, c) if view == "tri" else (back[u], back[v], c)
                res["changes"][-1][key] += n
    return res
