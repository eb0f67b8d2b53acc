"""Issue 15, item 3: every bad config, SQL text and flag ends in one line
``ivmstream: error: [CODE] ...`` and exit code 2, before Spark starts or Kafka is contacted.

Each case runs ``streaming_app.cli.main`` in-process with Spark and Kafka replaced by stubs that
fail the test if reached; a few run as real processes (``python -m streaming_app``) to check
stderr holds exactly one line, no traceback, and that pyspark was never imported. At the end
of the module one line reports the count, for the issue's closing note.
"""

from __future__ import annotations

import copy
import re
import subprocess
import sys
from pathlib import Path

import pytest

from streaming_app import cli
from core.config import dump_toml
from streaming_app.settings import load_config

REPO = Path(__file__).resolve().parents[2]
ONE_LINE = re.compile(r"ivmstream: error: \[(IVM\d{3})\] \S.*")

BASE = {
    "job": {"name": "errs", "lake_root": "lake", "checkpoint_root": "ckpt", "trigger_interval_s": 1},
    "kafka": {"bootstrap_servers": "127.0.0.1:1", "max_offsets_per_trigger": 100},
    "spark": {"master": "local[1]", "ui": False, "ui_port": 4040, "shuffle_partitions": 2},
    "tables": [
        {"name": "orders", "topic": "e.orders", "primary_key": ["o_orderkey"],
         "columns": {"o_orderkey": "long", "o_custkey": "long", "o_totalprice": "decimal(15,2)"}},
        {"name": "lineitem", "topic": "e.lineitem", "primary_key": ["l_orderkey", "l_linenumber"],
         "columns": {"l_orderkey": "long", "l_linenumber": "int", "l_quantity": "double"}},
        {"name": "edges", "topic": "e.edges", "primary_key": ["src", "dst"],
         "columns": {"src": "long", "dst": "long", "cost": "double"}},
    ],
    "graphs": [{"name": "g", "table": "edges", "mode": "undirected", "epsilon": 0.5}],
    "views": [{"name": "reach", "table": "edges", "kind": "reachability"}],
    "sketches": [{"name": "big", "sql": "SELECT l_orderkey, SUM(l_quantity) AS q FROM lineitem "
                                        "GROUP BY l_orderkey HAVING SUM(l_quantity) > 10",
                  "partition": "lineitem.l_orderkey", "fragments": 8}],
}


def _set(path: str, value):
    """A case that sets one key: 'spark.ui', 'tables.0.name', 'sketches.0.sql' ..."""

    def edit(d):
        *head, last = path.split(".")
        for k in head:
            d = d[int(k)] if k.isdigit() else d[k]
        d[int(last) if last.isdigit() else last] = value

    return edit


def _del(path: str):
    def edit(d):
        *head, last = path.split(".")
        for k in head:
            d = d[int(k)] if k.isdigit() else d[k]
        del d[last]

    return edit


def _sql(text: str):
    return _set("sketches.0.sql", text)


BASE_TEXT = dump_toml(BASE)


def _raw(top: str = "", drop: str | None = None, old: str | None = None, new: str | None = None) -> str:
    """TOML text that dump_toml cannot write: a top-level key ``top`` (before every table),
    section ``drop`` left out, ``old`` replaced by ``new``."""
    text = dump_toml({k: v for k, v in BASE.items() if k != drop})
    if old is not None:
        assert old in text
        text = text.replace(old, new)
    return top + text

