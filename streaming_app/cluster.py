"""A Spark standalone cluster (one master, N workers) run from the pyspark wheel, on loopback.

`ivmstream cluster start|stop|status` and the cluster tests use this module. The wheel has
``bin/spark-class`` but none of Spark's ``sbin/start-*.sh`` scripts, so each daemon is one
``spark-class`` process (it execs the JVM: its pid is the JVM's). Everything binds 127.0.0.1
(``SPARK_LOCAL_IP`` and ``--host``; executors inherit the worker's environment), the master's
REST submission server (port 6066 by default since Spark 4.1) is off, each worker's work dir
(executor logs, the jars and files of each application) lives under ``home``, and the daemons
log to files there at WARN. Start records one pid file per daemon and waits until the master's
JSON page lists every worker as ALIVE; stop signals a recorded pid only after checking in
``/proc/<pid>/cmdline`` that it is that daemon of this cluster (its main class and the
``-Divmstream.cluster=<home>`` marker every daemon is started with).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from core.errors import IvmError
from core.process import alive
from devstack.process import LOOPBACK, cmdline, port_open, reap, tail, terminate

MASTER_MAIN = "org.apache.spark.deploy.master.Master"
WORKER_MAIN = "org.apache.spark.deploy.worker.Worker"
# The daemons themselves are small (they only start executors and hold their registry).
DAEMON_MEMORY = "256m"

class ClusterError(IvmError):
    code = "IVM520"

def spark_home() -> Path:
    """The pyspark wheel's folder: it has ``bin/spark-class``, ``bin/spark-submit`` and ``jars/``."""

    spec = importlib.util.find_spec("pyspark")
    if spec is None or spec.origin is None:
        raise ClusterError("pyspark is not installed in this environment (run `make setup`)")
    return Path(spec.origin).parent

