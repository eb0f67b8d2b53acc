"""``[s3]``: how to reach the bucket of a lake on an object store (``lake_root = "s3a://..."``).

Each key left out of the file comes from its standard AWS variable (AWS_ENDPOINT_URL,
AWS_REGION, AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY); without an endpoint it is AWS's own
S3, and without keys the AWS SDKs' usual chain (instance profile, ~/.aws) finds them, except on
a loopback endpoint, where the key pair `ivmstream s3 start` uses when none is exported signs. The keys
never print: not in a message, not in the config's repr, not on a command line
(connectors/object_store.py hands them to Spark inside the running JVM).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from core.errors import ConfigError
from core.config.common import check_keys, want_bool, want_str, env

_S3_KEYS = {"endpoint", "region", "path_style", "access_key", "secret_key"}
_ENDPOINT = re.compile(r"https?://[A-Za-z0-9_.:\[\]-]+/?")
_LOOPBACK = re.compile(r"https?://(127\.[0-9.]+|localhost|\[::1\])(:[0-9]+)?/?")
# The key pair of `ivmstream s3 start` when AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY are not set,
# and of a job whose [s3] endpoint is on loopback with no keys anywhere: that server listens on
# loopback only and guards throwaway data, like a database's development password. Here, in the
# schema, so that the server and the job agree on it without one importing the other.
LOCAL_ACCESS_KEY = "ivmstream"
LOCAL_SECRET_KEY = "ivmstream-local-secret"


@dataclass(frozen=True)
class S3Config:
    endpoint: str | None = None  # None: AWS's own S3
    region: str = "us-east-1"
    path_style: bool = False  # http://host/bucket/key rather than http://bucket.host/key
    access_key: str | None = field(default=None, repr=False)
    secret_key: str | None = field(default=None, repr=False)
    # where the keys came from (for messages; never the keys): "config", "environment", "local
    # server" (the development pair above) or None (the AWS SDKs' own chain)
    keys_from: str | None = None


def parse_s3(raw: Any, where: str) -> S3Config:
    w = f"{where}: [s3]"
    check_keys(raw, _S3_KEYS, w)
    endpoint = raw.get("endpoint", env("aws_endpoint_url"))
    if endpoint is not None:
        endpoint = want_str(endpoint, w, "endpoint")
        if not _ENDPOINT.fullmatch(endpoint):
            raise ConfigError(f"{w}: endpoint {endpoint[:80]!r} must be http://host:port or https://host[:port]")
        endpoint = endpoint.rstrip("/")
    region = want_str(raw.get("region", env("aws_region", S3Config.region)), w, "region")
    # an endpoint of one's own (S3Proxy, MinIO, Ceph) answers path-style requests by default
    path_style = want_bool(raw.get("path_style", endpoint is not None), w, "path_style")
    keys_from = "config" if "access_key" in raw or "secret_key" in raw else "environment"
    access = raw.get("access_key", env("aws_access_key_id"))
    secret = raw.get("secret_key", env("aws_secret_access_key"))
    for key, v in (("access_key", access), ("secret_key", secret)):
        if v is not None and (not isinstance(v, str) or not v.strip()):
            raise ConfigError(f"{w}: {key} must be a non-empty string")  # the value is never shown
    if (access is None) != (secret is None):
        raise ConfigError(f"{w}: give both access_key and secret_key (or AWS_ACCESS_KEY_ID and "
                          "AWS_SECRET_ACCESS_KEY), or neither (then the AWS SDKs' own chain finds them)")
    if access is None and endpoint is not None and _LOOPBACK.fullmatch(endpoint):
        # `ivmstream s3 start` with no keys exported signs with the development pair: so does a
        # job that reaches a loopback endpoint with no keys, as the README's local steps do
        access, secret, keys_from = LOCAL_ACCESS_KEY, LOCAL_SECRET_KEY, "local server"
    if access is None:
        keys_from = None
    return S3Config(endpoint=endpoint, region=region, path_style=path_style, access_key=access, secret_key=secret,
                    keys_from=keys_from)
