"""Real Redis servers for the Python tests: started on free loopback ports (never 6379), each in
its own temporary directory, stopped by pid; a 3-master Redis Cluster. The servers are the
fixture every suite shares (``rk-test-redis``, the binary of the workspace's ``test-support``
crate); this module keeps the Python API over it. No mocks."""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ratekeeper

REDIS_CLI = "/usr/bin/redis-cli" if os.path.exists("/usr/bin/redis-cli") else "redis-cli"
REPO = Path(__file__).resolve().parents[2]
VECTORS = REPO / "tests" / "vectors"


def _rk_test_redis_path() -> str:
    """The shared fixture's binary: ``RK_TEST_REDIS`` (the test scripts set it), else the debug
    build in the workspace's target directory, built on first use."""
    given = os.environ.get("RK_TEST_REDIS")
    if given:
        return given
    built = REPO / "target" / "debug" / "rk-test-redis"
    if not built.exists():
        subprocess.run(["cargo", "build", "--quiet", "-p", "ratekeeper-test-support", "--bin", "rk-test-redis"],
                       cwd=REPO, check=True)
    return str(built)


def rk_test_redis(*args: str, stdin: str | None = None) -> str:
    """Runs ``rk-test-redis ARGS`` and returns its output (an error names its complaint)."""
    out = subprocess.run([_rk_test_redis_path(), *args], capture_output=True, text=True, input=stdin, timeout=120)
    if out.returncode != 0:
        raise RuntimeError(f"rk-test-redis {' '.join(args)} failed: {out.stderr.strip()}")
    return out.stdout


def _start(*args: str) -> list[dict[str, Any]]:
    servers: list[dict[str, Any]] = json.loads(rk_test_redis("start", "--json", *args))["servers"]
    return servers


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
    """One redis-server process in a temporary directory (``extra``: more redis-server
    arguments)."""

    def __init__(self, *extra: str, started: dict[str, Any] | None = None) -> None:
        self._adopt(started if started is not None else _start("--", *extra)[0])
        self._stopped = False

    def _adopt(self, info: dict[str, Any]) -> None:
        self.port: int = info["port"]
        self.pid: int = info["pid"]
        self.dir: str = info["dir"]
        self._args: list[str] = info["args"]

    def restart(self) -> None:
        """SIGKILL, as a crash would, then the server again on the same port: empty, as no
        persistence is configured."""
        rk_test_redis("stop", "--keep-dir", str(self.pid))
        self._adopt(json.loads(rk_test_redis("launch", "--json", "--dir", self.dir, "--", *self._args))["servers"][0])

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def cli(self, *args: str) -> str:
        out = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), *args],
                             capture_output=True, text=True, timeout=30)
        return out.stdout.strip()

    def stop(self) -> None:
        if not self._stopped:
            self._stopped = True
            rk_test_redis("stop", str(self.pid))


class RedisCluster:
    """Three cluster-enabled masters joined with ``redis-cli --cluster create``."""

    def __init__(self) -> None:
        self.nodes = [RedisServer(started=info) for info in _start("--cluster")]

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
