"""Real Airlock processes for tests: `manage.py serve` (daphne) and `manage.py run_worker`, started and
stopped by the test, sharing a database (and a Redis channel layer when given) through the environment.

Tests that use these talk to the processes over HTTP and websockets only: pytest-django's test
database is not theirs.
"""

import atexit
import http.cookiejar
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PYTHON = str(ROOT / ".venv" / "bin" / "python")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def manage(env: dict[str, str], *args: str) -> str:
    """Run a management command with `env`; its stdout."""
    result = subprocess.run(
        [PYTHON, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"manage.py {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}")
    return result.stdout


# Runs the commands of argv[1] (a JSON list of argument lists) with Django's call_command; their outputs as a
# JSON list on the last line.
_MANAGE_ALL = """
import io, json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "console.settings")
import django
django.setup()
from django.core.management import call_command
outputs = []
for args in json.loads(sys.argv[1]):
    out = io.StringIO()
    call_command(*args, stdout=out)
    outputs.append(out.getvalue())
print(json.dumps(outputs))
"""


def manage_all(env: dict[str, str], *commands: list[str]) -> list[str]:
    """Run management commands one after another in one process with `env`; each one's stdout. (A process
    that sets Django up costs seconds of CPU on these machines, and the tests start dozens.)"""
    result = subprocess.run(
        [PYTHON, "-c", _MANAGE_ALL, json.dumps(commands)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(f"management commands {commands} failed:\n{result.stdout}\n{result.stderr}")
    return json.loads(result.stdout.splitlines()[-1])


def seeded_demo(env: dict[str, str]) -> tuple[str, str]:
    """The demo data `make run` seeds (`seed_demo`), and API tokens of its admin and its operator."""
    _, admin, operator = manage_all(
        env,
        ["seed_demo"],
        ["create_token", "admin", "--tenant", "demo"],
        ["create_token", "operator", "--tenant", "demo"],
    )
    return admin.strip(), operator.strip()


def healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30, every: float = 0.1) -> Any:
    """Poll `check` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)
    return value


@dataclass
class Process:
    name: str
    popen: subprocess.Popen[bytes]
    log: Path
    url: str = ""

    @property
    def pid(self) -> int:
        return self.popen.pid

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class Cluster:
    """Processes of one Airlock installation (`env` names its database, data folder, channel layer)."""

    env: dict[str, str]
    folder: Path
    processes: list[Process] = field(default_factory=list)

    def manage(self, *args: str) -> str:
        return manage(self.env, *args)

    def _start(self, name: str, args: list[str], extra: dict[str, str]) -> Process:
        log = self.folder / f"{name}.log"
        with log.open("w") as out:  # the child keeps its own copy of the file
            popen = subprocess.Popen(
                [PYTHON, "manage.py", *args], cwd=ROOT, env={**self.env, **extra}, stdout=out, stderr=subprocess.STDOUT
            )
        process = Process(name, popen, log)
        self.processes.append(process)
        return process

    def serve(self, name: str = "daphne", port: int | None = None, **extra: str) -> Process:
        """A console process (on a free port unless `port`, a restart's); it works no queued runs unless
        `WORKER_THREADS` is given."""
        port = port or free_port()
        process = self._start(
            name, ["serve", "--host", "127.0.0.1", "--port", str(port)], {"WORKER_THREADS": "0", **extra}
        )
        process.url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while not healthy(process.url):
            if process.popen.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start:\n{process.output()}")
            time.sleep(0.2)
        return process

    def worker(self, name: str = "worker", *args: str, **extra: str) -> Process:
        process = self._start(name, ["run_worker", *args], extra)
        wait_for(lambda: "working lanes" in process.output() or process.popen.poll() is not None, f"{name} to start")
        if process.popen.poll() is not None:
            raise RuntimeError(f"{name} did not start:\n{process.output()}")
        return process

    def kill(self, process: Process) -> None:
        """SIGKILL: no clean-up of any kind, as when a machine dies."""
        process.popen.send_signal(signal.SIGKILL)
        process.popen.wait(10)

    def stop(self, process: Process) -> None:
        process.popen.terminate()
        try:
            process.popen.wait(15)
        except subprocess.TimeoutExpired:
            process.popen.kill()
            process.popen.wait()

    def stop_all(self) -> None:
        for process in self.processes:
            if process.popen.poll() is None:
                self.stop(process)


def new_cluster(folder: Path, **env: str) -> Cluster:
    """A migrated installation in `folder` (its SQLite file unless DATABASE_URL is given) with tenant
    acme and its admin ada."""
    base = {
        **os.environ,
        "AIRLOCK_DATA_DIR": str(folder),
        "DEBUG": "1",
        "DEADLINE_SWEEP_SECONDS": "1",
        "ANSWER_UNDO_SECONDS": "0",
    }
    for name in ("DATABASE_URL", "REDIS_URL"):
        base.pop(name, None)
    cluster = Cluster({**base, **env}, folder)
    migrate: list[list[str]] = [["migrate", "--noinput"]]
    if "DATABASE_URL" not in cluster.env:
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(_migrated_sqlite(cluster.env), folder / SQLITE_FILE)
        migrate = []
    manage_all(
        cluster.env,
        *migrate,
        ["create_tenant", "acme", "--name", "Acme"],
        ["create_user", "ada", "--tenant", "acme", "--role", "admin", "--password", PASSWORD],
    )
    return cluster


# An installation's SQLite file in its data folder (console/settings.py).
SQLITE_FILE = "airlock.sqlite3"
# The SQLite file the first SQLite installation of this test process migrated, which every later one copies: a
# `migrate` from nothing takes its process about 8 s of CPU, and the suite makes dozens of installations.
_MIGRATED: list[Path] = []
_MIGRATING = threading.Lock()


def _migrated_sqlite(env: dict[str, str]) -> Path:
    with _MIGRATING:
        if not _MIGRATED:
            folder = Path(tempfile.mkdtemp(prefix="airlock-migrated-"))
            atexit.register(shutil.rmtree, folder, ignore_errors=True)
            manage_all({**env, "AIRLOCK_DATA_DIR": str(folder)}, ["migrate", "--noinput"])
            _MIGRATED.append(folder / SQLITE_FILE)
        return _MIGRATED[0]


PASSWORD = "process-tests-only-5d1c"
PG_ADMIN_URL = os.environ.get("AIRLOCK_TEST_PG_ADMIN", "postgresql://postgres@127.0.0.1:5432/postgres")


def unreachable(redis_url: str) -> str | None:
    """Why this machine's PostgreSQL (PG_ADMIN_URL) or the Redis at `redis_url` cannot be used, or None."""
    import psycopg
    import redis

    try:
        psycopg.connect(PG_ADMIN_URL, connect_timeout=3).close()
        redis.Redis.from_url(redis_url, socket_connect_timeout=3).ping()
    except Exception as error:
        return str(error)
    return None


@contextmanager
def scratch_database(prefix: str) -> Iterator[str]:
    """The URL of a fresh PostgreSQL database `prefix_<random>` of its own, dropped afterwards."""
    import uuid

    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


class Api:
    """The JSON API of one console process, as a token holder."""

    def __init__(self, url: str, token: str) -> None:
        self.url, self.token = url, token

    def call(self, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, dict[str, str], Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(
            f"{self.url}{path}",
            data=data,
            method=method,
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json", **headers},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, dict(response.headers), json.loads(response.read() or b"null")
        except urllib.error.HTTPError as error:
            return error.code, dict(error.headers), json.loads(error.read() or b"null")

    def __call__(self, method: str, path: str, body: Any = None, **headers: str) -> tuple[int, Any]:
        status, _, payload = self.call(method, path, body, **headers)
        return status, payload

    def ok(self, method: str, path: str, body: Any = None, **headers: str) -> Any:
        status, _, payload = self.call(method, path, body, **headers)
        assert status in (200, 201, 202), (status, payload)
        return payload

    def run_until(self, run_id: str, done: Callable[[dict[str, Any]], bool], timeout: float = 30) -> dict[str, Any]:
        def check() -> dict[str, Any] | None:
            run = self.ok("GET", f"/api/runs/{run_id}")
            return run if done(run) else None

        return wait_for(check, f"run {run_id} to get on", timeout, every=0.2)


def login(url: str, username: str = "ada", password: str = PASSWORD) -> urllib.request.OpenerDirector:
    """A browser-like client logged in to the console at `url` (session and CSRF cookies kept)."""
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    page = opener.open(f"{url}/login/", timeout=10).read().decode()
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page)
    assert token, "no CSRF token on the login page"
    form = urllib.parse.urlencode({"username": username, "password": password, "csrfmiddlewaretoken": token[1]})
    opener.open(
        urllib.request.Request(f"{url}/login/", data=form.encode(), headers={"Referer": f"{url}/login/"}), timeout=10
    )
    opener.cookies = {cookie.name: cookie.value for cookie in jar}  # type: ignore[attr-defined]
    assert "sessionid" in opener.cookies, "the login did not take"  # type: ignore[attr-defined]
    return opener