# (id, edit of BASE or raw TOML text, expected code, text the message must hold, text it must not)
CONFIG_CASES = [
    # the tracebacks
    ("primary_key=5", _set("tables.0.primary_key", 5), "IVM100", "primary_key", None),
    ("not_null=5", _set("tables.0.not_null", 5), "IVM100", "not_null", None),
    ("kafka.options=str", _set("kafka.options", "x"), "IVM100", "options", None),
    ("spark.conf=array", _set("spark.conf", [1, 2]), "IVM100", "conf", None),
    ("tables=[1,2]", "tables = [1, 2]\n", "IVM100", "[[tables]] #1", None),
    # the late failures
    ("decimal(100,2)", _set("tables.0.columns.o_totalprice", "decimal(100,2)"), "IVM100", "precision", None),
    ("decimal(5,10)", _set("tables.0.columns.o_totalprice", "decimal(5,10)"), "IVM100", "scale", None),
    ("decimal(0,0)", _set("tables.0.columns.o_totalprice", "decimal(0,0)"), "IVM100", "precision", None),
    ("decimal(39,2)", _set("tables.0.columns.o_totalprice", "decimal(39,2)"), "IVM100", "precision", None),
    ("no tables", _set("tables", []), "IVM100", "no [[tables]]", None),
    ("no tables key", _del("tables"), "IVM100", "no [[tables]]", None),
    ("trigger=nan", _set("job.trigger_interval_s", float("nan")), "IVM100", "finite", None),
    ("trigger=inf", _set("job.trigger_interval_s", float("inf")), "IVM100", "finite", None),
    ("trigger=-inf", _set("job.trigger_interval_s", float("-inf")), "IVM100", "finite", None),
    ("trigger=-1", _set("job.trigger_interval_s", -1), "IVM100", "trigger_interval_s", None),
    ("trigger=10**400", _set("job.trigger_interval_s", 10**400), "IVM100", "trigger_interval_s", None),
    ("epsilon=10**400", _set("graphs.0.epsilon", 10**400), "IVM100", "epsilon", None),
    ("ui_port=10**400", _set("spark.ui_port", 10**400), "IVM100", "ui_port", None),
    ("trigger=str", _set("job.trigger_interval_s", "2"), "IVM100", "trigger_interval_s", None),
    ("trigger=bool", _set("job.trigger_interval_s", True), "IVM100", "trigger_interval_s", None),
    ("shuffle=0", _set("spark.shuffle_partitions", 0), "IVM100", "shuffle_partitions", None),
    ("shuffle=-3", _set("spark.shuffle_partitions", -3), "IVM100", "shuffle_partitions", None),
    ("shuffle=true", _set("spark.shuffle_partitions", True), "IVM100", "shuffle_partitions", None),
    ("shuffle=2.5", _set("spark.shuffle_partitions", 2.5), "IVM100", "shuffle_partitions", None),
    ("ui_port=99999", _set("spark.ui_port", 99999), "IVM100", "ui_port", None),
    ("ui_port=0", _set("spark.ui_port", 0), "IVM100", "ui_port", None),
    ("ui_port=str", _set("spark.ui_port", "4040"), "IVM100", "ui_port", None),
    ("replication_factor=0", _set("kafka.replication_factor", 0), "IVM100", "replication_factor", None),
    ("replication_factor=-3", _set("kafka.replication_factor", -3), "IVM100", "replication_factor", None),
    ("replication_factor=\"3\"", _set("kafka.replication_factor", "3"), "IVM100", "replication_factor", None),
    ("starting_offsets=bogus", _set("kafka.starting_offsets", "bogus"), "IVM100", "starting_offsets", None),
    ("starting_offsets=EARLIEST", _set("kafka.starting_offsets", "EARLIEST"), "IVM100", "starting_offsets", None),
    ("starting_offsets=[]", _set("kafka.starting_offsets", "[]"), "IVM100", "starting_offsets", None),
    ("starting_offsets=unknown topic", _set("kafka.starting_offsets", '{"other": {"0": 5}}'), "IVM100",
     "no table reads", None),
    ("starting_offsets=bad partition", _set("kafka.starting_offsets", '{"e.orders": {"x": 5}}'), "IVM100",
     "starting_offsets", None),
    ("starting_offsets=offset -3", _set("kafka.starting_offsets", '{"e.orders": {"0": -3}}'), "IVM100",
     "starting_offsets", None),
    ("starting_offsets=int", _set("kafka.starting_offsets", 5), "IVM100", "starting_offsets", None),
    ("fragments=10**9", _set("sketches.0.fragments", 10**9), "IVM100", "1,000,000", None),
    ("fragments=0", _set("sketches.0.fragments", 0), "IVM100", "fragments", None),
    ("fragments=true", _set("sketches.0.fragments", True), "IVM100", "fragments", None),
    ("fragments=1.5", _set("sketches.0.fragments", 1.5), "IVM100", "fragments", None),
    ("partition :0", _set("sketches.0.partition", "lineitem.l_orderkey:0"), "IVM100", "FRAGMENTS", None),
    ("partition :abc", _set("sketches.0.partition", "lineitem.l_orderkey:abc"), "IVM100", "not an integer", None),
    ("partition :2000000", _set("sketches.0.partition", "lineitem.l_orderkey:2000000"), "IVM100", "1,000,000",
     None),
    ("partition no dot", _set("sketches.0.partition", "lineitem"), "IVM100", "TABLE.ATTRIBUTE", None),
    ("partition two dots", _set("sketches.0.partition", "a.b.c"), "IVM100", "TABLE.ATTRIBUTE", None),
    ("partition undeclared table", _set("sketches.0.partition", "nope.x"), "IVM100", "not declared", None),
    ("partition unknown column", _set("sketches.0.partition", "lineitem.nope"), "IVM100", "no column", None),
    ("partition twice", _set("sketches.0.partition", ["lineitem.l_orderkey", "lineitem.l_linenumber"]),
     "IVM100", "twice", None),
    ("partition empty array", _set("sketches.0.partition", []), "IVM100", "partition", None),
    ("partition=int", _set("sketches.0.partition", 5), "IVM100", "partition", None),
    ("sketch mode", _set("sketches.0.mode", "sometimes"), "IVM100", "mode", None),
    ("sketch sql=int", _sql(5), "IVM100", "sql", None),
    ("sketch sql empty", _sql("  "), "IVM100", "sql", None),
    ("sketch missing sql", _del("sketches.0.sql"), "IVM100", "missing key 'sql'", None),
    # [[sketches]] SQL: the same front end and safety check as `sketch register`
    ("sql syntax error", _sql("SELECT l_orderkey FROM lineitem WHERE"), "IVM200", "incomplete WHERE", "<class"),
    ("sql syntax error at end", _sql("SELECT l_orderkey FROM"), "IVM200", "the end of the query", "<Token"),
    ("sql unbalanced paren", _sql("SELECT (l_orderkey FROM lineitem"), "IVM200", "syntax error", None),
    ("sql SELEC FRM", _sql("SELEC * FRM lineitem"), "IVM200", "SELECT", "Alias"),
    ("sql garbage", _sql("hello world"), "IVM200", "syntax error", "Alias"),
    ("sql unknown column", _sql("SELECT nope FROM lineitem"), "IVM200", "unknown column 'nope'", None),
    ("sql window", _sql("SELECT l_orderkey, ROW_NUMBER() OVER (ORDER BY l_quantity) AS r FROM lineitem"),
     "IVM201", "window", None),
    ("sql scalar subquery", _sql("SELECT l_orderkey, (SELECT MAX(o_totalprice) FROM orders) AS m FROM lineitem"),
     "IVM201", "subquer", None),
    ("sql COUNT(DISTINCT)", _sql("SELECT COUNT(DISTINCT l_orderkey) AS n FROM lineitem"), "IVM201", "DISTINCT",
     None),
    ("sql IN subquery", _sql("SELECT l_orderkey FROM lineitem WHERE l_orderkey IN (SELECT o_orderkey FROM orders)"),
     "IVM201", "subquer", "unknown column"),
    ("sql EXISTS", _sql("SELECT l_orderkey FROM lineitem WHERE EXISTS (SELECT 1 FROM orders "
                        "WHERE o_orderkey = l_orderkey)"), "IVM201", "EXISTS", "unknown column"),
    ("sql CTE", _sql("WITH x AS (SELECT l_orderkey FROM lineitem) SELECT l_orderkey FROM x"), "IVM201", "WITH",
     "not declared"),
    ("sql LEFT JOIN", _sql("SELECT l_orderkey FROM lineitem LEFT JOIN orders ON o_orderkey = l_orderkey"),
     "IVM201", "outer join", None),
    ("sql undeclared table", _sql("SELECT x FROM nope"), "IVM200", "unknown table", None),
    ("sql two statements", _sql("SELECT l_orderkey FROM lineitem; SELECT 1"), "IVM200", "2 statements", None),
    ("sql DROP", _sql("DROP TABLE lineitem"), "IVM200", "not a query", None),
    ("sql INSERT", _sql("INSERT INTO lineitem VALUES (1, 1, 1)"), "IVM200", "not a query", None),
    ("sql not reading partitioned table", _sql("SELECT o_orderkey FROM orders"), "IVM100", "does not read", None),
    ("sql unsafe partition", lambda d: d["sketches"][0].update(
        sql="SELECT l_linenumber, AVG(l_quantity) AS a FROM lineitem GROUP BY l_linenumber "
            "HAVING AVG(l_quantity) > 3", partition="lineitem.l_quantity"), "IVM300", "refused partition lineitem.l_quantity", "[IVM"),
    # booleans are TOML booleans
    ("ui=\"false\"", _set("spark.ui", "false"), "IVM100", "true or false", None),
    ("ui=\"true\"", _set("spark.ui", "true"), "IVM100", "true or false", None),
    ("ui=0", _set("spark.ui", 0), "IVM100", "true or false", None),
    # names cannot leave the lake or break SQL
    ("table ../../x", _set("tables.0.name", "../../x"), "IVM100", "identifier", None),
    ("table a/b", _set("tables.0.name", "a/b"), "IVM100", "identifier", None),
    ("table with space", _set("tables.0.name", "a b"), "IVM100", "identifier", None),
    ("table empty", _set("tables.0.name", ""), "IVM100", "name", None),
    ("table name=int", _set("tables.0.name", 5), "IVM100", "name", None),
    ("table leading digit", _set("tables.0.name", "1x"), "IVM100", "identifier", None),
    ("table name too long", _set("tables.0.name", "t" * 200), "IVM100", "at most", None),
    ("tables same name in other case", _set("tables.1.name", "ORDERS"), "IVM100", "duplicate", None),
    ("column ../x", _raw(old='o_custkey = "long"', new='"../x" = "long"'), "IVM100", "identifier", None),
    ("column with space", _raw(old='o_custkey = "long"', new='"a b" = "long"'), "IVM100", "identifier", None),
    ("columns differ in case", _set("tables.0.columns", {"o_orderkey": "long", "O_ORDERKEY": "long"}), "IVM100",
     "case", None),
    ("graph ../g", _set("graphs.0.name", "../g"), "IVM100", "identifier", None),
    ("view ../v", _set("views.0.name", "../v"), "IVM100", "identifier", None),
    ("sketch ../s", _set("sketches.0.name", "../s"), "IVM100", "name", None),
    ("sketch ..", _set("sketches.0.name", ".."), "IVM100", "name", None),
    ("job name ..", _set("job.name", ".."), "IVM100", "name", None),
    ("job name a/b", _set("job.name", "a/b"), "IVM100", "name", None),
    ("job name int", _set("job.name", 7), "IVM100", "name", None),
    # more types and ranges
    ("max_offsets=0", _set("kafka.max_offsets_per_trigger", 0), "IVM100", "max_offsets_per_trigger", None),
    ("max_offsets=true", _set("kafka.max_offsets_per_trigger", True), "IVM100", "max_offsets_per_trigger", None),
    ("max_offsets=1.5", _set("kafka.max_offsets_per_trigger", 1.5), "IVM100", "max_offsets_per_trigger", None),
    ("max_offsets=str", _set("kafka.max_offsets_per_trigger", "many"), "IVM100", "max_offsets_per_trigger",
     None),
    ("bootstrap empty", _set("kafka.bootstrap_servers", ""), "IVM100", "bootstrap", None),
    ("bootstrap no port", _set("kafka.bootstrap_servers", "localhost"), "IVM100", "host:port", None),
    ("bootstrap port 70000", _set("kafka.bootstrap_servers", "h:70000"), "IVM100", "host:port", None),
    ("bootstrap int", _set("kafka.bootstrap_servers", 9092), "IVM100", "bootstrap", None),
    ("bootstrap trailing comma", _set("kafka.bootstrap_servers", "h:1,"), "IVM100", "host:port", None),
    ("driver_memory lots", _set("spark.driver_memory", "lots"), "IVM100", "driver_memory", None),
    ("driver_memory int", _set("spark.driver_memory", 2), "IVM100", "driver_memory", None),
    ("master empty", _set("spark.master", ""), "IVM100", "master", None),
    ("ui_host empty", _set("spark.ui_host", ""), "IVM100", "ui_host", None),
    ("ui_host with space", _set("spark.ui_host", "a b"), "IVM100", "ui_host", None),
    ("kafka=int", "kafka = 5\n" + dump_toml({"tables": BASE["tables"]}), "IVM100", "[kafka]", None),
    ("unknown section", _set("jobs", {}), "IVM100", "unknown key", None),
    ("unknown spark key", _set("spark.uii", True), "IVM100", "unknown key", None),
    ("topic with space", _set("tables.0.topic", "bad topic!"), "IVM100", "topic", None),
    ("topic int", _set("tables.0.topic", 5), "IVM100", "topic", None),
    ("topic ..", _set("tables.0.topic", ".."), "IVM100", "topic", None),
    ("columns empty", _set("tables.0.columns", {}), "IVM100", "columns", None),
    ("columns=array", _set("tables.0.columns", ["a"]), "IVM100", "columns", None),
    ("column type int", _set("tables.0.columns.o_custkey", 5), "IVM100", "column type", None),
    ("column type uuid", _set("tables.0.columns.o_custkey", "uuid"), "IVM100", "unknown column type", None),
    ("primary_key empty", _set("tables.0.primary_key", []), "IVM100", "primary_key", None),
    ("primary_key twice", _set("tables.0.primary_key", ["o_orderkey", "o_orderkey"]), "IVM100", "more than once",
     None),
    ("primary_key unknown", _set("tables.0.primary_key", ["nope"]), "IVM100", "primary_key", None),
    ("primary_key bool", _set("tables.0.primary_key", True), "IVM100", "primary_key", None),
    ("not_null unknown", _set("tables.0.not_null", ["nope"]), "IVM100", "not_null", None),
    ("not_null [1]", _set("tables.0.not_null", [1]), "IVM100", "not_null", None),
    ("ranges min>max", _set("tables.0.ranges", {"o_totalprice": [5, 1]}), "IVM100", "min <= max", None),
    ("ranges nan", _set("tables.0.ranges", {"o_totalprice": [float("nan"), 1]}), "IVM100", "ranges", None),
    ("ranges 10**400", _set("tables.0.ranges", {"o_totalprice": [0, 10**400]}), "IVM100", "ranges", None),
    ("ranges one value", _set("tables.0.ranges", {"o_totalprice": [1]}), "IVM100", "ranges", None),
    ("ranges bool", _set("tables.0.ranges", {"o_totalprice": [False, True]}), "IVM100", "ranges", None),
    ("ranges=array", _set("tables.0.ranges", [1, 2]), "IVM100", "ranges", None),
    ("source_table int", _set("tables.0.source_table", 5), "IVM100", "source_table", None),
    ("decimal mode", _set("tables.0.decimal_handling_mode", "exact"), "IVM100", "decimal_handling_mode", None),
    ("graph epsilon=2", _set("graphs.0.epsilon", 2), "IVM100", "epsilon", None),
    ("graph epsilon=true", _set("graphs.0.epsilon", True), "IVM100", "epsilon", None),
    ("graph epsilon=nan", _set("graphs.0.epsilon", float("nan")), "IVM100", "epsilon", None),
    ("graph mode", _set("graphs.0.mode", "sideways"), "IVM100", "mode", None),
    ("graph unknown column", _set("graphs.0.src", "nope"), "IVM100", "no column", None),
    ("graph src int", _set("graphs.0.src", 1), "IVM100", "src", None),
    ("graph undeclared table", _set("graphs.0.table", "nope"), "IVM100", "not declared", None),
    ("view kind", _set("views.0.kind", "closure"), "IVM100", "kind", None),
    ("view shortest_paths no cost", _set("views.0.kind", "shortest_paths"), "IVM100", "cost", None),
    ("graphs=int", _raw("graphs = 5\n", drop="graphs"), "IVM100", "graphs", None),
    ("sketches=[1]", _raw("sketches = [1]\n", drop="sketches"), "IVM100", "[[sketches]] #1", None),
    ("views=[\"x\"]", _raw('views = ["x"]\n', drop="views"), "IVM100", "[[views]] #1", None),
    ("snapshot_every=0", _set("sketch", {"snapshot_every": 0}), "IVM100", "snapshot_every", None),
    ("spark_join_rows=-1", _set("sketch", {"spark_join_rows": -1}), "IVM100", "spark_join_rows", None),
    ("options nested", _set("kafka.options", {"a": [1]}), "IVM100", "options", None),
    ("lake_root empty", _set("job.lake_root", ""), "IVM100", "lake_root", None),
    ("debezium port 0", _set("debezium", {"port": 0}), "IVM100", "port", None),
    ("debezium properties nested", _set("debezium", {"properties": {"a": [1]}}), "IVM100", "properties", None),
    ("not TOML", "[job\nname = 1\n", "IVM100", "not valid TOML", None),
    ("TOML nested 5000 deep", "a = " + "[" * 5000 + "]" * 5000 + "\n", "IVM100", "nested too deeply", None),
    ("sql nested 3000 deep", _sql("SELECT " + "(" * 3000 + "1" + ")" * 3000 + " AS x FROM lineitem"), "IVM200",
     "nested too deeply", None),
    ("sql 2000-term OR", _sql("SELECT l_orderkey FROM lineitem WHERE "
                              + " OR ".join(f"l_quantity = {i}" for i in range(2000))), "IVM200", "nested too deeply",
     None),
    ("lake_root=int", _set("job.lake_root", 5), "IVM100", "lake_root", None),
    ("checkpoint_root=bool", _set("job.checkpoint_root", False), "IVM100", "checkpoint_root", None),
]


