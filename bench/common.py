"""Shared by the benchmarks: environment, statistics, daphne processes, PostgreSQL/Redis scratch stores,
a minimal keep-alive HTTP client, personas and the Markdown pieces every script prints.

Nothing here imports Django at module level: each script sets its environment first (`bench_env`),
then calls `setup_django()`.
"""

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PG_SERVER = "postgres://postgres@127.0.0.1:5432"
REDIS_SERVER = "redis://127.0.0.1:6379"


def bench_env(data_dir: Path, *, database_url: str | None = None, redis_url: str | None = None) -> dict[str, str]:
    """The environment of a benchmark and of the servers it starts (production settings, quiet logs)."""
    env = {
        key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL", "AIRLOCK_DATA_DIR")
    }
    env.update(
        AIRLOCK_DATA_DIR=str(data_dir),
        DEBUG="0",
        SECRET_KEY="bench-" + "z" * 60,
        ALLOWED_HOSTS="testserver,127.0.0.1",
        SECURE_SSL_REDIRECT="0",
        LOG_LEVEL="WARNING",
        DEADLINE_SWEEP_SECONDS="0",
        DJANGO_SETTINGS_MODULE="console.settings",
        PYTHONPATH=str(ROOT),
        # push_latency and ws_memory open a thousand consoles as one operator; a person has far fewer tabs.
        WEBSOCKETS_PER_USER="5000",
    )
    if database_url:
        env["DATABASE_URL"] = database_url
    else:
        sqlite = data_dir / "airlock.sqlite3"
        if not sqlite.exists():
            data_dir.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(_sqlite_template(), sqlite)
    if redis_url:
        env["REDIS_URL"] = redis_url
    return env


# A fresh database starts as a copy of a migrated one (built once per set of migrations and locked packages):
# migrating from nothing costs ~7 s of CPU, and a `make bench` would pay it some twenty times. The scripts'
# own `migrate` then finds nothing to do.
TEMPLATE_DATABASE = "airlock_bench_template"


def _migrations_stamp() -> str:
    digest = hashlib.sha256((ROOT / "uv.lock").read_bytes())
    for path in sorted(ROOT.glob("*/migrations/*.py")):
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


@contextlib.contextmanager
def _template_lock() -> Iterator[None]:
    with open(Path(tempfile.gettempdir()) / "airlock-bench-template.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _migrate(database_url: str | None, data_dir: Path) -> None:
    env = {key: value for key, value in os.environ.items() if key not in ("DATABASE_URL", "REDIS_URL")}
    env.update(
        AIRLOCK_DATA_DIR=str(data_dir),
        DEBUG="1",
        LOG_LEVEL="WARNING",
        **({"DATABASE_URL": database_url} if database_url else {}),
    )
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)


def _sqlite_template() -> Path:
    template = Path(tempfile.gettempdir()) / f"airlock-bench-template-{_migrations_stamp()}.sqlite3"
    with _template_lock():
        if not template.exists():
            with tempfile.TemporaryDirectory(prefix="airlock-bench-template-") as folder:
                _migrate(None, Path(folder))
                shutil.copyfile(Path(folder) / "airlock.sqlite3", template)
    return template


def _pg_template(admin: Any) -> str:
    """The name of the template database, made current (its comment holds the stamp it was migrated at)."""
    stamp, template = _migrations_stamp(), bench_database_name(TEMPLATE_DATABASE)
    row = admin.execute(
        "SELECT shobj_description(oid, 'pg_database') FROM pg_database WHERE datname = %s", [template]
    ).fetchone()
    if row is not None and row[0] == stamp:
        return template
    admin.execute(f'DROP DATABASE IF EXISTS "{template}" WITH (FORCE)')
    admin.execute(f'CREATE DATABASE "{template}"')
    with tempfile.TemporaryDirectory(prefix="airlock-bench-template-") as folder:
        _migrate(f"{PG_SERVER}/{template}", Path(folder))
    admin.execute(f"COMMENT ON DATABASE \"{template}\" IS '{stamp}'")
    return template


def setup_django(env: dict[str, str]) -> None:
    """Configure this process with `env` (before any Django import) and set Django up."""
    for key in ("DATABASE_URL", "REDIS_URL"):
        if key not in env:
            os.environ.pop(key, None)
    os.environ.update(env)
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    import django

    django.setup()


