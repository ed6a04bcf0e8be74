"""Real HTTP servers and real client processes for the middleware tests.

A :class:`Server` is a uvicorn or gunicorn process serving an app on a free loopback port,
stopped by pid. :func:`burst` sends requests from several client processes at once (each its own
``httpx`` client) and returns every response's status and headers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import http_sfv
import httpx

from ..conftest import _listening, _wait, free_port

REPO = Path(__file__).resolve().parents[3]
APPS = Path(__file__).resolve().parent / "apps"
EXAMPLES = REPO / "examples" / "python" / "http"
BIN = Path(sys.executable).parent


class Server:
    """One server process (``argv`` gets ``{port}`` filled in), logging to a temporary file."""

    def __init__(self, argv: Sequence[str], *, cwd: Path, env: dict[str, str]) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile(prefix="ratekeeper-http-", suffix=".log", delete=False)
        full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(cwd), os.environ.get("PYTHONPATH", "")]), **env}
        self.proc = subprocess.Popen([a.format(port=self.port) for a in argv], cwd=cwd, env=full_env,
                                     stdout=self.log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     start_new_session=True)
        try:
            _wait(f"{argv[0]} on port {self.port}", self._ready, timeout=30)
        except BaseException:
            self.stop()
            raise

    def _ready(self) -> bool:
        if self.proc.poll() is not None:
            raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.output()}")
        return _listening(self.port)

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def stop(self) -> None:
        if self.proc.poll() is None:
            # The server's own process group (gunicorn's workers with it), by the pid we started.
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.log.close()
        os.unlink(self.log.name)

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


def uvicorn(target: str, *, cwd: Path = APPS, env: dict[str, str], workers: int = 1) -> Server:
    """``uvicorn module:app`` (``workers`` > 1: that many processes sharing the port). uvicorn's
    own proxy-header rewriting is off (by default it believes ``X-Forwarded-For`` from
    127.0.0.1), so the client address the middleware sees is the socket's."""
    return Server([str(BIN / "uvicorn"), target, "--host", "127.0.0.1", "--port", "{port}", "--workers",
                   str(workers), "--log-level", "warning", "--no-proxy-headers"], cwd=cwd, env=env)


def gunicorn(target: str, *, cwd: Path = APPS, env: dict[str, str], workers: int = 2) -> Server:
    """``gunicorn module:app`` with ``workers`` sync worker processes."""
    return Server([str(BIN / "gunicorn"), target, "--bind", "127.0.0.1:{port}", "--workers", str(workers),
                   "--log-level", "warning"], cwd=cwd, env=env)


def example(path: str) -> tuple[Path, str]:
    """``(directory, module name)`` of a documented example, given by its path from the repository
    root (the path the docs include, so scripts/check-examples sees that a test runs it)."""
    file = REPO / path
    assert file.is_file(), path
    return file.parent, file.stem


def _fire(urls: list[str], n: int) -> list[tuple[int, dict[str, str]]]:
    out = []
    with httpx.Client(timeout=30) as client:
        for i in range(n):
            r = client.get(urls[i % len(urls)])
            out.append((r.status_code, dict(r.headers)))
    return out


def burst(urls: list[str], processes: int, per_process: int) -> list[tuple[int, dict[str, str]]]:
    """``processes`` client processes at once (forked: they import nothing new), each sending ``per_process`` GETs round-robin over
    ``urls``; every response's ``(status, headers)``."""
    with ProcessPoolExecutor(processes, mp_context=get_context("fork")) as pool:
        futures = [pool.submit(_fire, urls, per_process) for _ in range(processes)]
        return [resp for f in futures for resp in f.result()]


def clear_of_window_edge(interval: float, needed: float = 20.0) -> None:
    """Waits (rarely) until at least ``needed`` seconds remain in the current epoch-aligned fixed
    window of ``interval`` seconds, so a test's burst lands in one window."""
    left = interval - time.time() % interval
    if left < needed:
        time.sleep(left + 0.05)


def options(**kw: object) -> dict[str, str]:
    """The test apps read their options from ``RK_OPTIONS`` (JSON)."""
    return {"RK_OPTIONS": json.dumps(kw)}


def sf_list(value: str) -> list[tuple[str, dict[str, object]]]:
    """A draft-11 field parsed by ``http-sfv``: ``[(name, params)]``."""
    parsed = http_sfv.List()
    parsed.parse(value.encode())
    return [(str(member.value), dict(member.params)) for member in parsed]


def sf_dict(value: str) -> dict[str, object]:
    """A draft-7 ``RateLimit`` field parsed by ``http-sfv`` as a Structured Field Dictionary."""
    parsed = http_sfv.Dictionary()
    parsed.parse(value.encode())
    return {k: v.value for k, v in parsed.items()}


def sf_integer(value: str) -> int:
    """A draft-6 field (an sf-integer) parsed by ``http-sfv``."""
    parsed = http_sfv.Item()
    parsed.parse(value.encode())
    assert isinstance(parsed.value, int), value
    return parsed.value