@pytest.fixture
def guarded(monkeypatch):
    """Spark and Kafka entry points that fail the test if a bad input reaches them."""
    import connectors.kafka as kafka
    import devstack.kafka_broker as kb
    import devstack.producer as producer
    import streaming_app.demo_run as demo_run
    import streaming_app.runner as runner
    import streaming_app.sketches.cli as sketch_cli
    import streaming_app.spark_session as spark_session

    def reached(what):
        def fail(*a, **k):
            raise AssertionError(f"a bad input reached {what}")
        return fail

    monkeypatch.setattr(runner, "run_job", reached("Spark (run_job)"))
    monkeypatch.setattr(demo_run, "run_demo", reached("the demo"))
    monkeypatch.setattr(spark_session, "build_session", reached("Spark (build_session)"))
    monkeypatch.setattr(sketch_cli, "_spark", reached("Spark (sketch command)"))
    monkeypatch.setattr(kafka, "create_topics", reached("Kafka (create_topics)"))
    monkeypatch.setattr(kb, "EmbeddedBroker", reached("the broker"))
    monkeypatch.setattr(producer, "CdcProducer", reached("Kafka (producer)"))
    for var in ("IVMSTREAM_CONFIG", "IVMSTREAM_BOOTSTRAP_SERVERS", "IVMSTREAM_SPARK_MASTER",
                "IVMSTREAM_BROKER_PORT", "IVMSTREAM_BROKER_DIR", "IVMSTREAM_LAKE_ROOT", "IVMSTREAM_CHECKPOINT_ROOT"):
        monkeypatch.delenv(var, raising=False)
    # The CLI reads its config at Python's default recursion limit; an engine imported by an
    # earlier test in this process (operators.recursive raises it) must not change the outcome.
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(1000)
    yield
    sys.setrecursionlimit(limit)


