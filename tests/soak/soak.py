"""The soak with faults: Python, Node and C processes hammer every limiter kind on a 3-master Redis
Cluster while a fault driver kills and restarts a master, SIGSTOPs one, flushes the script
caches, migrates a slot under load and kills a process holding leases; then the judge
(judge.py) checks every admitted call against its limiter's bound, every call's duration
against its deadline, the recovery after each fault and the dead caller's leases.

    python tests/soak/soak.py [--seconds 20] [--processes 6] [--rate 40] [--keep DIR]

`RATEKEEPER_SOAK_SECONDS` and `RATEKEEPER_SOAK_PROCESSES` set the defaults (the README's
figures: 600 and 16). Needs the ratekeeper Python package (the venv of scripts/test-python),
node, gcc, cargo, redis-server and redis-cli; builds the debug C library and Node addon as
scripts/test-c and scripts/test-node do. Every server and process it starts is stopped by pid.
Exits 1 when the judge finds a failure."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from config import Config, LimiterConf  # noqa: E402
from judge import judge  # noqa: E402

REDIS_SERVER = shutil.which("redis-server") or "redis-server"
REDIS_CLI = shutil.which("redis-cli") or "redis-cli"
DEADLINE = 0.2
LOCK_TIMEOUT = 1.5
KEYS = ["k0", "k1", "k2"]
# Every limiter kind, sized so that even the short run's processes go well past each limit
# (each limiter and key gets about processes * rate / 27 calls a second). Costs above 1
# exercise the weighted bounds. Durations divide into whole microseconds.
LIMITERS = [
    LimiterConf("tb", 2, {"kind": "token_bucket", "rate": 5, "capacity": 5}),
    LimiterConf("leaky", 1, {"kind": "leaky", "size": 3, "drain": 0.6}),
    LimiterConf("points", 3, {"kind": "points", "capacity": 10, "refill": 2}),
    LimiterConf("bucket", 1, {"kind": "bucket", "limit": 3, "interval": 0.5}),
    LimiterConf("window", 1, {"kind": "window", "limit": 3, "interval": 0.5}),
    LimiterConf("windows", 1, {"kind": "windows", "windows": [[2, 0.2], [5, 1]]}),
    LimiterConf("sliding", 2, {"kind": "sliding_window", "limits": [[1, 5, 0.1]]}),
    LimiterConf("calendar", 1, {"kind": "calendar", "limit": 50, "period": "day", "tz": "UTC"}),
    LimiterConf("lease", 1, {"kind": "concurrent", "limit": 2, "lock_timeout": LOCK_TIMEOUT}),
]
LEASE_LIMITER, LEASE_LIMIT = "lease", 2
# kill_worker first: its leases expire (lock_timeout) while the harmless flush runs.
FAULTS = ["kill_worker", "flush_scripts", "migrate_slot", "pause_master", "kill_master"]
# About how long each fault lasts (a restarted master refuses writes for 2 s: Redis's own delay).
LASTS = {"kill_worker": 0.5, "flush_scripts": 0.5, "migrate_slot": 1.0, "pause_master": 1.0, "kill_master": 3.5}
# Faults never overlap: each starts this long after the previous one ended (its recovery is
# judged until the next one starts).
SETTLE = 1.5
WARMUP, TAIL = 2.0, 2.0
DOWN = 1.0  # how long a killed master stays down, and a paused one stopped (< cluster-node-timeout)


def log(message: str) -> None:
    print(f"soak {time.strftime('%H:%M:%S')}: {message}", flush=True)


def free_port() -> int:
    """A free loopback port, never 6379, whose cluster bus port (+10000) is free too."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port == 6379 or port >= 55_000:
            continue
        try:
            with socket.socket() as bus:
                bus.bind(("127.0.0.1", port + 10_000))
            return port
        except OSError:
            continue


