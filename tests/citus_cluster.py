"""A real Citus cluster for the tests: a coordinator and two workers, three PostgreSQL 15 servers
on loopback ports, each with the ``citus`` extension (installed by ``../shared/citus/install.sh``;
``.ci/run`` does it).

The cluster is made once and shared by every test and every xdist worker of a run (and of later
runs, while it lives): the first to need it makes it under a file lock, in
``$FLEETSCOPE_TEST_CITUS_DIR`` (default ``/tmp/fleetscope-citus-<uid>``), and the others read its
ports from there. Each test gets a database of its own on all three nodes, with the extension
and the workers registered, dropped after the test, as ``pg_url`` does on plain PostgreSQL; the
databases are made one at a time under the same lock (two at once collide on the workers), with
4 shards a distributed table instead of Citus' 32 (a test's upgrade then takes about 3 s, not 5).
The servers run with ``fsync`` off: they hold only test data.
"""

from __future__ import annotations

import fcntl
import json
import os
import secrets
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

CITUS_DIR = Path(os.environ.get("FLEETSCOPE_TEST_CITUS_DIR", f"/tmp/fleetscope-citus-{os.getuid()}"))
NODES = ("coordinator", "worker1", "worker2")
_PORT_SEARCH_FROM = 6450  # below free_port's blocks (8000 and up), away from the usual services' ports


def pg_bin() -> Path | None:
    """The PostgreSQL server's programs (initdb, pg_ctl), where Debian puts them."""
    for found in sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"), reverse=True):
        return found.parent
    return None


def citus_installed() -> str | None:
    """None when a cluster can be made here, else why not."""
    bin_dir = pg_bin()
    if bin_dir is None:
        return "no PostgreSQL server programs under /usr/lib/postgresql"
    libdir = subprocess.run([str(bin_dir / "pg_config"), "--pkglibdir"], capture_output=True, text=True).stdout.strip()
    if not (Path(libdir) / "citus.so").exists():
        return f"Citus is not installed in {libdir} (run ../shared/citus/install.sh)"
    return None


@dataclass(frozen=True)
class CitusCluster:
    ports: tuple[int, int, int]  # coordinator, worker1, worker2
    dir: Path = CITUS_DIR  # the nodes' data directories and logs

    def _admin(self, port: int, dbname: str = "postgres"):  # type: ignore[no-untyped-def]
        import psycopg

        return psycopg.connect(host="127.0.0.1", port=port, user="postgres", dbname=dbname, autocommit=True,
                               connect_timeout=10)

    def create_database(self, shards: int | None = 4) -> str:
        """A new database on every node, Citus set up in it; its SQLAlchemy URL (the coordinator's).
        ``shards`` a distributed table: 4 for the tests (2 a worker: still spread over both workers,
        and a test's upgrade distributes its tables in 3 s instead of 5), None for Citus' default
        (32), what a benchmark measures."""
        name = "fleetscope_citus_" + secrets.token_hex(6)
        with _cluster_lock():  # two at once collide on the workers' catalogs ("tuple concurrently updated")
            self._create(name, shards)
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.ports[0]}/{name}"

    def set_durability(self, settings: dict[str, str]) -> None:
        """``fsync``, ``synchronous_commit``, ``full_page_writes``... on every node (the cluster
        starts without them: it holds test data), so a benchmark compares it with a durable server."""
        for port in self.ports:
            with self._admin(port) as admin:
                for setting, value in settings.items():
                    admin.execute(f"ALTER SYSTEM SET {setting} = '{value}'")
                admin.execute("SELECT pg_reload_conf()")

    def _create(self, name: str, shards: int | None) -> None:
        for port in self.ports:
            with self._admin(port) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
            with self._admin(port, name) as db:
                db.execute("CREATE EXTENSION citus")
        with self._admin(self.ports[0], name) as db:
            if shards is not None:
                db.execute(f'ALTER DATABASE "{name}" SET citus.shard_count = {int(shards)}')
            db.execute("SELECT citus_set_coordinator_host('127.0.0.1', %s)", (self.ports[0],))
            for port in self.ports[1:]:
                db.execute("SELECT citus_add_node('127.0.0.1', %s)", (port,))

    def drop_database(self, url: str) -> None:
        name = url.rsplit("/", 1)[1]
        for port in self.ports:
            with self._admin(port) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def alive(self) -> bool:
        try:
            for port in self.ports:
                self._admin(port).close()
        except Exception:
            return False
        return True

    def stop_node(self, index: int) -> None:
        _pg_ctl("stop", self.dir / NODES[index], "-m", "fast")

    def start_node(self, index: int) -> None:
        _pg_ctl("start", self.dir / NODES[index], "-l", str(self.dir / f"{NODES[index]}.log"))

    def destroy(self) -> None:
        """Stop every node and remove its data (a private cluster's end)."""
        for node in NODES:
            _stop_quietly(self.dir / node)
        shutil.rmtree(self.dir, ignore_errors=True)