RESULTS: list[tuple[str, bool]] = []


@pytest.fixture(scope="module", autouse=True)
def _summary(pytestconfig):
    yield
    n, ok = len(RESULTS), sum(1 for _, good in RESULTS if good)
    line = f"{n} CLI/config cases: {ok} one-line errors (exit 2, no traceback, before Spark and Kafka)"
    reporter = pytestconfig.pluginmanager.get_plugin("terminalreporter")
    capture = pytestconfig.pluginmanager.get_plugin("capturemanager")
    if reporter is None or capture is None:
        print(line)
        return
    with capture.global_and_fixture_disabled():  # past the capture, like pytest's own summary
        reporter.write_line("")
        reporter.write_line(line)


def expect_one_line(case: str, rc: int, err: str, code: str | None, needle: str | None = None,
                    absent: str | None = None) -> str:
    lines = err.strip("\n").splitlines()
    good = (rc == 2 and len(lines) == 1 and ONE_LINE.fullmatch(lines[0]) is not None and "Traceback" not in err
            and (code is None or ONE_LINE.fullmatch(lines[0]).group(1) == code)
            and (needle is None or needle in lines[0]) and (absent is None or absent not in lines[0][27:]))
    RESULTS.append((case, good))
    assert rc == 2, (rc, err)
    assert len(lines) == 1 and ONE_LINE.fullmatch(lines[0]), err
    assert "Traceback" not in err
    if code is not None:
        assert ONE_LINE.fullmatch(lines[0]).group(1) == code, lines[0]
    if needle is not None:
        assert needle in lines[0], lines[0]
    if absent is not None:  # after "ivmstream: error: [IVMnnn] "
        assert absent not in lines[0][27:], lines[0]
    return lines[0]


