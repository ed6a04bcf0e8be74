"""Real Redis servers for the Python tests: started on free loopback ports (never 6379), each in
its own temporary directory, stopped by pid. A 3-master Redis Cluster is built with
``redis-cli --cluster create``. No mocks."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import ratekeeper

REDIS_SERVER = "/usr/bin/redis-server" if os.path.exists("/usr/bin/redis-server") else "redis-server"
REDIS_CLI = "/usr/bin/redis-cli" if os.path.exists("/usr/bin/redis-cli") else "redis-cli"
VECTORS = Path(__file__).resolve().parents[2] / "tests" / "vectors"


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A free loopback port, never 6379, whose cluster bus port (+10000) is free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != 6379 and port < 55_000 and _port_free(port) and _port_free(port + 10_000):
            return port


def _wait(what: str, ready: Callable[[], bool], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class RedisServer:
    """One redis-server process in a temporary directory."""

    def __init__(self, *extra: str) -> None:
        if shutil.which(REDIS_SERVER) is None:
            raise RuntimeError("redis-server is required (scripts/test installs it)")
        self.port = free_port()
        self.dir = tempfile.mkdtemp(prefix="ratekeeper-py-redis-")
        self._args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
                      "--appendonly", "no", "--protected-mode", "no", *extra]
        self._log = open(os.path.join(self.dir, "redis.log"), "wb")
        self._launch()

    def _launch(self) -> None:
        self.proc = subprocess.Popen(self._args, cwd=self.dir, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        _wait(f"redis-server on port {self.port}", lambda: _listening(self.port))

    def restart(self) -> None:
        """SIGKILL, as a crash would, then the server again on the same port: empty, as no
        persistence is configured."""
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()
        self._launch()

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def cli(self, *args: str) -> str:
        out = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), *args],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.pid, signal.SIGCONT)
            os.kill(self.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(self.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


class RedisCluster:
    """Three cluster-enabled masters joined with ``redis-cli --cluster create``."""

    def __init__(self) -> None:
        self.nodes: list[RedisServer] = []
        try:
            for _ in range(3):
                self.nodes.append(RedisServer("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
                                              "--cluster-node-timeout", "2000"))
            addresses = [f"127.0.0.1:{n.port}" for n in self.nodes]
            out = subprocess.run([REDIS_CLI, "--cluster", "create", *addresses, "--cluster-replicas", "0",
                                  "--cluster-yes"], capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                raise RuntimeError(f"cluster create failed: {out.stdout}{out.stderr}")
            _wait("cluster_state:ok on every node",
                  lambda: all("cluster_state:ok" in n.cli("CLUSTER", "INFO") for n in self.nodes), timeout=30)
        except BaseException:
            self.stop()
            raise

    @property
    def seeds(self) -> list[str]:
        return [n.url for n in self.nodes]

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    server = RedisServer()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    cluster = RedisCluster()
    yield cluster
    cluster.stop()


_prefixes = itertools.count()

# Tests check behaviour, not latency: generous deadlines, so a loaded machine (2 cores shared
# with builds) does not turn a slow answer into a Timeout.
REDIS_OPTIONS: dict[str, float] = {"deadline": 5.0, "connect_timeout": 5.0}


def unique_prefix() -> str:
    return f"py{os.getpid()}x{next(_prefixes)}"


MakeBackend = Callable[..., ratekeeper.Backend]


@pytest.fixture(params=["memory", "redis", "cluster"])
def make_backend(request: pytest.FixtureRequest) -> MakeBackend:
    """A factory of fresh backends of each kind (Redis ones with their own key prefix);
    keyword arguments (``clock=``...) are passed on."""
    kind = request.param
    if kind == "memory":
        return lambda **kw: ratekeeper.Backend.memory(**kw)
    if kind == "redis":
        server: RedisServer = request.getfixturevalue("redis_server")
        return lambda **kw: ratekeeper.Backend.redis(server.url, **{**REDIS_OPTIONS, "prefix": unique_prefix(), **kw})
    cluster: RedisCluster = request.getfixturevalue("redis_cluster")
    return lambda **kw: ratekeeper.Backend.cluster(cluster.seeds, **{**REDIS_OPTIONS, "prefix": unique_prefix(), **kw})


class Calls:
    """Makes a limiter call with the sync method or its asyncio form, so one test body checks
    both (``await calls(limiter.check, "k")`` runs ``check`` or awaits ``acheck``)."""

    def __init__(self, mode: str) -> None:
        self.mode = mode

    async def __call__(self, method: Callable[..., object], *args: object, **kwargs: object) -> object:
        if self.mode == "sync":
            return method(*args, **kwargs)
        owner = getattr(method, "__self__")
        future = getattr(owner, "a" + getattr(method, "__name__"))(*args, **kwargs)
        return await future  # type: ignore[no-any-return]


@pytest.fixture(params=["sync", "async"])
def calls(request: pytest.FixtureRequest) -> Calls:
    return Calls(request.param)
