"""Where the lake lives: a local folder or an S3 bucket, and how delta-rs and Spark reach it.

The config names an object-store lake the way Spark does, ``s3a://bucket/path``; Spark's
Hadoop S3A connector reads and writes it with the ``fs.s3a.*`` settings below, delta-rs with
the same bucket and path as ``s3://bucket/path`` and its own storage options. Both come from
the job's ``[s3]`` settings (endpoint, region, path-style addressing, keys), which the job
hands to ``use`` once at start: the lake's tables are opened by path all over the code, so the
settings are kept here for the process rather than passed to every call.

Every table write on an s3 lake goes through delta-rs as on a local one (mirror MERGE,
appends, table creation), with the same idempotent txn actions. Neither delta-rs nor Spark
can make two writers of one table safe on a store without conditional PUT (S3Proxy before
2.8.0 ignores ``If-None-Match``; the second writer of a version overwrites the first): one
job writes a lake at a time, which ``connectors.s3_lease`` enforces.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET
from pathlib import Path

import deltalake

from core.config import JobConfig, S3Config

S3_SCHEMES = ("s3a://", "s3://")

_settings = S3Config()

def use(settings: S3Config | None) -> None:
    """The S3 settings of this process's lake (the job's ``[s3]``)."""
    global _settings
    _settings = settings or S3Config()

def settings() -> S3Config:
    return _settings

def lake_s3(cfg: JobConfig) -> S3Config | None:
    """The job's S3 settings when its lake is on S3, else None (a local job's session then never
    loads the S3A jars)."""
    return cfg.s3 if is_s3(cfg.lake_root) else None

def is_s3(path) -> bool:
    return str(path).startswith(S3_SCHEMES)

def is_local(path) -> bool:
    p = str(path)
    return "://" not in p or p.startswith("file:")

def rs_reaches(path) -> bool:
    """True when delta-rs reads and writes this table (a local folder or an S3 bucket); other
    stores (abfss://, gs:// through Hadoop) keep Spark's writers."""
    return is_local(path) or is_s3(path)

def join(root, *parts: str) -> str:
    """``root/part/...`` for a folder or a URI (a ``Path`` would fold ``s3a://`` to ``s3a:/``)."""

    if "://" in str(root):
        return "/".join([str(root).rstrip("/"), *(p.strip("/") for p in parts)])
    return str(Path(root).joinpath(*parts))

def rs_uri(path) -> str:
    """The table's URI for delta-rs: ``s3a://b/p`` -> ``s3://b/p``; anything else unchanged."""
    p = str(path)
    return "s3://" + p[len("s3a://"):] if p.startswith("s3a://") else p

def rs_options(path, s: S3Config | None = None) -> dict[str, str] | None:
    """delta-rs storage options for the table at ``path``; None for a local one."""
    if not is_s3(path):
        return None
    s = s or _settings
    opts = {"AWS_REGION": s.region}
    if s.endpoint:
        opts["AWS_ENDPOINT_URL"] = s.endpoint
        if s.endpoint.startswith("http://"):
            opts["AWS_ALLOW_HTTP"] = "true"
    if s.path_style:
        opts["AWS_S3_ADDRESSING_STYLE"] = "path"
    if s.access_key and s.secret_key:
        opts["AWS_ACCESS_KEY_ID"] = s.access_key
        opts["AWS_SECRET_ACCESS_KEY"] = s.secret_key
    return opts

class MergeOnReadTable(RuntimeError):
    """delta-rs was asked to open a table with deletion vectors."""


def rs_table(path, version: int | None = None):
    """``deltalake.DeltaTable`` of the table at ``path`` (local or s3). Refuses a table with
    deletion vectors (a merge-on-read mirror): deltalake 1.6.6 cannot read one, and its MERGE on
    one brought a deleted row back; ``connectors.dv_table`` reads and writes those."""
    t = deltalake.DeltaTable(rs_uri(path), version=version, storage_options=rs_options(path))
    if "deletionVectors" in (t.protocol().reader_features or []):
        raise MergeOnReadTable(f"{path} has deletion vectors (a merge-on-read mirror): delta-rs may not read or "
                               "write it; read it with connectors.dv_table or Spark")
    return t

def rs_protocol(path):
    """The protocol of the table at ``path``, read by delta-rs from the log alone."""
    return deltalake.DeltaTable(rs_uri(path), storage_options=rs_options(path)).protocol()


def rs_is_table(path) -> bool:

    return deltalake.DeltaTable.is_deltatable(rs_uri(path), storage_options=rs_options(path))

def rs_write(path, data, **kw) -> None:
    """``deltalake.write_deltalake`` to the table at ``path``."""

    deltalake.write_deltalake(rs_uri(path), data, storage_options=rs_options(path), **kw)

def rs_create(path, schema, **kw):

    return deltalake.DeltaTable.create(rs_uri(path), schema, storage_options=rs_options(path), **kw)

def remove_files(uris: list[str]) -> None:
    """Delete data files that no commit references any more (local paths or s3:// URIs)."""

    for u in uris:
        if is_s3(u):
            request("DELETE", u)
        else:
            Path(u.removeprefix("file://")).unlink(missing_ok=True)

def request(method: str, uri: str, body: bytes = b"", headers: dict | None = None,
            query: dict[str, str] | None = None) -> tuple[int, bytes]:
    """One S3 request (GET, PUT, DELETE) on the object at ``s3a://bucket/key``, signed with AWS
    signature v4 when keys are set: (HTTP status, body); 404 and 412 are returned, not raised.
    Small and direct: pyarrow's S3 client uploads with checksum headers that S3Proxy refuses (501)."""

    s = _settings
    bucket, _, key = uri.split("://", 1)[1].partition("/")
    quoted = urllib.parse.quote(key, safe="/-_.~")
    base = s.endpoint or f"https://s3.{s.region}.amazonaws.com"
    if s.path_style:
        url, path = f"{base}/{bucket}/{quoted}", f"/{bucket}/{quoted}"
    else:
        scheme, _, host = base.partition("://")
        url, path = f"{scheme}://{bucket}.{host}/{quoted}", f"/{quoted}"
    qs = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}"
                  for k, v in sorted((query or {}).items()))
    if qs:
        url += "?" + qs
    now = dt.datetime.now(dt.timezone.utc)
    amz_date, day = now.strftime("%Y%m%dT%H%M%SZ"), now.strftime("%Y%m%d")
    payload = hashlib.sha256(body).hexdigest()
    hdrs = {"host": urllib.parse.urlsplit(url).netloc, "x-amz-content-sha256": payload, "x-amz-date": amz_date,
            **{k.lower(): v for k, v in (headers or {}).items()}}
    if s.access_key and s.secret_key:
        names = sorted(hdrs)
        canonical = "\n".join([method, path, qs, "".join(f"{k}:{hdrs[k].strip()}\n" for k in names),
                               ";".join(names), payload])
        scope = f"{day}/{s.region}/s3/aws4_request"
        to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
        k = ("AWS4" + s.secret_key).encode()
        for part in (day, s.region, "s3", "aws4_request"):
            k = hmac.new(k, part.encode(), hashlib.sha256).digest()
        sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
        hdrs["authorization"] = (f"AWS4-HMAC-SHA256 Credential={s.access_key}/{scope}, "
                                 f"SignedHeaders={';'.join(names)}, Signature={sig}")
    del hdrs["host"]  # urllib sends it
    req = urllib.request.Request(url, data=body if method == "PUT" else None, method=method, headers=hdrs)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        if e.code in (404, 412):
            return e.code, e.read()
        raise OSError(f"S3 {method} {uri}: HTTP {e.code} {e.read()[:300]!r}") from None