@contextlib.contextmanager
def scratch_dir(prefix: str) -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    (path / "static").mkdir()  # WhiteNoise warns about a missing STATIC_ROOT at every start
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def raise_nofile() -> None:
    """Lift the soft limit on open files to the hard one (a thousand sockets each side)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = hard if hard != resource.RLIM_INFINITY else 65536
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    resource.setrlimit(resource.RLIMIT_NOFILE, (wanted, hard))


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def median(values: list[float]) -> float:
    return statistics.median(values)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def verdict(met: bool) -> str:
    return "met" if met else "missed"


# --- servers -------------------------------------------------------------------------------------


class Daphne:
    """One daphne process serving `app` on a free loopback port; `stop()` ends it (also on failure)."""

    def __init__(self, env: dict[str, str], app: str = "bench.served_asgi:application", log_dir: Path | None = None):
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.ws_base = f"ws://127.0.0.1:{self.port}"
        self.log = (log_dir or Path(tempfile.gettempdir())) / f"daphne-{self.port}.log"
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "daphne", "-v", "0", "-b", "127.0.0.1", "-p", str(self.port), app],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=raise_nofile,
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def wait_ready(self, timeout: float = 60) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daphne exited ({self.process.returncode}):\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(self.base + "/healthz", timeout=2) as response:
                    if response.status == 200:
                        return
            except (OSError, urllib.error.URLError):
                time.sleep(0.1)
        raise RuntimeError(f"daphne did not answer /healthz within {timeout:.0f} s:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        with contextlib.suppress(OSError):
            self.log.unlink()


@contextlib.contextmanager
def daphnes_starting(
    env: dict[str, str], count: int = 1, app: str = "bench.served_asgi:application"
) -> Iterator[Callable[[], list[Daphne]]]:
    """`count` daphnes started now; the callable given waits until they answer and returns them. A daphne takes
    3-7 s to import the console, so a script starts its servers first and sets up its own Django process and its
    data meanwhile (the database is already migrated: it is a copy of the template). Whatever it does before
    `ready()` must not need them. Each is stopped when the block ends, also on failure."""
    servers: list[Daphne] = []

    def ready() -> list[Daphne]:
        for server in servers:
            server.wait_ready()
        return servers

    try:
        for _ in range(count):
            servers.append(Daphne(env, app))
        yield ready
    except BaseException:
        for server in servers:
            print(f"--- daphne :{server.port} log (last lines) ---\n{server.log_tail()}", file=sys.stderr)
        raise
    finally:
        for server in servers:  # all told at once: each takes a moment to close its connections
            if server.process.poll() is None:
                server.process.terminate()
        for server in servers:
            server.stop()


@contextlib.contextmanager
def daphnes(env: dict[str, str], count: int = 1, app: str = "bench.served_asgi:application") -> Iterator[list[Daphne]]:
    with daphnes_starting(env, count, app) as ready:
        yield ready()


def rss_kb(pid: int) -> int:
    """Resident set size of a process, in KiB (VmRSS of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for {pid}")


def thread_count(pid: int) -> int:
    """Threads of a process (Threads of /proc/PID/status)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Threads:"):
            return int(line.split()[1])
    raise RuntimeError(f"no Threads for {pid}")


def local_tcp_ports(pid: int) -> set[int]:
    """The local ports of the TCP sockets process `pid` holds (its fds' socket inodes in /proc/PID/net/tcp*)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    ports = set()
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if fields[9] in inodes:
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def pg_connections_of(pid: int, database: str) -> int:
    """PostgreSQL connections to `database` that process `pid` holds (pg_stat_activity's client ports)."""
    import psycopg

    ports, database = local_tcp_ports(pid), bench_database_name(database)
    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
        rows = admin.execute(
            "SELECT client_port FROM pg_stat_activity WHERE datname = %s AND client_port IS NOT NULL", [database]
        ).fetchall()
    return sum(1 for (port,) in rows if port in ports)


# --- scratch stores ------------------------------------------------------------------------------


def bench_database_name(name: str) -> str:
    """`name` (an `airlock_bench_` one), its prefix replaced by AIRLOCK_BENCH_DB_PREFIX when that is set (say
    `airlock_bench_mine_`): benchmarks run by several people on one PostgreSQL server keep to their own
    databases."""
    assert name.startswith("airlock_bench_"), name
    prefix = os.environ.get("AIRLOCK_BENCH_DB_PREFIX", "airlock_bench_")
    assert prefix.startswith("airlock_bench_"), prefix
    return prefix + name.removeprefix("airlock_bench_")


def pg_database(name: str, *, fresh: bool) -> str:
    """URL of the PostgreSQL database `name` (an `airlock_bench_` one, see `bench_database_name`), created when
    missing (dropped first when `fresh`)."""
    name = bench_database_name(name)
    import psycopg

    with psycopg.connect(f"{PG_SERVER}/postgres", autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone() is not None
        if exists and fresh:
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
            exists = False
        if not exists:
            with _template_lock():
                template = _pg_template(admin)
                admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return f"{PG_SERVER}/{name}"


def flush_redis(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


# --- HTTP ----------------------------------------------------------------------------------------


class HttpConnection:
    """One keep-alive HTTP/1.1 connection with the least client work per request (asyncio streams)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def open(self) -> None:
        self.reader, self.writer = await asyncio.open_connection("127.0.0.1", self.port)

    async def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            with contextlib.suppress(OSError, ConnectionError):
                await self.writer.wait_closed()
            self.writer = None

    async def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        if self.writer is None:
            await self.open()
        assert self.reader is not None and self.writer is not None
        lines = [f"{method} {path} HTTP/1.1", f"Host: 127.0.0.1:{self.port}", f"Content-Length: {len(body)}"]
        lines += [f"{key}: {value}" for key, value in (headers or {}).items()]
        self.writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split()[1])
        length, close = 0, False
        for line in header_lines:
            key, _, value = line.partition(":")
            if key.lower() == "content-length":
                length = int(value)
            elif key.lower() == "connection" and value.strip().lower() == "close":
                close = True
        data = await self.reader.readexactly(length) if length else b""
        if close:
            await self.close()
        return status, data


def post_json(base: str, path: str, body: dict[str, Any] | None, token: str | None = None) -> bytes:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else b""
    request = urllib.request.Request(base + path, data=data, headers=headers)
    with urllib.request.urlopen(request, timeout=120) as response:
        return response.read()


# --- websockets ----------------------------------------------------------------------------------


class RawWebSocket(asyncio.Protocol):
    """A minimal websocket client: the handshake, unmasked server frames, pongs and a close.

    A thousand sockets in one Python process would otherwise make the client the bottleneck of what
    is measured; this one does next to nothing per message: `on_message(payload, arrived)` gets the
    raw payload bytes and the `time.time()` at which their last chunk arrived.
    """

    def __init__(self, request: bytes, on_message: Callable[[bytes, float], None] | None) -> None:
        self.request = request
        self.on_message = on_message
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.upgraded: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.closed: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self.fragments = bytearray()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        arrived = time.time()
        self.buffer += data
        if not self.upgraded.done():
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                return
            status = bytes(self.buffer[: self.buffer.find(b"\r\n")])
            del self.buffer[: end + 4]
            if b" 101 " not in status:
                self.upgraded.set_exception(ConnectionError(f"handshake refused: {status.decode(errors='replace')}"))
                self._close_transport()
                return
            self.upgraded.set_result(None)
        self._frames(arrived)

    def _frames(self, arrived: float) -> None:
        buffer = self.buffer
        while len(buffer) >= 2:
            first, second = buffer[0], buffer[1]
            length, start = second & 0x7F, 2
            if length == 126:
                if len(buffer) < 4:
                    return
                length, start = int.from_bytes(buffer[2:4], "big"), 4
            elif length == 127:
                if len(buffer) < 10:
                    return
                length, start = int.from_bytes(buffer[2:10], "big"), 10
            if len(buffer) < start + length:
                return
            payload = bytes(buffer[start : start + length])
            del buffer[: start + length]
            opcode = first & 0x0F
            if opcode in (0, 1, 2):
                self.fragments += payload
                if first & 0x80:
                    message, self.fragments = bytes(self.fragments), bytearray()
                    if self.on_message is not None:
                        self.on_message(message, arrived)
            elif opcode == 9:
                self._send(0xA, payload)
            elif opcode == 8:
                code = int.from_bytes(payload[:2], "big") if len(payload) >= 2 else 1005
                if not self.closed.done():
                    self.closed.set_result(code)
                self._close_transport()
                return

    def _send(self, opcode: int, payload: bytes) -> None:
        if self.transport is None or self.transport.is_closing():
            return
        mask = os.urandom(4)
        masked = bytes(byte ^ mask[i % 4] for i, byte in enumerate(payload))
        self.transport.write(bytes([0x80 | opcode, 0x80 | len(payload)]) + mask + masked)

    def send_text(self, text: str) -> None:
        payload = text.encode()
        assert len(payload) < 126, "short control messages only"
        self._send(0x1, payload)

    def _close_transport(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.upgraded.done():
            self.upgraded.set_exception(ConnectionError(f"closed before the handshake: {exc!r}"))
        if not self.closed.done():
            self.closed.set_result(1006)

    def close(self) -> None:
        self._send(0x8, (1000).to_bytes(2, "big"))
        self._close_transport()


async def open_websocket(
    port: int,
    path: str,
    headers: dict[str, str],
    on_message: Callable[[bytes, float], None] | None = None,
    timeout: float = 60,
) -> RawWebSocket:
    """Connect to ws://127.0.0.1:PORT/PATH; returns once the server accepted the upgrade."""
    key = base64.b64encode(os.urandom(16)).decode()
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: 127.0.0.1:{port}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
        *(f"{name}: {value}" for name, value in headers.items()),
    ]
    request = ("\r\n".join(lines) + "\r\n\r\n").encode()
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_connection(lambda: RawWebSocket(request, on_message), "127.0.0.1", port)
    await asyncio.wait_for(protocol.upgraded, timeout)
    return protocol


# --- personas (Django must be set up) ------------------------------------------------------------


def seed_operator(tenant_slug: str = "bench", agents: dict[str, dict[str, Any]] | None = None) -> dict[str, Any]:
    """A tenant, an operator with a browser session and an API token, and the given agents (by content).
    Returns {"tenant", "user", "membership", "token", "session"}."""
    from django.conf import settings
    from django.contrib.auth import BACKEND_SESSION_KEY, HASH_SESSION_KEY, SESSION_KEY
    from django.contrib.auth.models import User
    from django.contrib.sessions.backends.db import SessionStore

    from agents.definitions import DefinitionContent
    from agents.models import Agent
    from console.models import ApiToken, Membership, Tenant

    tenant = Tenant.objects.create(slug=tenant_slug, name=tenant_slug.title())
    user = User.objects.create_user(f"{tenant_slug}-operator")  # no password: hashing one costs ~0.5 s
    membership = Membership.objects.create(user=user, tenant=tenant, role="operator")
    for content in (agents or {}).values():
        Agent.create(tenant, DefinitionContent.model_validate(content), user)
    session = SessionStore()
    session[SESSION_KEY], session[BACKEND_SESSION_KEY] = str(user.pk), settings.AUTHENTICATION_BACKENDS[0]
    session[HASH_SESSION_KEY] = user.get_session_auth_hash()
    session["tenant_id"] = tenant.pk
    session.create()
    return {
        "tenant": tenant,
        "user": user,
        "membership": membership,
        "token": ApiToken.issue(membership, "bench")[1],
        "session": session.session_key or "",
    }


MAILER: dict[str, Any] = {"name": "mailer", "tools": [{"name": "send_email", "approval": "always"}]}
EMAIL: dict[str, str] = {"to": "a@b.co", "subject": "s", "body": "b"}


def send_email_lines(count: int) -> str:
    """A message the scripted model answers with `count` parallel send_email calls (each asks approval)."""
    return "\n".join(f"call send_email {json.dumps({**EMAIL, 'subject': f's{i}'})}" for i in range(count))


def database_label() -> str:
    """The database of this (set-up) Django process, e.g. `PostgreSQL 15.20` or `SQLite 3.40.1`."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SHOW server_version")
            return f"PostgreSQL {cursor.fetchone()[0].split()[0]}"
    import sqlite3

    return f"SQLite {sqlite3.sqlite_version}"


def python_line() -> str:
    return f"Python {platform.python_version()}"


def per_database(script: str, databases: list[str]) -> dict[str, dict[str, Any]]:
    """Run `script` again with this process's arguments and `--child <database>` for each database, each in a process
    of its own (Django is set up once per process); the JSON each printed last, by database."""
    results: dict[str, dict[str, Any]] = {}
    for database in databases:
        command = [sys.executable, script, *sys.argv[1:], "--child", database]
        done = subprocess.run(command, capture_output=True, text=True, env=os.environ, check=False)
        if done.returncode != 0:
            sys.stderr.write(done.stderr)
            raise SystemExit(f"{database}: failed")
        results[database] = json.loads(done.stdout.strip().splitlines()[-1])
    return results