def config_file(tmp_path: Path, edit) -> Path:
    f = tmp_path / "job.toml"
    if isinstance(edit, str):
        f.write_text(edit)
    else:
        data = copy.deepcopy(BASE)
        edit(data)
        f.write_text(dump_toml(data))
    return f


def test_the_base_config_loads(tmp_path):
    cfg = load_config(config_file(tmp_path, lambda d: None))
    assert [t.name for t in cfg.tables] == ["orders", "lineitem", "edges"] and cfg.sketches[0].fragments == 8
    assert cfg.spark.ui_host == "127.0.0.1"


@pytest.mark.parametrize("case, edit, code, needle, absent", CONFIG_CASES, ids=[c[0] for c in CONFIG_CASES])
def test_bad_config_is_one_line_before_spark(guarded, tmp_path, capsys, case, edit, code, needle, absent):
    f = config_file(tmp_path, edit)
    rc = cli.main(["run", "--config", str(f)])
    out, err = capsys.readouterr()
    line = expect_one_line(case, rc, err, code, needle, absent)
    assert str(f) in line or code != "IVM100" or "--" in line  # names the file


def _file(tmp_path: Path, name: str, text: str | bytes) -> str:
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return str(p)


# (id, argv with {cfg} and {tmp} placeholders, expected code, needle)
FLAG_CASES = [
    ("no command", [], "IVM100", "required"),
    ("unknown command", ["frobnicate"], "IVM100", "invalid choice"),
    ("unknown flag", ["run", "--config", "{cfg}", "--bogus"], "IVM100", "unrecognized"),
    ("run without --config", ["run"], "IVM100", "--config"),
    ("run --config ''", ["run", "--config", ""], "IVM100", "--config"),
    ("run missing config file", ["run", "--config", "{tmp}/none.toml"], "IVM100", "does not exist"),
    ("run config is a folder", ["run", "--config", "{tmp}"], "IVM100", "is a directory"),
    ("run --duration -5", ["run", "--config", "{cfg}", "--duration", "-5"], "IVM100", "--duration"),
    ("run --duration 0", ["run", "--config", "{cfg}", "--duration", "0"], "IVM100", "positive"),
    ("run --duration nan", ["run", "--config", "{cfg}", "--duration", "nan"], "IVM100", "positive"),
    ("run --duration inf", ["run", "--config", "{cfg}", "--duration", "inf"], "IVM100", "positive"),
    ("run --duration abc", ["run", "--config", "{cfg}", "--duration", "abc"], "IVM100", "positive"),
    ("run --bootstrap-servers ''", ["run", "--config", "{cfg}", "--bootstrap-servers", ""], "IVM100",
     "--bootstrap-servers"),
    ("run --bootstrap-servers nohost", ["run", "--config", "{cfg}", "--bootstrap-servers", "nohost"], "IVM100",
     "host:port"),
    ("run --bootstrap-servers port 0", ["run", "--config", "{cfg}", "--bootstrap-servers", "h:0"], "IVM100",
     "host:port"),
    ("run --master ''", ["run", "--config", "{cfg}", "--master", ""], "IVM100", "--master"),
    ("broker bad action", ["broker", "restart"], "IVM100", "invalid choice"),
    ("broker --port 0", ["broker", "status", "--port", "0"], "IVM100", "--port"),
    ("broker --port 70000", ["broker", "status", "--port", "70000"], "IVM100", "1..65535"),
    ("broker --port abc", ["broker", "status", "--port", "abc"], "IVM100", "--port"),
    ("broker --dir ''", ["broker", "status", "--dir", ""], "IVM100", "--dir"),
    ("demo --duration -1", ["demo", "--duration", "-1"], "IVM100", "--duration"),
    ("demo --rate -1", ["demo", "--rate", "-1"], "IVM100", "--rate"),
    ("demo --rate inf", ["demo", "--rate", "inf"], "IVM100", "--rate"),
    ("demo --port 99999", ["demo", "--port", "99999"], "IVM100", "--port"),
    ("produce missing --table", ["produce", "--config", "{cfg}"], "IVM100", "--table"),
    ("produce --table nope", ["produce", "--config", "{cfg}", "--table", "nope"], "IVM100", "no table named"),
    ("produce --file missing", ["produce", "--config", "{cfg}", "--table", "orders", "--file", "{tmp}/x.csv"],
     "IVM100", "no such file"),
    ("produce --file folder", ["produce", "--config", "{cfg}", "--table", "orders", "--file", "{tmp}"],
     "IVM100", "directory"),
    ("produce --file .json", ["produce", "--config", "{cfg}", "--table", "orders", "--file", "{json}"],
     "IVM100", "only .csv"),
    ("produce --file bad parquet", ["produce", "--config", "{cfg}", "--table", "orders", "--file", "{parquet}"],
     "IVM100", "cannot be loaded"),
    ("produce, no broker at bootstrap", ["produce", "--config", "{cfg}", "--table", "orders", "--file", "{goodcsv}"],
     "IVM500", "no Kafka broker answers at 127.0.0.1:1"),
    ("run config not UTF-8", ["run", "--config", "{latin1}"], "IVM100", "not UTF-8"),
    ("produce --file csv lacks columns", ["produce", "--config", "{cfg}", "--table", "orders", "--file", "{csv}"],
     "IVM100", "lacks column"),
    ("produce --file edges missing", ["produce", "--config", "{cfg}", "--table", "edges", "--file",
                                      "{tmp}/g.edges"], "IVM100", "no such file"),
    ("produce --seed-file missing", ["produce", "--config", "{cfg}", "--table", "orders", "--seed-file",
                                     "{tmp}/s.csv"], "IVM100", "no such file"),
    ("produce --count -1", ["produce", "--config", "{cfg}", "--table", "orders", "--count", "-1"], "IVM100",
     "--count"),
    ("produce --rate -1", ["produce", "--config", "{cfg}", "--table", "orders", "--rate", "-1"], "IVM100",
     "--rate"),
    ("produce --rate nan", ["produce", "--config", "{cfg}", "--table", "orders", "--rate", "nan"], "IVM100",
     "--rate"),
    ("produce --edges 0", ["produce", "--config", "{cfg}", "--table", "edges", "--edges-workload", "powerlaw",
                           "--edges", "0"], "IVM100", "--edges"),
    ("produce --seed -1", ["produce", "--config", "{cfg}", "--table", "orders", "--seed", "-1"], "IVM100",
     "--seed"),
    ("produce --file and workload", ["produce", "--config", "{cfg}", "--table", "edges", "--file", "a.csv",
                                     "--edges-workload", "powerlaw"], "IVM100", "not allowed"),
    ("produce bad workload", ["produce", "--config", "{cfg}", "--table", "edges", "--edges-workload", "ring"],
     "IVM100", "invalid choice"),
    ("produce bad config", ["produce", "--config", "{badcfg}", "--table", "orders"], "IVM100", "ui"),
    ("sketch no subcommand", ["sketch"], "IVM100", "required"),
    ("register --name ../x", ["sketch", "register", "--config", "{cfg}", "--name", "../x", "--sql", "SELECT 1"],
     "IVM100", "--name"),
    ("register --fragments 0", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql", "{sql}",
                                "--fragments", "0"], "IVM100", "--fragments"),
    ("register --fragments 10**9", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql", "{sql}",
                                    "--fragments", str(10**9)], "IVM100", "1..1000000"),
    ("register --partition :0", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql", "{sql}",
                                 "--partition", "lineitem.l_orderkey:0"], "IVM100", "FRAGMENTS"),
    ("register --partition no dot", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql", "{sql}",
                                     "--partition", "lineitem"], "IVM100", "TABLE.ATTR"),
    ("register --partition undeclared", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql",
                                         "{sql}", "--partition", "nope.x"], "IVM100", "nope"),
    ("register --partition unknown column", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql",
                                             "{sql}", "--partition", "lineitem.nope"], "IVM100", "no column"),
    ("register --partition twice", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql", "{sql}",
                                    "--partition", "lineitem.l_orderkey,lineitem.l_linenumber"], "IVM100", "twice"),
    ("register unsafe partition", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql",
                                   "SELECT l_linenumber, AVG(l_quantity) AS a FROM lineitem GROUP BY l_linenumber "
                                   "HAVING AVG(l_quantity) > 3", "--partition", "lineitem.l_quantity"],
     "IVM300", "refused --partition lineitem.l_quantity"),
    ("register sql syntax", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql",
                             "SELECT l_orderkey FROM", "--partition", "lineitem.l_orderkey"], "IVM200", "syntax"),
    ("register SELEC FRM", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql", "SELEC * FRM lineitem",
                            "--partition", "lineitem.l_orderkey"], "IVM200", "SELECT"),
    ("register IN subquery", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql",
                              "SELECT l_orderkey FROM lineitem WHERE l_orderkey IN (SELECT o_orderkey FROM orders)",
                              "--partition", "lineitem.l_orderkey"], "IVM201", "subquer"),
    ("register CTE", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql",
                      "WITH x AS (SELECT l_orderkey FROM lineitem) SELECT l_orderkey FROM x"], "IVM201", "WITH"),
    ("register window", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql",
                         "SELECT l_orderkey, RANK() OVER (ORDER BY l_quantity) AS r FROM lineitem",
                         "--partition", "lineitem.l_orderkey"], "IVM201", "window"),
    ("register COUNT(DISTINCT)", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql",
                                  "SELECT COUNT(DISTINCT l_orderkey) AS n FROM lineitem"], "IVM201", "DISTINCT"),
    ("register unknown column", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql",
                                 "SELECT nope FROM lineitem"], "IVM200", "unknown column"),
    ("register --mode bogus", ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql", "{sql}",
                               "--mode", "sometimes"], "IVM100", "invalid choice"),
    ("advise --theta 0", ["sketch", "advise", "--config", "{cfg}", "--sql", "{sql}", "--theta", "0"], "IVM100",
     "--theta"),
    ("advise --theta 2", ["sketch", "advise", "--config", "{cfg}", "--sql", "{sql}", "--theta", "2"], "IVM100",
     "--theta"),
    ("advise --fragments 0", ["sketch", "advise", "--config", "{cfg}", "--sql", "{sql}", "--fragments", "0"],
     "IVM100", "--fragments"),
    ("advise --seed x", ["sketch", "advise", "--config", "{cfg}", "--sql", "{sql}", "--seed", "x"], "IVM100",
     "--seed"),
    ("advise sql syntax", ["sketch", "advise", "--config", "{cfg}", "--sql", "SELECT FROM WHERE"], "IVM200",
     "syntax"),
    ("advise CTE", ["sketch", "advise", "--config", "{cfg}", "--sql",
                    "WITH x AS (SELECT l_orderkey FROM lineitem) SELECT l_orderkey FROM x"], "IVM201", "WITH"),
    ("advise IN subquery", ["sketch", "advise", "--config", "{cfg}", "--sql",
                            "SELECT l_orderkey FROM lineitem WHERE l_orderkey IN (SELECT o_orderkey FROM orders)"],
     "IVM201", "subquer"),
    ("advise empty mirrors", ["sketch", "advise", "--config", "{cfg}", "--sql", "{sql}"], "IVM100", "no rows"),
    ("drop ../x", ["sketch", "drop", "--config", "{cfg}", "../x"], "IVM100", "sketch name"),
    ("show ..", ["sketch", "show", "--config", "{cfg}", ".."], "IVM100", "sketch name"),
    ("show unknown sketch", ["sketch", "show", "--config", "{cfg}", "nope"], "IVM100", "no registered sketch"),
    ("filter unknown sketch", ["sketch", "filter", "--config", "{cfg}", "nope"], "IVM100", "no registered sketch"),
    ("filter --form bogus", ["sketch", "filter", "--config", "{cfg}", "big", "--form", "bogus"], "IVM100",
     "invalid choice"),
    ("layout undeclared table", ["sketch", "layout", "--config", "{cfg}", "nope", "x"], "IVM100", "no table named"),
    ("layout unknown column", ["sketch", "layout", "--config", "{cfg}", "lineitem", "nope"], "IVM100",
     "no column"),
    ("layout --max-file-mb 0", ["sketch", "layout", "--config", "{cfg}", "lineitem", "l_orderkey",
                                "--max-file-mb", "0"], "IVM100", "--max-file-mb"),
    ("query --show-rows -1", ["query", "--config", "{cfg}", "--sql", "{sql}", "--show-rows", "-1"], "IVM100",
     "--show-rows"),
    ("query --use-sketch ../x", ["query", "--config", "{cfg}", "--sql", "{sql}", "--use-sketch", "../x"],
     "IVM100", "--use-sketch"),
    ("query sql syntax", ["query", "--config", "{cfg}", "--sql", "SELECT FROM WHERE"], "IVM200", "syntax"),
    ("query SELEC FRM", ["query", "--config", "{cfg}", "--sql", "SELEC * FRM lineitem"], "IVM200", "SELECT"),
    ("query DELETE", ["query", "--config", "{cfg}", "--sql", "DELETE FROM lineitem"], "IVM200", "not a query"),
    ("query --form bogus", ["query", "--config", "{cfg}", "--sql", "{sql}", "--form", "bogus"], "IVM100",
     "invalid choice"),
]

