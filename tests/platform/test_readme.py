"""Issue 26, item 3: the README's snippets run as written. Each ```python block of "Reading
each output table" runs, unedited, in a folder whose ``var/demo/lake`` the job wrote from the
demo's own config (a small slice of its data, two runs so the mirrors have the versions the
snippets name); the view tables keep the edge table's vertex type. The engines' block runs in
the fast tier."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

import pytest

from connectors import delta_sink as sink

REPO = Path(__file__).resolve().parents[2]


def blocks(section: str, until: str) -> list[str]:
    text = (REPO / "README.md").read_text()
    part = text[text.index(section):text.index(until, text.index(section))]
    return re.findall(r"```python\n(.*?)```", part, re.S)


def run_block(code: str) -> str:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README.md", "exec"), {"__name__": "readme"})  # noqa: S102 - the README's own code
    return out.getvalue()


def test_the_engines_block_runs():
    (code,) = blocks("## Engines", "## Tests and benchmarks")
    out = run_block(code)
    assert "{'sales': [2, 3]} {'sales': {3}}" in out  # the insert added fragment 3 to the sketch
    assert "a→b ∧ b→c" in out


def test_the_maintenance_block_is_the_defaults():
    """"Running for days" shows ``[maintenance]`` with its defaults: the block parses and says
    what the job does when the section is left out."""
    import tomllib

    from core.config import MaintenanceConfig, parse_schema

    text = (REPO / "README.md").read_text()
    part = text[text.index("## Running for days"):text.index("## A lake on an object store")]
    (block,) = re.findall(r"```toml\n(.*?)```", part, re.S)
    table = {"name": "t", "topic": "t", "primary_key": "id", "columns": {"id": "long"}}
    assert parse_schema({**tomllib.loads(block), "tables": [table]}).maintenance == MaintenanceConfig()


def test_every_ivmstream_command_of_a_bash_block_parses():
    """The ``ivmstream ...`` lines of the README's bash blocks are commands the CLI takes as
    written (flags, choices, values); what each does is tested where it runs."""
    import shlex

    from streaming_app.cli import build_parser

    text = (REPO / "README.md").read_text()
    lines = [line.split(" #")[0].strip() for block in re.findall(r"```bash\n(.*?)```", text, re.S)
             for line in block.splitlines() if line.strip().startswith("ivmstream ")]
    assert len(lines) >= 8, lines
    for line in lines:
        args = build_parser().parse_args(shlex.split(line)[1:])
        assert callable(args.fn), line


@pytest.mark.spark
@pytest.mark.kafka
def test_reading_the_lake_blocks_run_on_a_demo_lake(tmp_path, monkeypatch, kafka_broker, spark):
    import dataclasses

    import deltalake

    from connectors.kafka import create_topics
    from devstack.producer import CdcProducer, conform, read_rows
    from streaming_app.settings import load_config
    from streaming_app.demo_run import DEMO_DIR, TPCH_TABLES, EdgeChanges, tpch_subset
    from streaming_app.runner import run_job

    lake = tmp_path / "var" / "demo" / "lake"
    cfg = load_config(DEMO_DIR / "demo.toml").with_overrides(bootstrap_servers=kafka_broker.bootstrap, ui=False)
    cfg = dataclasses.replace(cfg, lake_root=lake, checkpoint_root=tmp_path / "ckpt",
                              kafka=dataclasses.replace(cfg.kafka, max_offsets_per_trigger=100_000))
    create_topics(kafka_broker.bootstrap, cfg.topics, partitions=2)  # as written: keys over two partitions
    tpch = tpch_subset()
    data = {"sales": conform(cfg.table("sales"), read_rows(DEMO_DIR / "sales.csv"))}
    for t in TPCH_TABLES:
        data[t] = conform(cfg.table(t), read_rows(tpch / f"{t}.parquet"))[:300]
    data["edges"] = list(EdgeChanges(seed=7).live.values())
    prod = CdcProducer(kafka_broker.bootstrap)
    for half in (0, 1):  # two runs: every mirror gets versions 1 and 2
        for name, rows in data.items():
            for row in rows[half::2]:
                prod.send(cfg.table(name), "r", None, row)
        prod.flush()
        run_job(cfg, available_now=True, spark=spark, quiet=True)
    prod.close()
    assert sink.latest_version(None, str(lake / "mirrors" / "orders")) >= 2

    monkeypatch.chdir(tmp_path)
    codes = blocks("### Reading each output table", "A registered query reads its sketch")
    assert len(codes) == 3
    outs = [run_block(code) for code in codes]
    assert "triangles" in outs[0]  # deltalake: the last triangle count (duckdb prints from C++, not to Python)
    assert "batch_id" in outs[2] and "MERGE" in outs[2]  # Spark: the figures, the history of MERGE commits
    assert "this config does not write it" not in outs[1]  # the demo's config writes every table

    # the views keep the edge table's vertex type: numbers order as numbers
    import duckdb

    reach = deltalake.DeltaTable(str(lake / "reachability")).to_pyarrow_dataset()  # noqa: F841 - read by duckdb
    dsts = [r[0] for r in duckdb.sql("select dst from reach where view = 'reach' order by dst").fetchall()]
    assert dsts and all(isinstance(d, int) for d in dsts) and dsts == sorted(dsts)

    # issue 42, blocker 3: a config without graphs and views writes none of their tables
    for name in ("triangle_counts", "reachability", "shortest_paths", "view_stats"):
        shutil.rmtree(lake / name)
    out = run_block(codes[1])
    assert sorted(line for line in out.splitlines() if "does not write it" in line) == sorted(
        f"no {name} table: this config does not write it"
        for name in ("reachability", "shortest_paths", "triangle_counts", "view_stats"))
