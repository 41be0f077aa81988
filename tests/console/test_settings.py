"""Settings come from the environment; a bad value must stop start-up with a message naming the variable."""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from console.env import EnvError, env_bool, env_int, env_list, env_str, env_url

PROJECT = Path(__file__).resolve().parents[2]


def run_python(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the project's Python with only the given variables set (plus what a process needs to start)."""
    environ = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(tmp_path),
        "AIRLOCK_DATA_DIR": str(tmp_path / "data"),
        **env,
    }
    return subprocess.run(
        [sys.executable, *args], cwd=PROJECT, env=environ, capture_output=True, text=True, timeout=120, check=False
    )


def test_it_reads_booleans_in_the_usual_spellings():
    assert env_bool("DEBUG", False, {"DEBUG": "Yes"}) is True
    assert env_bool("DEBUG", True, {"DEBUG": "off"}) is False
    assert env_bool("DEBUG", True, {}) is True


def test_it_refuses_a_boolean_it_cannot_read():
    with pytest.raises(EnvError, match=r"DEBUG must be one of 1/0, true/false.*got 'maybe'"):
        env_bool("DEBUG", False, {"DEBUG": "maybe"})


def test_it_refuses_an_integer_that_is_not_a_number():
    with pytest.raises(EnvError, match=r"PORT must be a whole number; got '80a'"):
        env_int("PORT", 8000, {"PORT": "80a"})


def test_it_refuses_an_integer_under_its_minimum():
    assert env_int("DATABASE_CONN_MAX_AGE", 0, {"DATABASE_CONN_MAX_AGE": "60"}) == 60
    with pytest.raises(EnvError, match=r"DATABASE_CONN_MAX_AGE must be at least 0; got -5"):
        env_int("DATABASE_CONN_MAX_AGE", 0, {"DATABASE_CONN_MAX_AGE": "-5"})


def test_it_refuses_a_list_with_an_empty_item():
    assert env_list("ALLOWED_HOSTS", [], {"ALLOWED_HOSTS": "a.example, b.example"}) == ["a.example", "b.example"]
    with pytest.raises(EnvError, match=r"ALLOWED_HOSTS must be a comma-separated list without empty items"):
        env_list("ALLOWED_HOSTS", [], {"ALLOWED_HOSTS": "a.example,,b.example"})


def test_it_refuses_a_url_with_a_scheme_it_does_not_serve():
    schemes = ("sqlite", "postgres")
    assert env_url("DATABASE_URL", "", {"DATABASE_URL": "postgres://db/airlock"}, schemes=schemes)
    with pytest.raises(EnvError, match=r"DATABASE_URL must start with one of sqlite://, postgres://; got 'mysql"):
        env_url("DATABASE_URL", "", {"DATABASE_URL": "mysql://db/airlock"}, schemes=schemes)


def test_it_refuses_a_url_without_a_scheme():
    with pytest.raises(EnvError, match=r"REDIS_URL must start with one of redis://"):
        env_url("REDIS_URL", "", {"REDIS_URL": "redis"}, schemes=("redis",))


def test_it_reads_strings_with_a_default():
    assert env_str("LOG_LEVEL", "INFO", {}) == "INFO"
    assert env_str("LOG_LEVEL", "INFO", {"LOG_LEVEL": "DEBUG"}) == "DEBUG"


def test_it_will_not_start_in_production_without_a_secret_key(tmp_path):
    result = run_python(["-c", "import console.settings"], tmp_path, DEBUG="0")
    assert result.returncode != 0
    assert "EnvError: SECRET_KEY must be set when DEBUG is off" in result.stderr


PRINT_SECRET_KEY = "import console.settings; print(console.settings.SECRET_KEY)"


