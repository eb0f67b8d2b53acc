"""Reading the lake's tables from Python without Spark, whatever their layout.

The mirrors are merge-on-read by default (``[job] mirrors``): Delta tables with deletion
vectors, which Spark and delta-kernel readers read but deltalake (delta-rs) 1.6 cannot. The
outputs are plain Delta tables any reader opens. ``read_table`` reads both kinds as Arrow:

    from streaming_app.lake import read_table
    edges = read_table("var/demo/lake/mirrors/edges").to_pandas()
    first = read_table("var/demo/lake/mirrors/edges", version=1)     # time travel
    orders = read_table("s3a://lake/orders/mirrors/orders", config="job.toml")  # the job's [s3]
"""

from __future__ import annotations

import pyarrow as pa

from connectors import delta_sink as sink
from connectors import object_store
from streaming_app.settings import load_config


def read_table(path: str, version: int | None = None, columns: list[str] | None = None,
               config: str | None = None) -> pa.Table:
    """The table at ``path`` (a folder or an ``s3a://`` URI) as of its newest version, or of
    ``version``; ``config``: a job's config, whose ``[s3]`` settings reach an S3 lake."""
    if config is not None:
        object_store.use(load_config(config).s3)
    path = str(path)
    if version is None:
        return sink.read_table(path, columns)
    return sink.read_version(None, path, version, columns)
