"""axe-core, the accessibility checker the browser tests run on every console page, from the npm registry.

Its browser bundle is kept in `.tools/` (gitignored): `make axe` fetches it, and so does the first test that
needs it. `python -m tests.browser.axe` is what `make axe` runs.
"""

import subprocess
import tarfile
import tempfile
from pathlib import Path
from typing import Any

from playwright.sync_api import Page

AXE_VERSION = "4.14.1"
ROOT = Path(__file__).resolve().parents[2]
AXE_FILE = ROOT / ".tools" / f"axe-core-{AXE_VERSION}" / "axe.min.js"


# The impacts a console page may not have.
BLOCKING = ("serious", "critical")


class AxeUnavailable(Exception):
    """npm is missing or the registry cannot be reached."""


def fetch() -> Path:
    """The path of axe-core's `axe.min.js`, packed from the npm registry the first time."""
    if AXE_FILE.exists():
        return AXE_FILE
    AXE_FILE.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=AXE_FILE.parent) as folder:
        try:
            packed = subprocess.run(
                ["npm", "pack", "--silent", f"axe-core@{AXE_VERSION}", "--pack-destination", folder],
                check=True,
                capture_output=True,
                text=True,
                timeout=180,
            )
        except (OSError, subprocess.SubprocessError) as error:
            detail = getattr(error, "stderr", "") or str(error)
            raise AxeUnavailable(f"npm pack axe-core@{AXE_VERSION} failed: {detail.strip()[-500:]}") from error
        tarball = Path(folder) / packed.stdout.strip().splitlines()[-1]
        with tarfile.open(tarball) as archive:
            bundle = archive.extractfile("package/axe.min.js")
            assert bundle is not None
            partial = Path(folder) / "axe.min.js"
            partial.write_bytes(bundle.read())
        partial.replace(AXE_FILE)  # whole or not at all: a test running beside this one never reads half a file
    return AXE_FILE


def violations(page: Page, axe_source: str) -> list[dict[str, Any]]:
    """axe-core's serious and critical violations on the page as it stands (injected through the DevTools
    protocol, which the page's Content-Security-Policy does not govern). `axe_source`: the browser tests'
    fixture of that name (tests/browser/conftest.py)."""
    if not page.evaluate("typeof window.axe === 'object'"):
        page.evaluate(axe_source)
    found = page.evaluate("axe.run(document, {resultTypes: ['violations']}).then((r) => r.violations)")
    return [
        {
            "rule": v["id"],
            "impact": v["impact"],
            "help": v["help"],
            "where": [" ".join(node["target"]) for node in v["nodes"][:5]],
        }
        for v in found
        if v["impact"] in BLOCKING
    ]


if __name__ == "__main__":
    print(fetch())