GOOD_SQL = BASE["sketches"][0]["sql"]


def _argv(argv: list[str], tmp_path: Path) -> list[str]:
    cfg = config_file(tmp_path, lambda d: None)
    bad = tmp_path / "bad.toml"
    bad.write_text(BASE_TEXT.replace("ui = false", 'ui = "false"'))
    subs = {"{cfg}": str(cfg), "{tmp}": str(tmp_path), "{sql}": GOOD_SQL, "{badcfg}": str(bad),
            "{json}": _file(tmp_path, "rows.json", "{}"), "{parquet}": _file(tmp_path, "rows.parquet", b"not parquet"),
            "{csv}": _file(tmp_path, "rows.csv", "a,b\n1,2\n"),
            "{goodcsv}": _file(tmp_path, "orders.csv", "o_orderkey,o_custkey,o_totalprice\n1,2,3.50\n"),
            "{latin1}": _file(tmp_path, "latin1.toml", "[job]\nname = \"caf\xe9\"\n".encode("latin-1"))}
    out = []
    for a in argv:
        for k, v in subs.items():
            a = a.replace(k, v)
        out.append(a)
    return out


@pytest.mark.parametrize("case, argv, code, needle", FLAG_CASES, ids=[c[0] for c in FLAG_CASES])
def test_bad_flag_is_one_line_before_spark(guarded, tmp_path, capsys, case, argv, code, needle):
    rc = cli.main(_argv(argv, tmp_path))
    out, err = capsys.readouterr()
    expect_one_line(case, rc, err, code, needle)


