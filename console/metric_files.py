"""Where the metrics of an installation's processes meet (SPEC section 18): `manage.py serve` and `run_worker` keep
theirs in files of one folder (prometheus_client's multiprocess mode), which the console that is scraped sums
(console/views/metrics_pages.py).

prometheus_client picks values in memory or in files when it is imported, from `PROMETHEUS_MULTIPROC_DIR`, and
Django's setup imports it (console.metrics) before a command runs: `share_metrics()` sets the variable and has
prometheus_client pick again, before the first metric is made (console.metrics makes them on first use)."""

import atexit
import glob
import os
import re
from pathlib import Path

from django.conf import settings
from prometheus_client import values

from console import metrics

VARIABLE = "PROMETHEUS_MULTIPROC_DIR"
_PROCESS_FILE = re.compile(r"_(\d+)\.db$")


def share_metrics() -> Path:
    """Keep this process's metrics in the shared folder: `PROMETHEUS_MULTIPROC_DIR`, else `metrics/` in the data
    folder (set for this process and those it starts). Its live gauges leave with it (`forget_process`)."""
    if metrics.made_yet():
        raise RuntimeError(f"metrics were made before {VARIABLE} was set: call share_metrics() first")
    folder = Path(os.environ.setdefault(VARIABLE, str(Path(settings.DATA_DIR) / "metrics")))
    folder.mkdir(parents=True, exist_ok=True)
    # A process killed before it could leave may have had this id: its gauges are not this one's.
    forget_process(os.getpid(), folder)
    atexit.register(forget_process, os.getpid(), folder)
    values.ValueClass = values.get_value_class()  # as prometheus_client picks on import, now the variable is set
    return folder


def forget_process(pid: int, folder: Path) -> None:
    """Remove the live gauges of the process `pid` (prometheus_client's `mark_process_dead`)."""
    for path in glob.glob(os.path.join(folder, f"gauge_live*_{pid}.db")):
        Path(path).unlink(missing_ok=True)


def forget_dead_processes(folder: Path) -> list[int]:
    """Drop the live gauges of processes of `folder` that ended without saying so (killed, a machine's crash), so
    their busy threads, sockets and polls no longer count; their counters stay, as Prometheus expects of a counter.
    The processes sharing a folder run on one machine (the folder is local), so a process id says whether one
    lives. The ids forgotten."""
    dead: set[int] = set()
    for path in glob.glob(os.path.join(folder, "gauge_live*_*.db")):
        found = _PROCESS_FILE.search(path)
        if found is not None and not _alive(int(found[1])):
            dead.add(int(found[1]))
    for pid in dead:
        forget_process(pid, folder)
    return sorted(dead)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive
        return True
    return True