def _as_postgres(cmd: list[str]) -> list[str]:
    """The server refuses to run as root: run its programs as the postgres user then."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


def _pg_ctl(action: str, data: Path, *args: str) -> None:
    bin_dir = pg_bin()
    assert bin_dir is not None
    subprocess.run(_as_postgres([str(bin_dir / "pg_ctl"), action, "-D", str(data), "-w", "-t", "60", *args]),
                   check=True, capture_output=True)


def _ports_of_other_clusters() -> set[int]:
    """Every port a cluster made here holds, running or not: a node stopped by a fault test must
    find its port free when it starts again, not taken by a cluster made meanwhile."""
    taken: set[int] = set()
    for record in CITUS_DIR.parent.glob("fleetscope-citus*/ports.json"):
        try:
            taken.update(int(p) for p in json.loads(record.read_text()))
        except (OSError, ValueError, TypeError):
            continue
    return taken


def _free_ports(n: int) -> tuple[int, ...]:
    found: list[int] = []
    taken = _ports_of_other_clusters()
    port = _PORT_SEARCH_FROM
    while len(found) < n:
        if port in taken:
            port += 1
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
                found.append(port)
            except OSError:
                pass
        port += 1
    return tuple(found)


@contextmanager
def _cluster_lock() -> Iterator[None]:
    """The lock every process of a run (xdist workers, later runs) takes to make or change the cluster."""
    CITUS_DIR.mkdir(parents=True, exist_ok=True)
    with open(CITUS_DIR / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def ensure_cluster() -> CitusCluster:
    """The shared cluster, made (or restarted) if it is not running."""
    with _cluster_lock():
        state = CITUS_DIR / "cluster.json"
        if state.exists():
            cluster = CitusCluster(tuple(json.loads(state.read_text())["ports"]))  # type: ignore[arg-type]
            if cluster.alive():
                return cluster
            try:  # made before, stopped since (a reboot): start the nodes again
                for i in range(len(NODES)):
                    cluster.start_node(i)
                if cluster.alive():
                    return cluster
            except subprocess.CalledProcessError:
                pass
        cluster = _make_cluster()
        state.write_text(json.dumps({"ports": list(cluster.ports)}))
        return cluster


def private_cluster() -> CitusCluster:
    """A cluster of its own, for a test that stops its nodes (the shared one serves every other
    test at the same time); ``CitusCluster.destroy`` ends it."""
    with _cluster_lock():  # not two port searches at once
        return _make_cluster(Path(f"/tmp/fleetscope-citus-private-{os.getpid()}-{secrets.token_hex(3)}"))


def _make_cluster(where: Path = CITUS_DIR) -> CitusCluster:
    bin_dir = pg_bin()
    assert bin_dir is not None
    ports = _free_ports(len(NODES))
    where.mkdir(parents=True, exist_ok=True)
    (where / "ports.json").write_text(json.dumps(list(ports)))  # held until destroy() removes the folder
    if os.geteuid() == 0:
        shutil.chown(where, "postgres")
    for node, port in zip(NODES, ports):
        data = where / node
        if data.exists():
            _stop_quietly(data)
            shutil.rmtree(data)
        subprocess.run(_as_postgres([str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                                     "--no-sync"]), check=True, capture_output=True)
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{where}'\n"
                "shared_preload_libraries = 'citus'\nfsync = off\nsynchronous_commit = off\n"
                "full_page_writes = off\nmax_connections = 300\nmax_prepared_transactions = 300\n"
            )
        _pg_ctl("start", data, "-l", str(where / f"{node}.log"))
    cluster = CitusCluster(ports, where)  # type: ignore[arg-type]
    deadline = time.monotonic() + 30
    while not cluster.alive():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the Citus test cluster did not start (logs in {where})")
        time.sleep(0.2)
    return cluster


def _stop_quietly(data: Path) -> None:
    try:
        _pg_ctl("stop", data, "-m", "immediate")
    except subprocess.CalledProcessError:
        pass