def test_environment_defaults_are_checked_too(guarded, monkeypatch, capsys):
    monkeypatch.setenv("IVMSTREAM_BROKER_PORT", "abc")
    rc = cli.main(["broker", "status"])
    expect_one_line("IVMSTREAM_BROKER_PORT=abc", rc, capsys.readouterr().err, "IVM100", "--port")


def test_every_help_renders(capsys):
    """`--help` of every command and subcommand formats (a '%' in a help text used to crash it)."""
    import argparse

    def parsers(p):
        yield p
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                for sp in a.choices.values():
                    yield from parsers(sp)

    seen = 0
    for p in parsers(cli.build_parser()):
        assert p.format_help()
        seen += 1
    assert seen >= 12
    with pytest.raises(SystemExit) as e:
        cli.main(["sketch", "register", "--help"])
    assert e.value.code == 0 and "50%" in capsys.readouterr().out


# A few cases as real processes: stderr is exactly one line and pyspark is never imported.
PROCESS_CASES = [
    ("config primary_key=5", _set("tables.0.primary_key", 5), ["run", "--config", "{cfg}"]),
    ("config ui=\"false\"", _set("spark.ui", "false"), ["run", "--config", "{cfg}"]),
    ("config sketch window function", _sql("SELECT l_orderkey, ROW_NUMBER() OVER (ORDER BY l_quantity) AS r "
                                           "FROM lineitem"), ["run", "--config", "{cfg}"]),
    ("config SELEC FRM", _sql("SELEC * FRM lineitem"), ["run", "--config", "{cfg}"]),
    ("run --duration -5", None, ["run", "--config", "{cfg}", "--duration", "-5"]),
    ("run --bootstrap-servers ''", None, ["run", "--config", "{cfg}", "--bootstrap-servers", ""]),
    ("produce --file missing", None, ["produce", "--config", "{cfg}", "--table", "orders", "--file", "{tmp}/x.csv"]),
    ("register EXPLAIN", None, ["sketch", "register", "--config", "{cfg}", "--name", "s", "--sql",
                                "EXPLAIN SELECT l_orderkey FROM lineitem", "--partition", "lineitem.l_orderkey"]),
    ("no command", None, []),
]

