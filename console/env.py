"""Typed readers for settings taken from the environment. A bad value stops start-up with a clear message."""

import contextlib
import ipaddress
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Mapping
from datetime import timedelta
from pathlib import Path


class EnvError(ValueError):
    pass


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str, environ: Mapping[str, str] = os.environ) -> str:
    return environ.get(name, default)


def env_bool(name: str, default: bool, environ: Mapping[str, str] = os.environ) -> bool:
    if name not in environ:
        return default
    value = environ[name].strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise EnvError(f"{name} must be one of 1/0, true/false, yes/no, on/off; got {environ[name]!r}")


def env_int(name: str, default: int, environ: Mapping[str, str] = os.environ, *, minimum: int = 0) -> int:
    return _env_number(name, default, environ, int, "a whole number", minimum)


def env_float(name: str, default: float, environ: Mapping[str, str] = os.environ) -> float:
    return _env_number(name, default, environ, float, "a number", 0)


def _env_number[N: (int, float)](
    name: str, default: N, environ: Mapping[str, str], parse: Callable[[str], N], kind: str, minimum: int
) -> N:
    if name not in environ:
        return default
    try:
        value = parse(environ[name])
    except ValueError:
        raise EnvError(f"{name} must be {kind}; got {environ[name]!r}") from None
    if not minimum <= value < float("inf"):
        raise EnvError(f"{name} must be at least {minimum}; got {value}")
    return value


# What a lane (a named queue of runs, `agents/lanes.py`) may be called. Here, below the apps, because the
# settings check the lanes of RUN_LANES before any app is loaded.
LANE_PATTERN = r"^[a-z0-9][a-z0-9._-]{0,63}$"
_LANE = re.compile(LANE_PATTERN)


def env_lanes(name: str, default: dict[str, int], environ: Mapping[str, str] = os.environ) -> dict[str, int]:
    """Lane concurrency limits, `default=4,bulk=1`."""
    if name not in environ:
        return default
    try:
        return parse_lane_limits(environ[name])
    except ValueError as error:
        raise EnvError(f"{name}: {error}") from None


def parse_lane_limits(text: str) -> dict[str, int]:
    """`"default=4,bulk=1"` -> {"default": 4, "bulk": 1}; raises ValueError naming the bad item."""
    limits: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        lane, separator, number = item.partition("=")
        lane = lane.strip()
        if not separator or not _LANE.match(lane) or not number.strip().isdigit() or int(number) < 1:
            raise ValueError(f"{item!r} is not LANE=LIMIT (a lane name, a limit of at least 1)")
        limits[lane] = int(number)
    return limits


_DURATION = re.compile(r"^(\d{1,6})([smhd])$")
_UNIT_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def env_duration(name: str, default: timedelta | None, environ: Mapping[str, str] = os.environ) -> timedelta | None:
    """A duration written `30d`, `12h`, `45m` or `90s`; an empty value is None (never)."""
    if name not in environ:
        return default
    text = environ[name].strip()
    if not text:
        return None
    found = _DURATION.match(text)
    if found is None or int(found[1]) == 0:
        detail = 'a duration like "30d", "12h", "45m" or "90s" (empty: never)'
        raise EnvError(f"{name} must be {detail}; got {environ[name]!r}")
    return timedelta(seconds=int(found[1]) * _UNIT_SECONDS[found[2]])


def env_list(name: str, default: list[str], environ: Mapping[str, str] = os.environ) -> list[str]:
    if name not in environ:
        return default
    items = [item.strip() for item in environ[name].split(",")]
    if not all(items):
        raise EnvError(f"{name} must be a comma-separated list without empty items; got {environ[name]!r}")
    return items


type Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def env_networks(name: str, environ: Mapping[str, str] = os.environ) -> tuple[Network, ...]:
    """Addresses and CIDR blocks, comma-separated (`127.0.0.1,10.0.0.0/8,::1`); unset or empty: none."""
    networks: list[Network] = []
    for item in filter(None, (part.strip() for part in environ.get(name, "").split(","))):
        try:
            networks.append(ipaddress.ip_network(item))
        except ValueError as error:
            raise EnvError(f"{name}: {item!r} is not an IP address or a CIDR block ({error})") from None
    return tuple(networks)


def env_url(name: str, default: str, environ: Mapping[str, str] = os.environ, *, schemes: tuple[str, ...]) -> str:
    value = environ.get(name, default)
    scheme, separator, _ = value.partition("://")
    if value and (not separator or scheme not in schemes):
        raise EnvError(f"{name} must start with one of {', '.join(s + '://' for s in schemes)}; got {value!r}")
    return value


def kept_secret(path: Path, make: Callable[[], str]) -> str:
    """The secret kept in `path` (mode 0600), made by `make` on the first start, so that a restart keeps it.

    Written whole under another name and linked into place, so two processes starting together agree on one
    and neither reads half a file."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=path.parent, prefix=f".{path.name}.") as draft:
            draft.write(make() + "\n")  # NamedTemporaryFile makes it 0600
            draft.flush()
            with contextlib.suppress(FileExistsError):  # another process made it first: theirs is the one
                os.link(draft.name, path)
    secret = path.read_text().strip()
    if not secret:
        raise EnvError(f"{path} is empty: delete it to have a new secret made")
    return secret


def env_file(name: str, default: Path, environ: Mapping[str, str] = os.environ, *, moved_from: Path) -> Path:
    """A file's path from the environment (not empty), else `default`. With the default, a file still at
    `moved_from` (where an older version kept it) and none at `default` yet is moved there first, into a folder
    made readable by this user only: an existing installation keeps its file."""
    if name in environ:
        if not environ[name].strip():
            raise EnvError(f"{name} must be a file's path; got an empty value")
        return Path(environ[name])
    if moved_from.is_file() and not default.exists():
        default.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with contextlib.suppress(FileNotFoundError):  # another process starting moved it first
            shutil.move(moved_from, default)
            sys.stderr.write(f"Moved {moved_from} to {default} (its place now, outside the data folder).\n")
    return default
