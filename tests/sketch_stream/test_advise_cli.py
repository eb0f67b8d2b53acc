"""Issue 7 CLI: `ivmstream sketch advise` and `sketch register` without --partition.

The unit tests write the mirrors with delta-rs and call ``cli.main`` in-process (no Spark: advise
and the safety refusal never start it). The Spark test writes the mirrors with Spark + Delta
and runs the real commands as subprocesses, then reads what `register` stored.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pytest

from operators.sketch_advisor import advise, verify
from tests.oracles.sketch_reference import reference_sketch
from streaming_app import cli
from core.config import dump_toml

COLUMNS = {"id": "long", "region": "long", "store": "long", "amount": "long"}
# whole groups on region and store, so both are safe; id and amount are not (SUM over an
# amount whose sign the check may not assume: the CLI ignores the current min/max)
SQL = ("SELECT region, store, SUM(amount) AS total FROM sales GROUP BY region, store "
       "HAVING SUM(amount) > 1500")
SQL_AVG = "SELECT region, AVG(amount) AS a FROM sales GROUP BY region HAVING AVG(amount) > 60"


def sales(n: int = 3000, seed: int = 7) -> pa.Table:
    """30 regions × 20 stores, ~5 rows per group; only groups with region < 3 and store < 10 sum
    above 1500, so a sketch on region covers ~10% of the table and one on store ~50%."""
    rng = np.random.default_rng(seed)
    region = rng.integers(0, 30, n)
    store = rng.integers(0, 20, n)
    amount = rng.integers(1, 100, n) + np.where((region < 3) & (store < 10), 400, 0)
    return pa.table({"id": np.arange(n, dtype=np.int64), "region": region.astype(np.int64),
                     "store": store.astype(np.int64), "amount": amount.astype(np.int64)})


def write_config(tmp_path, name: str = "adv", **declared) -> str:
    cfg = tmp_path / f"{name}.toml"
    cfg.write_text(dump_toml({
        "job": {"name": name, "lake_root": str(tmp_path / "lake"), "checkpoint_root": str(tmp_path / "ckpt")},
        "kafka": {"bootstrap_servers": "127.0.0.1:1"},
        "spark": {"master": "local[1]", "ui": False},
        "tables": [{"name": "sales", "topic": f"{name}.sales", "primary_key": ["id"], "columns": COLUMNS,
                    **declared}],
    }))
    return str(cfg)


def run(argv, capsys) -> tuple[int, str, str]:
    rc = cli.main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_advise_prints_candidates_refusals_winner_and_true_sizes(tmp_path, capsys):
    from deltalake import write_deltalake

    data = sales()
    cfg = write_config(tmp_path)
    write_deltalake(str(tmp_path / "lake" / "mirrors" / "sales"), data)
    rc, out, err = run(["sketch", "advise", "--config", cfg, "--sql", SQL, "--fragments", "8", "--verify"], capsys)
    assert rc == 0, err
    nullable = {"sales": {"region", "store", "amount"}}  # what the CLI assumes: all but the key
    want = verify(SQL, {"sales": data}, advise(SQL, {"sales": data}, fragments=8, stats={}, nullable=nullable),
                  how=reference_sketch)
    lines = out.splitlines()
    assert "true" in lines[1] and "95% interval" in lines[1]
    for c in want:  # estimates and interval as the advisor computes them; true = reference oracle
        row = next(x for x in lines if f" sales.{c.attribute} " in x and "refused" not in x)
        assert f"{c.estimate:.1%}" in row and f"{c.ci_low:.1%}" in row and f"{c.true:.1%}" in row
    assert [c.attribute for c in want] == ["region", "store"] and want[0].true < 0.2 < want[1].true
    refused = {x.split()[1]: x for x in lines if "refused:" in x}
    assert set(refused) == {"sales.id", "sales.amount"} and "unsafe" in refused["sales.id"]
    assert f"chosen: sales.{want[0].attribute} (8 fragments" in out


def test_advise_and_register_errors_without_spark(tmp_path, capsys):
    cfg = write_config(tmp_path)
    # no mirror yet: a clear error, exit 2
    rc, out, err = run(["sketch", "advise", "--config", cfg, "--sql", SQL], capsys)
    assert rc == 2 and "no rows yet" in err and "Traceback" not in err
    from deltalake import write_deltalake

    write_deltalake(str(tmp_path / "lake" / "mirrors" / "sales"), sales(500))
    # an unsafe explicit partition is refused with the safety check's reason (before Spark starts)
    rc, out, err = run(["sketch", "register", "--config", cfg, "--name", "q", "--sql", SQL_AVG,
                        "--partition", "sales.id:8"], capsys)
    assert rc == 2 and "IVM300" in err and "refused --partition sales.id" in err and "unsafe" in err
    # AVG is safe only on its group-by column: the advisor offers region alone
    rc, out, err = run(["sketch", "advise", "--config", cfg, "--sql", SQL_AVG], capsys)
    assert rc == 0 and "chosen: sales.region" in out and out.count("refused:") == 3
    # several partitions take one attribute per table (checked before Spark starts)
    for spec in (["--partition", "sales.region:8", "--partition", "sales.store:4"],
                 ["--partition", "sales.region:8,sales.region:4"]):
        rc, out, err = run(["sketch", "register", "--config", cfg, "--name", "q", "--sql", SQL] + spec, capsys)
        assert rc == 2 and "sales given twice" in err and "Traceback" not in err
    # declared NOT NULL and non-negative amounts: SUM only grows with rows, so id and amount
    # become safe partitions of the HAVING SUM query (they are refused without the declaration)
    rc, out, err = run(["sketch", "advise", "--config", cfg, "--sql", SQL], capsys)
    assert rc == 0 and "sales.id" in "".join(x for x in out.splitlines() if "refused:" in x)
    strict = write_config(tmp_path, "strict", not_null=["amount"], ranges={"amount": [0, 10**9]})
    rc, out, err = run(["sketch", "advise", "--config", strict, "--sql", SQL], capsys)
    assert rc == 0 and "refused:" not in out, out


@pytest.mark.spark
def test_cli_advise_verify_and_register_without_partition(spark, tmp_path):
    from connectors import delta_sink as sink
    from streaming_app.settings import load_config

    cfg_path = write_config(tmp_path, "advspark")
    cfg = load_config(cfg_path)
    lake = sink.Lake(cfg.lake_root)
    data = sales()
    sink.ensure_mirror(spark, lake, cfg.table("sales"))
    spark.createDataFrame(data.to_pandas()).write.format("delta").mode("append").save(lake.mirror("sales"))

    def cli_run(*args):
        return subprocess.run([sys.executable, "-m", "streaming_app", "sketch", *args, "--config", cfg_path],
                              capture_output=True, text=True, timeout=600)

    adv = cli_run("advise", "--sql", SQL, "--verify")
    assert adv.returncode == 0, adv.stderr
    chosen = next(x for x in adv.stdout.splitlines() if x.startswith("chosen: ")).split()[1]
    want = verify(SQL, {"sales": data}, advise(SQL, {"sales": data}, fragments=16, stats={},
                                               nullable={"sales": {"region", "store", "amount"}}),
                  how=reference_sketch)
    assert chosen == f"sales.{want[0].attribute}"
    for c in want:  # true sizes by capture (engine) equal the reference oracle's
        assert f"{c.true:.1%}" in next(x for x in adv.stdout.splitlines() if f" sales.{c.attribute} " in x)

    reg = cli_run("register", "--name", "big", "--sql", SQL)
    assert reg.returncode == 0, reg.stderr
    assert f"advisor chose {chosen}" in reg.stdout and "registered big: " + chosen in reg.stdout
    row = spark.read.format("delta").load(str(cfg.lake_root / "registered_queries")).where("name = 'big'").first()
    assert (row.partition_table, row.attribute, row.fragments) == ("sales", chosen.split(".")[1], 16)
    sk = spark.read.format("delta").load(str(cfg.lake_root / "sketches")).where("query = 'big'").first()
    assert sk is not None and sk.attribute == row.attribute

    bad = cli_run("register", "--name", "bad", "--sql", SQL, "--partition", "sales.amount")
    assert bad.returncode == 2 and "refused --partition sales.amount" in bad.stderr
    assert "Traceback" not in bad.stderr
