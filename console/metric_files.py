"""Where the metrics of an installation's processes meet (SPEC section 18): `manage.py serve` and `run_worker` keep
theirs in files of one folder, which the console that is scraped sums (console/metrics.py).

prometheus_client chooses between values in memory and values in files once, when it is first imported, from the
variable `PROMETHEUS_MULTIPROC_DIR`: so the commands call `share_metrics()` before they import anything that makes
a metric, and this module imports none of it."""

import atexit
import glob
import os
import sys
from pathlib import Path

from django.conf import settings

VARIABLE = "PROMETHEUS_MULTIPROC_DIR"


def share_metrics() -> Path:
    """Keep this process's metrics in the shared folder: `PROMETHEUS_MULTIPROC_DIR`, else `metrics/` in the data
    folder (set for this process and those it starts). Its live gauges leave with it (`forget_process`)."""
    if VARIABLE not in os.environ and "prometheus_client.values" in sys.modules:
        raise RuntimeError(f"metrics were made before {VARIABLE} was set: call share_metrics() first")
    folder = Path(os.environ.setdefault(VARIABLE, str(Path(settings.DATA_DIR) / "metrics")))
    folder.mkdir(parents=True, exist_ok=True)
    # A process killed before it could leave may have had this id: its gauges are not this one's.
    forget_process(os.getpid(), folder)
    atexit.register(forget_process, os.getpid(), folder)
    return folder


def forget_process(pid: int, folder: Path) -> None:
    """Remove the live gauges of the process `pid` (prometheus_client's `mark_process_dead`, without importing it)."""
    for path in glob.glob(os.path.join(folder, f"gauge_live*_{pid}.db")):
        Path(path).unlink(missing_ok=True)