def wait_for(what: str, ready, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise RuntimeError(f"timed out waiting for {what}")
        time.sleep(0.01)


def listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


class Master:
    """One cluster-enabled redis-server in its own directory; restarted with the same
    directory, so it keeps its node id, its slots (nodes.conf) and its data (an append-only
    file: every write reaches the file before its reply is sent, so a SIGKILL loses nothing
    acknowledged — the judge's accounting needs the counts to survive a restart)."""

    def __init__(self, base: Path) -> None:
        self.port = free_port()
        self.dir = base / f"redis-{self.port}"
        self.dir.mkdir()
        self.proc: subprocess.Popen[bytes] | None = None
        self.start()

    def start(self) -> None:
        args = [REDIS_SERVER, "--port", str(self.port), "--bind", "127.0.0.1", "--protected-mode", "no",
                "--save", "", "--appendonly", "yes", "--appendfsync", "no", "--auto-aof-rewrite-min-size", "1mb", "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "3000", "--dir", str(self.dir)]
        with open(self.dir / "redis.log", "ab") as out:
            self.proc = subprocess.Popen(args, cwd=self.dir, stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)
        wait_for(f"redis-server on {self.port}", lambda: listening(self.port))

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}"

    def cli(self, *args: str) -> str:
        out = subprocess.run([REDIS_CLI, "-h", "127.0.0.1", "-p", str(self.port), *args], capture_output=True,
                             text=True, timeout=30)
        return out.stdout.strip()

    def signal(self, sig: int) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def memory_dir() -> str | None:
    """A tmpfs (/dev/shm) when there is one. The masters' append-only files and the processes'
    logs are written there: on a disk, a busy machine's writeback throttling blocks a write()
    for a second at a time, which stalls every Redis master at once (seen as every call timing
    out with no fault) and every process writing its log."""
    return "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None


class Cluster:
    def __init__(self, base: Path) -> None:
        self.masters: list[Master] = []
        self.base = Path(tempfile.mkdtemp(prefix="ratekeeper-soak-redis-", dir=memory_dir()))
        base = self.base
        try:
            for _ in range(3):
                self.masters.append(Master(base))
            out = subprocess.run([REDIS_CLI, "--cluster", "create", *[f"127.0.0.1:{m.port}" for m in self.masters],
                                  "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True,
                                 timeout=60)
            if out.returncode != 0:
                raise RuntimeError(f"cluster create failed: {out.stdout}{out.stderr}")
            self.wait_ok()
        except BaseException:
            self.stop()
            raise

    def wait_ok(self) -> None:
        wait_for("cluster_state:ok on every master",
                 lambda: all("cluster_state:ok" in m.cli("CLUSTER", "INFO") for m in self.masters))

    def stop(self) -> None:
        for m in self.masters:
            m.stop()
        shutil.rmtree(self.base, ignore_errors=True)


def build() -> tuple[Path, Path]:
    """The debug C library and Node addon (as scripts/test-c and scripts/test-node build them),
    and the C worker linked against the library."""
    subprocess.run(["cargo", "build", "--quiet", "--locked", "-p", "ratekeeper-ffi", "--features", "test-hooks", "--lib"], cwd=ROOT, check=True)
    subprocess.run(["node", str(ROOT / "node" / "scripts" / "build.js"), "--debug"], cwd=ROOT, check=True,
                   stdout=subprocess.DEVNULL)
    lib = ROOT / "target" / "debug"
    worker = ROOT / "target" / "soak-worker"
    subprocess.run(["gcc", "-std=gnu11", "-O1", "-Wall", "-Werror", "-o", str(worker), str(HERE / "worker.c"),
                    f"-I{ROOT / 'include'}", f"-L{lib}", "-lratekeeper", f"-Wl,-rpath,{lib}"], check=True)
    return worker, ROOT / "node"


class Soak:
    def __init__(self, args: argparse.Namespace, base: Path) -> None:
        self.args, self.base = args, base
        self.rng = random.Random(args.seed)
        self.prefix = f"soak{os.getpid()}"
        self.c_worker, self.node_package = build()
        self.cluster = Cluster(base)
        self.procs: list[subprocess.Popen[bytes]] = []
        self.workers: list[dict[str, str]] = []
        self.faults: list[dict[str, object]] = []
        self.victims = 0

    def config(self, worker_id: str, mode: str, start: float, stop: float) -> Config:
        return Config(seeds=[m.url for m in self.cluster.masters], prefix=self.prefix, deadline=DEADLINE,
                      rate=self.args.rate, start=start, stop=stop, log=str(self.base / f"{worker_id}.log"),
                      seed=self.rng.randrange(1, 2**31), mode=mode, keys=KEYS, hold_ms=20, victim_hold_ms=1000,
                      lease_limiter=LEASE_LIMITER, lease_limit=LEASE_LIMIT, limiters=LIMITERS)

    def spawn(self, worker_id: str, language: str, mode: str, start: float, stop: float) -> subprocess.Popen[bytes]:
        config = self.config(worker_id, mode, start, stop)
        path = str(self.base / f"{worker_id}.conf")
        config.write(path)
        command = {
            "python": [sys.executable, str(HERE / "worker.py"), path],
            "node": ["node", str(HERE / "worker.js"), str(self.node_package), path],
            "c": [str(self.c_worker), path],
        }[language]
        with open(self.base / f"{worker_id}.err", "wb") as err:
            proc = subprocess.Popen(command, stdout=err, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append(proc)
        self.workers.append({"id": worker_id, "language": language, "log": config.log, "pid": str(proc.pid)})
        return proc

    def run(self) -> Path:
        args = self.args
        start = time.time() + 3.0  # every process is up and connected by then
        stop = start + args.seconds
        for i in range(args.processes - 1):
            self.spawn(f"w{i}", ["python", "node", "c"][i % 3], "worker", start, stop)
        victim = self.spawn("victim0", "python", "victim", start, stop)
        canary = subprocess.Popen([sys.executable, str(HERE / "canary.py"), str(self.base / "canary.log"), str(stop)],
                                  stdin=subprocess.DEVNULL)
        self.procs.append(canary)
        cycles = max(1, int((args.seconds - WARMUP - TAIL) / (len(FAULTS) * 4.0)))
        gap = (args.seconds - WARMUP - TAIL) / (len(FAULTS) * cycles)
        log(f"{args.processes} processes, {args.seconds:.0f} s, a fault every {gap:.1f} s (at least {SETTLE} s after "
            f"the last one ended); logs in {self.base}")
        at, ended = start + WARMUP, 0.0
        for n in itertools.count():
            kind = FAULTS[n % len(FAULTS)]
            at = max(at, ended + SETTLE)
            if n >= len(FAULTS) and at + LASTS[kind] > stop - TAIL:
                break  # each kind runs at least once
            time.sleep(max(0.0, at - time.time()))
            if kind == "kill_worker":
                victim = self.kill_worker(victim, stop)
            else:
                getattr(self, kind)()
            ended = time.time()
            at += gap
        time.sleep(max(0.0, stop - time.time()))
        for p in self.procs:
            try:
                p.wait(timeout=max(5.0, stop + 10 - time.time()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs.remove(canary)
        bad = [w for w, p in zip(self.workers, self.procs) if p.returncode not in (0, -signal.SIGKILL)]
        for w in bad:
            log(f"worker {w['id']} ({w['language']}) failed: {(self.base / (w['id'] + '.err')).read_text()[-2000:]}")
        if bad:
            raise SystemExit(1)
        run = {"seconds": args.seconds, "processes": args.processes, "deadline": DEADLINE,
               "lease_limiter": LEASE_LIMITER, "workers": self.workers, "canary": str(self.base / "canary.log"), "faults": self.faults,
               "limiters": [{"name": l.name, "spec": l.spec} for l in LIMITERS]}
        (self.base / "run.json").write_text(json.dumps(run, indent=1))
        return self.base

    def record(self, kind: str, started: float, detail: str, **extra: object) -> None:
        ended = time.time()
        self.faults.append({"kind": kind, "start": started, "end": ended, "detail": detail, **extra})
        log(f"{kind}: {detail} ({(ended - started) * 1000:.0f} ms)")

    def kill_master(self) -> None:
        master = self.rng.choice(self.cluster.masters)
        started = time.time()
        master.kill()
        time.sleep(DOWN)
        master.start()
        restarted = time.time()
        # A restarted master answers CLUSTERDOWN for a while (Redis's own writable delay); the
        # fault ends when it serves again.
        wait_for(f"{master.port} serving", lambda: "cluster_state:ok" in master.cli("CLUSTER", "INFO"))
        serving = time.time()
        # If it was away longer than cluster-node-timeout, the other masters marked it failed and
        # refuse with CLUSTERDOWN until they see it again: the fault lasts until all are ok.
        self.cluster.wait_ok()
        self.record("kill_master", started, f"SIGKILL {master.port}, restarted after {DOWN:.0f} s, serving "
                    f"{(serving - restarted) * 1000:.0f} ms later, cluster ok {(time.time() - serving) * 1000:.0f} ms "
                    "after that")

    def pause_master(self) -> None:
        master = self.rng.choice(self.cluster.masters)
        started = time.time()
        master.signal(signal.SIGSTOP)
        time.sleep(DOWN)
        master.signal(signal.SIGCONT)
        self.record("pause_master", started, f"SIGSTOP {master.port} for {DOWN:.0f} s")

    def flush_scripts(self) -> None:
        started = time.time()
        for m in self.cluster.masters:
            m.cli("SCRIPT", "FLUSH")
        self.record("flush_scripts", started, "SCRIPT FLUSH on every master")

    def migrate_slot(self) -> None:
        """Moves the slot of one of the run's keys to another master while the processes use it
        (IMPORTING/MIGRATING, MIGRATE of every key in it, SETSLOT NODE everywhere)."""
        found = [(m, k) for m in self.cluster.masters for k in m.cli("--scan", "--pattern", f"{self.prefix}:*").split()
                 if k.rsplit(":", 1)[-1] in KEYS]  # a limiter's state, not the registry's
        source, key = self.rng.choice(found)
        target = self.rng.choice([m for m in self.cluster.masters if m is not source])
        slot = source.cli("CLUSTER", "KEYSLOT", key)
        source_id, target_id = source.cli("CLUSTER", "MYID"), target.cli("CLUSTER", "MYID")
        started = time.time()
        assert target.cli("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id) == "OK"
        assert source.cli("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id) == "OK"
        time.sleep(0.2)
        moved = 0
        for _ in range(50):
            keys = source.cli("CLUSTER", "GETKEYSINSLOT", slot, "1000").split()
            if not keys:
                break
            out = source.cli("MIGRATE", "127.0.0.1", str(target.port), "", "0", "5000", "KEYS", *keys)
            assert out in ("OK", "NOKEY"), out
            moved += len(keys)
            time.sleep(0.05)
        time.sleep(0.2)
        for m in [target, source] + [m for m in self.cluster.masters if m is not source and m is not target]:
            m.cli("CLUSTER", "SETSLOT", slot, "NODE", target_id)
        self.record("migrate_slot", started, f"slot {slot} ({moved} keys) {source.port} -> {target.port}")

    def kill_worker(self, victim: subprocess.Popen[bytes], stop: float) -> subprocess.Popen[bytes]:
        """SIGKILLs the victim once it holds every slot of the lease limiter, and starts the next."""
        entry = next(w for w in self.workers if w["pid"] == str(victim.pid))
        wait_for(f"{entry['id']} holding {LEASE_LIMIT} leases", lambda: self.holding(Path(entry["log"])), timeout=10)
        started = time.time()
        victim.kill()
        victim.wait()
        self.record("kill_worker", started, f"SIGKILL {entry['id']} holding {LEASE_LIMIT} leases",
                    victim=entry["id"], key=KEYS[0])
        self.victims += 1
        return self.spawn(f"victim{self.victims}", "python", "victim", time.time(), stop)

    @staticmethod
    def holding(log_path: Path) -> bool:
        """Whether the victim's log shows LEASE_LIMIT granted leases and no release since."""
        held = 0
        for line in log_path.read_text().splitlines() if log_path.exists() else []:
            parts = line.split()
            if len(parts) == 9 and parts[2] == "c" and parts[3] == "ok":
                held += 1
            elif len(parts) == 9 and parts[2] == "r":
                held -= 1
        return held >= LEASE_LIMIT

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        self.cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=float(os.environ.get("RATEKEEPER_SOAK_SECONDS", 20)))
    parser.add_argument("--processes", type=int, default=int(os.environ.get("RATEKEEPER_SOAK_PROCESSES", 6)))
    parser.add_argument("--rate", type=float, default=40.0, help="calls per second per process")
    parser.add_argument("--seed", type=int, default=int(time.time()))
    parser.add_argument("--keep", help="keep the logs, run.json and report.json in this directory")
    args = parser.parse_args()
    if args.processes < 4:
        parser.error("--processes: at least 4 (a victim and a worker of each language)")
    if args.seconds < 20:
        parser.error("--seconds: at least 20 (each fault once, and time to recover)")
    base = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="ratekeeper-soak-", dir=memory_dir()))
    base.mkdir(parents=True, exist_ok=True)
    if any(base.iterdir()):
        parser.error(f"--keep: {base} is not empty (the logs of another run would be judged with this one)")
    log(f"seed {args.seed}")
    soak = Soak(args, base)
    try:
        soak.run()
    finally:
        soak.stop()
    verdict = judge(base)
    (base / "report.json").write_text(json.dumps({"figures": verdict.figures, "failures": verdict.failures}, indent=1))
    figures = {k: v for k, v in verdict.figures.items() if k not in ("recoveries",)}
    print(json.dumps(figures, indent=1))
    for failure in verdict.failures:
        print("FAIL:", failure)
    if verdict.failures:
        log(f"FAILED ({len(verdict.failures)}); logs kept in {base}")
        sys.exit(1)
    if not args.keep:
        shutil.rmtree(base, ignore_errors=True)
    log("passed")


if __name__ == "__main__":
    main()