def test_it_keeps_the_development_secret_key_across_restarts(tmp_path):
    first = run_python(["-c", PRINT_SECRET_KEY], tmp_path)
    second = run_python(["-c", PRINT_SECRET_KEY], tmp_path)
    assert first.returncode == second.returncode == 0, first.stderr + second.stderr
    # A new key each start would sign everyone out on every restart.
    assert first.stdout == second.stdout
    kept = tmp_path / "data" / "secret-key"
    assert first.stdout.strip() == "dev-only-" + kept.read_text().strip()
    assert kept.stat().st_mode & 0o777 == 0o600
    assert [path.name for path in kept.parent.iterdir()] == ["secret-key"]  # no draft left behind


def test_it_uses_the_secret_key_it_is_given_and_keeps_none(tmp_path):
    result = run_python(["-c", PRINT_SECRET_KEY], tmp_path, SECRET_KEY="given-by-the-environment")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "given-by-the-environment"
    assert not (tmp_path / "data" / "secret-key").exists()


def test_it_will_not_start_with_an_empty_kept_secret_key(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "secret-key").write_text("\n")
    result = run_python(["-c", PRINT_SECRET_KEY], tmp_path)
    assert result.returncode != 0
    assert "secret-key is empty: delete it to have a new secret made" in result.stderr


def test_it_will_not_start_with_a_bad_setting(tmp_path):
    result = run_python(["-c", "import console.settings"], tmp_path, DEBUG="maybe")
    assert result.returncode != 0
    assert "EnvError: DEBUG must be one of" in result.stderr


PRINT_BACKENDS = (
    "import json, console.settings as s; "
    "print(json.dumps({'database': s.DATABASES['default']['ENGINE'], 'name': s.DATABASES['default']['NAME'], "
    "'layer': s.CHANNEL_LAYERS['default']['BACKEND'], "
    "'hosts': s.CHANNEL_LAYERS['default'].get('CONFIG', {}).get('hosts'), "
    "'pool': s.DATABASES['default'].get('OPTIONS', {}).get('pool'), "
    "'prepare': s.DATABASES['default'].get('OPTIONS', {}).get('prepare_threshold'), "
    "'conn_max_age': s.DATABASES['default']['CONN_MAX_AGE']}))"
)


def resolved_backends(tmp_path, **env):
    result = run_python(["-c", PRINT_BACKENDS], tmp_path, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_it_runs_embedded_on_sqlite_and_an_in_memory_layer_by_default(tmp_path):
    resolved = resolved_backends(tmp_path)
    assert resolved["database"] == "django.db.backends.sqlite3"
    assert resolved["name"] == str(tmp_path / "data" / "airlock.sqlite3")
    assert resolved["layer"] == "console.layers.InMemoryChannelLayer"


def test_it_scales_out_on_postgresql_and_redis(tmp_path):
    resolved = resolved_backends(
        tmp_path,
        DATABASE_URL="postgres://airlock:pw@db.internal:5432/airlock",
        REDIS_URL="redis://cache.internal:6379/0",
    )
    assert resolved["database"] == "django.db.backends.postgresql"
    assert resolved["name"] == "airlock"
    assert resolved["layer"] == "channels_redis.core.RedisChannelLayer"
    [host] = resolved["hosts"]
    assert host["address"] == "redis://cache.internal:6379/0"
    # Idle consoles outlive channels_redis's 5 s blocking receive; reconnect storms get connections.
    assert host["socket_timeout"] > 5 and host["max_connections"] >= 1000
    # Under ASGI connections come from a pool, never kept per (short-lived) request thread.
    assert (resolved["conn_max_age"], resolved["pool"]["max_size"]) == (0, 20)
    assert resolved["prepare"] == 5


def test_it_prepares_no_statements_behind_a_pooler_that_cannot_keep_them(tmp_path):
    postgresql = "postgres://airlock:pw@db.internal:5432/airlock"
    assert resolved_backends(tmp_path, DATABASE_URL=postgresql, DATABASE_PREPARE_THRESHOLD="0")["prepare"] is None


def test_it_passes_the_deployment_checklist(tmp_path):
    result = run_python(
        ["manage.py", "check", "--deploy"],
        tmp_path,
        DEBUG="0",
        SECRET_KEY=secrets.token_urlsafe(64),
        ALLOWED_HOSTS="airlock.example.com",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "WARNINGS" not in result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
