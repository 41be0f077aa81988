"""Static file names: hashed from collectstatic's manifest, DEBUG or not; plain when the manifest lacks them."""

import json
import subprocess
import sys
from pathlib import Path

from django.conf import settings

from console.staticfiles import HashedStaticFilesStorage


def storage_with(tmp_path: Path, paths: dict[str, str]) -> HashedStaticFilesStorage:
    (tmp_path / "staticfiles.json").write_text(json.dumps({"paths": paths, "version": "1.1", "hash": "0"}))
    return HashedStaticFilesStorage(location=tmp_path, base_url="/static/")


def test_it_links_the_hashed_name_with_debug_on(tmp_path, settings):
    settings.DEBUG = True
    storage = storage_with(tmp_path, {"console/console.css": "console/console.0123456789ab.css"})
    assert storage.url("console/console.css") == "/static/console/console.0123456789ab.css"


def test_it_links_the_plain_name_of_a_file_the_manifest_lacks(tmp_path, settings):
    settings.DEBUG = False
    storage = storage_with(tmp_path, {})
    assert storage.url("console/new.js") == "/static/console/new.js"


def test_it_links_plain_names_before_any_collectstatic(tmp_path):
    storage = HashedStaticFilesStorage(location=tmp_path, base_url="/static/")
    assert storage.url("console/console.css") == "/static/console/console.css"


def test_it_serves_hashed_names_outside_the_unit_tests():
    """The console process (no pytest in it) uses the hashed storage; these unit tests plain names."""
    backend = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", "from django.conf import settings as s; print(s.STORAGES)"],
        cwd=Path(__file__).resolve().parents[2],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "console.staticfiles.HashedStaticFilesStorage" in backend
    assert "StaticFilesStorage" in settings.STORAGES["staticfiles"]["BACKEND"]
    assert "Hashed" not in settings.STORAGES["staticfiles"]["BACKEND"]