@dataclass
class StandaloneCluster:
    """Master + ``workers`` workers on loopback; ``home`` holds pid files, logs and work dirs."""

    home: Path
    port: int = 7177
    ui_port: int = 8180  # the master's web UI; worker i (1-based) serves its UI on ui_port + i
    workers: int = 2
    cores: int = 1
    memory: str = "1g"

    @property
    def url(self) -> str:
        return f"spark://{LOOPBACK}:{self.port}"

    @property
    def ui_url(self) -> str:
        return f"http://{LOOPBACK}:{self.ui_port}"

    def _daemons(self) -> list[str]:
        return ["master"] + [f"worker-{i}" for i in range(1, self.workers + 1)]

    def _pid_file(self, name: str) -> Path:
        return self.home / f"{name}.pid"

    def _marker(self) -> str:
        return f"-Divmstream.cluster={self.home.resolve()}"

    def _is_ours(self, pid: int, name: str) -> bool:
        args = cmdline(pid)
        main = MASTER_MAIN if name == "master" else WORKER_MAIN
        return main in args and self._marker() in args

    def pid(self, name: str) -> int | None:
        """The recorded pid of a daemon if it is alive and is that daemon of this cluster."""
        try:
            pid = int(self._pid_file(name).read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) and self._is_ours(pid, name) else None

    def recorded(self) -> list[str]:
        """Daemons with a pid file (whatever runs under it), master first."""
        names = sorted(p.stem for p in self.home.glob("*.pid"))
        return [n for n in names if n == "master"] + [n for n in names if n != "master"]

    def check_pid_files(self) -> list[str]:
        """Remove pid files that name a process that is gone or is not ours, with a note each
        (that process is left alone)."""
        notes = []
        for name in self.recorded():
            f = self._pid_file(name)
            try:
                pid = int(f.read_text().strip())
            except (OSError, ValueError):
                pid = None
            if pid is not None and alive(pid) and self._is_ours(pid, name):
                continue
            why = ("holds no pid" if pid is None else f"names pid {pid}, which is not running" if not alive(pid)
                   else f"names pid {pid}, which is not this cluster's {name}; left it alone")
            f.unlink(missing_ok=True)
            notes.append(f"{f} {why}: removed the stale pid file")
        return notes

    def _env(self) -> dict:
        env = dict(os.environ)
        home = spark_home()
        quiet = self._log4j()
        daemon_opts = f"{self._marker()} -Dlog4j2.configurationFile=file:{quiet}"
        env.update({
            "SPARK_HOME": str(home),
            "SPARK_LOCAL_IP": LOOPBACK,
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            "SPARK_MASTER_OPTS": f"{daemon_opts} -Dspark.master.rest.enabled=false",
            "SPARK_WORKER_OPTS": daemon_opts,
        })
        env.pop("SPARK_CONF_DIR", None)
        return env

    def _log4j(self) -> Path:
        p = self.home / "log4j2.properties"
        p.write_text(
            "rootLogger.level=warn\nrootLogger.appenderRef.stderr.ref=console\n"
            "appender.console.type=Console\nappender.console.name=console\nappender.console.target=SYSTEM_ERR\n"
            "appender.console.layout.type=PatternLayout\nappender.console.layout.pattern=%d %p %c{1}: %m%n%ex\n"
            # the master's and workers' lines that say who joined and left, and where
            "logger.master.name=org.apache.spark.deploy.master.Master\nlogger.master.level=info\n"
            "logger.worker.name=org.apache.spark.deploy.worker.Worker\nlogger.worker.level=info\n")
        return p

    def _spawn(self, name: str, args: list[str], env: dict) -> int:
        log = open(self.home / f"{name}.log", "ab")
        proc = subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=env, cwd=self.home,
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        self._pid_file(name).write_text(str(proc.pid))
        return proc.pid

    def start(self, timeout_s: float = 120.0) -> "StandaloneCluster":
        """Start the daemons that are not running and return once every worker is ALIVE."""
        self.home.mkdir(parents=True, exist_ok=True)
        self.check_pid_files()
        env = self._env()
        if self.pid("master") is None:
            for p, what in ((self.port, "master port"), (self.ui_port, "master UI port")):
                if port_open(p):
                    raise ClusterError(f"{what} {p} is already taken by another process; choose another "
                                       "with --port / --ui-port")
            self._spawn("master", [MASTER_MAIN, "--host", LOOPBACK, "--port", str(self.port),
                                   "--webui-port", str(self.ui_port)], env)
        self._wait(timeout_s, lambda st: st is not None, "master")
        for i in range(1, self.workers + 1):
            name = f"worker-{i}"
            if self.pid(name) is not None:
                continue
            work = self.home / "work" / name
            work.mkdir(parents=True, exist_ok=True)
            self._spawn(name, [WORKER_MAIN, "--host", LOOPBACK, "--cores", str(self.cores), "--memory", self.memory,
                               "--webui-port", str(self.ui_port + i), "--work-dir", str(work), self.url], env)
        self._wait(timeout_s, lambda st: st is not None and len(_alive_workers(st)) >= self.workers,
                   f"{self.workers} workers")
        return self

    def _wait(self, timeout_s: float, ok, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for name in self._daemons():
                f = self._pid_file(name)
                if f.exists():
                    pid = int(f.read_text().strip() or 0)
                    reap(pid)
                    if not alive(pid):
                        raise ClusterError(f"Spark {name} (pid {pid}) exited during start-up:\n"
                                           f"{tail(self.home / f'{name}.log')}")
            if ok(self.master_state()):
                return
            time.sleep(0.5)
        raise ClusterError(f"Spark standalone {what} not ready after {timeout_s:.0f}s; see the logs in {self.home}")

    def master_state(self) -> dict | None:
        """The master's JSON status page (workers, cores, memory, applications), or None."""
        try:
            with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=3) as r:
                return json.loads(r.read())
        except (OSError, urllib.error.URLError, ValueError):
            return None

    def stop(self, timeout_s: float = 30.0) -> list[str]:
        """End the recorded daemons (workers first, then the master); returns their names.
        A pid that is not this cluster's daemon is never signalled."""
        stopped = []
        for name in reversed(self.recorded()):
            pid = self.pid(name)
            if pid is None:
                continue
            terminate(pid, timeout_s)
            self._pid_file(name).unlink(missing_ok=True)
            stopped.append(name)
        self.check_pid_files()
        return stopped

    def status(self) -> dict:
        st = self.master_state()
        workers = _alive_workers(st) if st else []
        return {
            "running": self.pid("master") is not None and st is not None,
            "master": self.url, "ui": self.ui_url, "home": str(self.home),
            "pids": {n: self.pid(n) for n in self.recorded()},
            "workers_alive": len(workers),
            "cores": sum(w.get("cores", 0) for w in workers),
            "memory_mb": sum(w.get("memory", 0) for w in workers),
            "applications": [a.get("name") for a in (st or {}).get("activeapps", [])],
        }

def _alive_workers(state: dict) -> list[dict]:
    return [w for w in state.get("workers", []) if w.get("state") == "ALIVE"]