_PROBE = ("import sys\nfrom streaming_app.cli import main\nrc = main(sys.argv[1:])\n"
          "print('PYSPARK-IMPORTED' if 'pyspark' in sys.modules else 'NO-PYSPARK')\nsys.exit(rc)\n")


@pytest.mark.parametrize("case, edit, argv", PROCESS_CASES, ids=[c[0] for c in PROCESS_CASES])
def test_as_a_process_one_line_and_no_spark(tmp_path, case, edit, argv):
    if edit is not None:
        config_file(tmp_path, edit)
    else:
        config_file(tmp_path, lambda d: None)
    args = [a.replace("{cfg}", str(tmp_path / "job.toml")).replace("{tmp}", str(tmp_path)) for a in argv]
    env = {k: v for k, v in __import__("os").environ.items() if not k.startswith("IVMSTREAM_")}
    r = subprocess.run([sys.executable, "-c", _PROBE, *args], capture_output=True, text=True, cwd=REPO,
                       env=env, timeout=120)
    expect_one_line(case, r.returncode, r.stderr, None)
    assert r.stdout.strip().endswith("NO-PYSPARK"), r.stdout


def test_entry_point_exits_2_with_one_line(tmp_path):
    """The console entry (`python -m streaming_app`, which leaves through os._exit)."""
    f = config_file(tmp_path, _set("tables.0.columns.o_totalprice", "decimal(100,2)"))
    r = subprocess.run([sys.executable, "-m", "streaming_app", "run", "--config", str(f)], capture_output=True,
                       text=True, cwd=REPO, timeout=120)
    expect_one_line("python -m streaming_app: decimal(100,2)", r.returncode, r.stderr, "IVM100", "precision")
