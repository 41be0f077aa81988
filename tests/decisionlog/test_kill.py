"""A `manage.py ship_decisions` process SIGKILLed in the middle of a delivery: its successor loses no receipt and
repeats only the batch the sink had not acknowledged. Real processes on the test database (SQLite file or
PostgreSQL), a loopback OTLP receiver that holds its answer to one export while the shipper is killed."""

import os
import signal
import subprocess
from pathlib import Path

import pytest
from django.db import connection

from decisionlog.models import SinkCursor
from tests.decisionlog.chain import chain_of, sink, write_receipts
from tests.decisionlog.receivers import OtlpReceiver
from tests.processes.cluster import wait_for

pytestmark = pytest.mark.django_db(transaction=True)

ROOT = Path(__file__).resolve().parents[2]


def database_of_the_tests() -> str:
    """pytest-django's test database, as a URL for another process."""
    db = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{db['NAME']}"
    return f"postgres://{db['USER']}:{db['PASSWORD'] or ''}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


def shipper(folder: Path, name: str) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "console.settings",
        "DATABASE_URL": database_of_the_tests(),
        "AIRLOCK_DATA_DIR": str(folder / "data"),
    }
    with (folder / f"{name}.log").open("w") as log:
        return subprocess.Popen(
            [str(ROOT / ".venv" / "bin" / "python"), "manage.py", "ship_decisions", "--every", "0.1", "--batch", "4"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def delivered(tenant: object) -> int:
    found = SinkCursor.objects.filter(tenant=tenant).first()
    return found.sequence if found else 0


def test_a_shipper_killed_mid_delivery_loses_nothing_and_repeats_only_the_unacknowledged_batch(acme, tmp_path):
    receiver = OtlpReceiver(hold_at=3)  # the third export is received, then left unanswered
    sink("siem", "otlp", [acme], url=receiver.url)
    write_receipts(acme, 18)
    first = shipper(tmp_path, "first")
    try:
        assert receiver.held.wait(60), (tmp_path / "first.log").read_text()
        assert delivered(acme) == 8  # two batches acknowledged; the third in flight
        first.send_signal(signal.SIGKILL)
        first.wait(10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait(10)
        receiver.release.set()  # its answer now goes to nobody

    assert delivered(acme) == 8
    second = shipper(tmp_path, "second")
    try:
        wait_for(lambda: delivered(acme) == 18, "the second shipper to catch up", timeout=60)
    finally:
        second.terminate()
        second.wait(10)
        receiver.stop()

    got = [record.sequence for record in receiver.records]
    # Batches of 4: 1-4 and 5-8 acknowledged, 9-12 received but never answered, so sent again, then the rest.
    assert got == [*range(1, 13), *range(9, 19)], got
    assert [export.acknowledged for export in receiver.exports] == [True, True, False, True, True, True]
    assert [record.receipt for record in receiver.records[12:]] == chain_of(acme)[8:]
