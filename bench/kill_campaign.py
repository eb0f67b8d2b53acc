"""The kill campaign (issue 15, item 4): SIGKILL `ivmstream run` at seeded random points
across batches (inside Delta commits, around Spark's commit log, inside the sketch
maintainer's snapshot writes to state_snapshots, on batch 0, inside `sketch register`),
restart after each, bounce the broker while the job runs, stop the job with SIGTERM, then
compare every output with its oracle.

    .venv/bin/python bench/kill_campaign.py --points 20 --seed 15

Prints the figures and writes bench/results/kill_campaign.md. Not part of `make test`
(tests/recovery/test_kill_campaign.py runs a handful of these points)."""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from devstack.kafka_broker import EmbeddedBroker  # noqa: E402
from devstack.process import free_port  # noqa: E402
from tests.recovery.campaign import Campaign, make_point, plan_points, register_spec  # noqa: E402

MAX_OFFSETS = 50


def broker_bounce(c: Campaign, broker: EmbeddedBroker, down_s: float) -> str:
    """Stop the broker after the job's first batch line, start it again ``down_s`` later;
    returns what the job did."""
    c.send(60, 40)
    first = c.next_batch()
    done = threading.Event()

    def bounce():
        broker.stop()
        time.sleep(down_s)
        broker.start()
        done.set()

    def on_line(proc, line):
        if line.startswith(f"batch {first:>5}:") and not done.is_set() and not getattr(on_line, "fired", False):
            on_line.fired = True
            threading.Thread(target=bounce, daemon=True).start()

    c.tally.tried["broker_restart"] += 1
    run = c.run_job(None, on_line=on_line, timeout=600)
    done.wait(120)
    if not getattr(on_line, "fired", False):
        c.tally.log.append(("broker_restart", "never fired", run.code, False, round(run.seconds, 1)))
        return "the job finished before the bounce; not exercised"
    c.tally.landed["broker_restart"] += 1
    consumed = c.consumed()
    if run.code == 0 and consumed == c.sent:
        how = f"rode it out: the run went on after the broker came back and drained (exit 0, {run.seconds:.0f} s)"
    elif run.code == 0:
        how = (f"the run ended with exit 0 but had consumed {consumed} of {c.sent} records; "
               "a restart took the rest")
        c.drain()
        c.tally.restarts += 1
    else:
        tail = [ln for ln in run.out.splitlines() if "rror" in ln][-2:]
        how = f"the run failed (exit {run.code}: {' | '.join(tail)[:300]}); a restart drained with nothing lost"
        c.drain()
        c.tally.restarts += 1
    c.tally.log.append(("broker_restart", f"down {down_s:.0f}s after batch {first}", run.code, True,
                        round(run.seconds, 1)))
    return how


def sigterm(c: Campaign) -> str:
    c.send(60, 40)
    stop = c.next_batch()
    run = c.sigterm_between_batches(stop)
    after = c.next_batch()
    last = c.stopped_after(run)
    if last is None or after != last + 1:
        raise AssertionError(f"SIGTERM: the job said it would stop after batch {last}, "
                             f"but the last batch recorded is {after - 1}")
    again = c.drain()
    c.tally.restarts += 1
    replayed = "already committed before a restart" in again.out
    return (f"SIGTERM after batch {stop}'s line: exit {run.code}, the job finished batch {last} "
            f"and stopped (last batch recorded {after - 1}); "
            f"the restart {'replayed a batch Spark had not committed' if replayed else 'replayed nothing'} "
            f"and drained")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--points", type=int, default=20, help="random SIGKILL points (20)")
    ap.add_argument("--seed", type=int, default=15, help="seed of the points and the history (15)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "kill_campaign.md"))
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix="ivmstream-kc-"))
    broker = EmbeddedBroker(work / "kafka", port=free_port())
    broker.start()
    try:
        c = Campaign(work / "job", broker.bootstrap, seed=args.seed, max_offsets=MAX_OFFSETS)
        c.send(150, 120)
        rng = random.Random(args.seed)
        for kind, ahead in plan_points(rng, args.points):
            if kind == "register":
                spec = register_spec(rng)
                killed, _ = c.kill_register(spec)
                print(f"  register  {spec:<40} exit {killed.code} landed={killed.landed}", flush=True)
                progress(args, c, t0)
                continue
            if c.consumed() + (ahead + 1) * MAX_OFFSETS > c.sent:
                c.send(60, 40)  # keep batches ahead of the next point
            point = make_point(rng, kind, c.next_batch() + ahead)
            run = c.kill_at(point)
            print(f"  {kind:<15} {str(point):<40} exit {run.code} landed={run.landed} {run.seconds:.0f}s",
                  flush=True)
            progress(args, c, t0)
        bounce = broker_bounce(c, broker, down_s=8)
        print(f"  broker restart: {bounce}", flush=True)
        term = sigterm(c)
        print(f"  sigterm: {term}", flush=True)
        c.drain()
        res = c.check()
    finally:
        broker.stop()
    minutes = (time.monotonic() - t0) / 60
    text = report(args, c, res, bounce, term, minutes)
    print(text)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(text)
    return 0 if res["lost"] == res["doubled"] == res["wrong"] == 0 else 1


def progress(args, c: Campaign, t0: float) -> None:
    """The figures so far (no final check yet), so a cut-short campaign still leaves them."""
    res = {"compared": 0, "lost": 0, "doubled": 0, "wrong": 0, "problems": ["in progress: not checked yet"]}
    Path(args.out).write_text(report(args, c, res, "not yet", "not yet", (time.monotonic() - t0) / 60))


def report(args, c: Campaign, res: dict, bounce: str, term: str, minutes: float) -> str:
    t = c.tally
    kinds = sorted(set(t.tried))
    lines = [
        "# Kill campaign", "",
        f"`bench/kill_campaign.py --points {args.points} --seed {args.seed}`: {minutes:.1f} min, "
        f"{t.runs} job runs, {c.next_batch()} batches, {c.sent} records sent.", "",
        "| kind | points tried | kills landed |", "|---|---|---|",
        *[f"| {k} | {t.tried[k]} | {t.landed[k]} |" for k in kinds],
        f"| **all** | {sum(t.tried.values())} | {sum(t.landed.values())} |", "",
        f"- restarts after a kill or stop: {t.restarts}",
        f"- rows compared: {res['compared']}",
        f"- rows lost: {res['lost']}",
        f"- rows doubled: {res['doubled']}",
        f"- rows wrong: {res['wrong']}",
        f"- broker stopped and restarted mid-stream: {bounce}",
        f"- {term}", "",
    ]
    if res["problems"]:
        lines += ["## Problems", "", *[f"- {p}" for p in res["problems"]], ""]
    if t.notes:
        lines += ["## Notes", "", *[f"- {n}" for n in t.notes], ""]
    lines += ["## Points in order", "", "| kind | point | exit | landed | s |", "|---|---|---|---|---|",
              *[f"| {k} | `{p}` | {code} | {'yes' if landed else 'no'} | {s} |" for k, p, code, landed, s in t.log],
              ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
