"""A real OpenID provider for the sign-in tests (SPEC section 19): npm `oidc-provider` run by node on loopback
(tests/oidc/provider/provider.mjs), with one client, accounts from a JSON file and test switches that make its ID
tokens bad in one way.

The package is installed from the npm registry into `.tools/oidc-provider` (gitignored) the first time; without npm
or its registry the test is skipped, which tests/conftest.py turns into a failure under CI."""

import fcntl
import json
import os
import select
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any, Self

import pytest

from tests.processes.cluster import ROOT, free_port

HERE = Path(__file__).parent / "provider"
INSTALLED = ROOT / ".tools" / "oidc-provider"
MODES = ("normal", "wrong-nonce", "expired", "wrong-key", "wrong-audience", "wrong-issuer", "garbled")


def install() -> Path:
    """The folder holding provider.mjs beside the node_modules of provider/package-lock.json (node resolves an ES
    module's imports from its own folder, not NODE_PATH). A lock serialises the pytest-xdist workers."""
    INSTALLED.mkdir(parents=True, exist_ok=True)
    lock = HERE / "package-lock.json"
    with open(INSTALLED / ".install-lock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)
        installed_lock = INSTALLED / "package-lock.json"
        current = installed_lock.exists() and installed_lock.read_bytes() == lock.read_bytes()
        if not (current and (INSTALLED / "node_modules" / "oidc-provider" / "package.json").exists()):
            shutil.copy(HERE / "package.json", INSTALLED / "package.json")
            shutil.copy(lock, installed_lock)
            try:
                subprocess.run(
                    ["npm", "ci", "--no-audit", "--no-fund", "--silent"],
                    cwd=INSTALLED,
                    check=True,
                    capture_output=True,
                    text=True,
                    timeout=300,
                )
            except (OSError, subprocess.SubprocessError) as error:
                installed_lock.unlink(missing_ok=True)
                detail = getattr(error, "stderr", "") or str(error)
                pytest.skip(f"npm cannot install tests/oidc/provider/package-lock.json: {detail.strip()[-500:]}")
        shutil.copy(HERE / "provider.mjs", INSTALLED / "provider.mjs")
    return INSTALLED


class Provider:
    """A running provider: its issuer, its one client's credentials, and its test switches."""

    def __init__(
        self, process: subprocess.Popen[str], issuer: str, client_id: str, client_secret: str, accounts_file: Path
    ) -> None:
        self.process = process
        self.issuer = issuer
        self.client_id = client_id
        self.client_secret = client_secret
        self.accounts_file = accounts_file

    def set_accounts(self, accounts: dict[str, dict[str, Any]]) -> None:
        """Replace the accounts; the provider reads the file at every lookup."""
        staged = self.accounts_file.with_suffix(".tmp")
        staged.write_text(json.dumps(accounts))
        staged.replace(self.accounts_file)

    def set_mode(self, mode: str) -> None:
        """How the token endpoint's next ID tokens are bad (one of MODES; "normal" for good ones)."""
        request = urllib.request.Request(
            f"{self.issuer}/__test/mode",
            json.dumps({"mode": mode}).encode(),
            {"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 204, response.status

    def logouts(self) -> int:
        """How many end-session confirmations the provider completed."""
        with urllib.request.urlopen(f"{self.issuer}/__test/logouts", timeout=10) as response:
            return int(json.loads(response.read())["logouts"])

    def stop(self) -> None:
        """Terminate the process (kill it if it does not end)."""
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.stop()


def start_provider(
    folder: Path,
    *,
    redirect_uris: list[str],
    post_logout_redirect_uris: list[str],
    accounts: dict[str, dict[str, Any]],
    client_id: str = "airlock",
    client_secret: str = "airlock-secret",
) -> Provider:
    """Start the provider on a free loopback port with its accounts file and log in `folder`; it answers once
    started. Raises with the process's stderr when it ends before it is ready."""
    installed = install()
    folder.mkdir(parents=True, exist_ok=True)
    accounts_file = folder / "oidc-accounts.json"
    log = folder / "oidc-provider.log"
    port = free_port()
    env = {
        **os.environ,
        "OIDC_PORT": str(port),
        "OIDC_CLIENT_ID": client_id,
        "OIDC_CLIENT_SECRET": client_secret,
        "OIDC_REDIRECT_URIS": ",".join(redirect_uris),
        "OIDC_POST_LOGOUT_REDIRECT_URIS": ",".join(post_logout_redirect_uris),
        "OIDC_ACCOUNTS_FILE": str(accounts_file),
    }
    accounts_file.write_text(json.dumps(accounts))
    with open(log, "w") as stderr:
        process = subprocess.Popen(
            ["node", str(installed / "provider.mjs")], env=env, stdout=subprocess.PIPE, stderr=stderr, text=True
        )
    provider = Provider(process, f"http://127.0.0.1:{port}", client_id, client_secret, accounts_file)
    assert process.stdout is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        readable, _, _ = select.select([process.stdout], [], [], 0.2)
        if readable:
            line = process.stdout.readline()
            if line.strip() == f"ready {provider.issuer}":
                return provider
            if not line:  # the process closed its stdout: it ended
                break
    provider.stop()
    raise RuntimeError(f"the OpenID provider did not start (exit {process.returncode}):\n{log.read_text()}")