# Hadoop S3A: the settings for a custom endpoint (an S3-compatible store) and keys. Checksums:
# the AWS SDK 2.30+ sends new checksum headers that older S3-compatible stores refuse; these
# keep S3A's old-store-friendly behaviour (MD5 header, no generated checksums).
def list_objects(prefix_uri: str) -> list[tuple[str, int, float]]:
    """(s3://bucket/key, size, modified epoch seconds) of every object under ``s3://bucket/prefix``
    (ListObjectsV2, page after page)."""
    bucket, _, prefix = prefix_uri.split("://", 1)[1].partition("/")
    out, token = [], None
    while True:
        q = {"list-type": "2", "prefix": prefix}
        if token:
            q["continuation-token"] = token
        status, body = request("GET", f"s3://{bucket}/", query=q)
        if status != 200:
            raise OSError(f"S3 LIST s3://{bucket}/{prefix}: HTTP {status}")
        root = ET.fromstring(body)
        ns = root.tag[:root.tag.index("}") + 1] if root.tag.startswith("{") else ""
        for c in root.iter(f"{ns}Contents"):
            modified = dt.datetime.fromisoformat(c.findtext(f"{ns}LastModified").replace("Z", "+00:00"))
            out.append((f"s3://{bucket}/{c.findtext(f'{ns}Key')}", int(c.findtext(f"{ns}Size")), modified.timestamp()))
        if root.findtext(f"{ns}IsTruncated") != "true":
            return out
        token = root.findtext(f"{ns}NextContinuationToken")


def hadoop_conf(s: S3Config | None = None, *, keys: bool = True) -> dict[str, str]:
    """``fs.s3a.*`` settings for Spark's Hadoop configuration (``keys=False`` leaves out the key
    pair, for places where settings are visible: a command line, the Spark UI)."""
    s = s or _settings
    conf = {
        "fs.s3a.endpoint.region": s.region,
        "fs.s3a.path.style.access": str(bool(s.path_style)).lower(),
        "fs.s3a.request.md5.header": "true",
        "fs.s3a.checksum.generation": "false",
    }
    if s.endpoint:
        conf["fs.s3a.endpoint"] = s.endpoint
        conf["fs.s3a.connection.ssl.enabled"] = str(s.endpoint.startswith("https://")).lower()
    if s.access_key and s.secret_key:
        conf["fs.s3a.aws.credentials.provider"] = "org.apache.hadoop.fs.s3a.SimpleAWSCredentialsProvider"
        if keys:
            conf["fs.s3a.access.key"] = s.access_key
            conf["fs.s3a.secret.key"] = s.secret_key
    return conf

def apply_to_spark(spark, s: S3Config | None = None) -> None:
    """Set the S3A settings on a running session's Hadoop configuration (the driver's, which
    Spark ships with every file scan and write to the executors). Set at run time rather than
    on the builder so that the keys never appear on the JVM's command line."""
    hconf = spark.sparkContext._jsc.hadoopConfiguration()
    for k, v in hadoop_conf(s).items():
        hconf.set(k, v)
