"""Config parsing: valid files load, every mistake names the file, section and key."""

import pytest

from operators.errors import ConfigError
from streaming_app.config import load_config, parse_config

GOOD = """
[job]
name = "t1"
lake_root = "lake"
[kafka]
bootstrap_servers = "127.0.0.1:1"
max_offsets_per_trigger = 5
[[tables]]
name = "items"
topic = "cdc.items"
primary_key = "id"
columns = { id = "long", price = "decimal(10,2)", day = "date" }
"""


def test_loads_and_resolves_paths(tmp_path):
    f = tmp_path / "job.toml"
    f.write_text(GOOD)
    cfg = load_config(f)
    assert cfg.name == "t1"
    assert cfg.lake_root == tmp_path / "lake"
    assert cfg.checkpoint_dir == tmp_path / "checkpoints" / "t1"
    t = cfg.table("items")
    assert t.primary_key == ("id",) and t.column_names == ["id", "price", "day"]
    assert cfg.kafka.max_offsets_per_trigger == 5
    assert cfg.with_overrides(bootstrap_servers="x:1").kafka.bootstrap_servers == "x:1"


@pytest.mark.parametrize("snippet, needle", [
    ('[job]\nnmae = "x"', "unknown key"),
    ('[[tables]]\nname="a"\ntopic="t"\nprimary_key="id"\ncolumns={id="uuid"}', "unknown column type"),
    ('[[tables]]\nname="a"\ntopic="t"\nprimary_key="nope"\ncolumns={id="long"}', "primary_key"),
    ('[[tables]]\nname="a"\ntopic="t"\ncolumns={id="long"}', "missing key 'primary_key'"),
    ('[kafka]\nmax_offsets_per_trigger = "many"', "must be an integer"),
    ('[job]\nname = "has space"', "letters, digits"),
    ('[[tables]]\nname="a"\ntopic="t"\nprimary_key="id"\ncolumns={id="long"}\n'
     '[[tables]]\nname="b"\ntopic="t"\nprimary_key="id"\ncolumns={id="long"}', "share topic"),
])
def test_bad_config_is_a_clear_error(tmp_path, snippet, needle):
    f = tmp_path / "bad.toml"
    f.write_text(snippet)
    with pytest.raises(ConfigError) as e:
        load_config(f)
    assert needle in str(e.value) and str(f) in str(e.value)


def test_missing_file_and_bad_toml(tmp_path):
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "none.toml")
    f = tmp_path / "x.toml"
    f.write_text("[job\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(f)


def test_cli_bad_config_exits_2_with_one_line(tmp_path, capsys):
    from streaming_app.cli import main

    rc = main(["run", "--config", str(tmp_path / "none.toml")])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("ivmstream: error: [IVM100]") and "Traceback" not in err


def test_unknown_top_level_section():
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config({"jobs": {}})
