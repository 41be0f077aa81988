"""Each name said once (issue 49 item 5, docs/architecture.md "Words"): no two modules of one app share a name, and no
two public functions or classes of the apps do, so a name found in a traceback, a grep or a review means one thing.
A management command's class is `Command` in each: Django finds it by that name."""

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

from django.conf import settings

# The apps are the import-linter's root packages: a new app is looked at once its layers are said.
APPS = tomllib.loads((Path(settings.BASE_DIR) / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]


def modules(app: str) -> list[Path]:
    root = Path(settings.BASE_DIR) / app
    return [path for path in root.rglob("*.py") if "migrations" not in path.parts and path.name != "__init__.py"]


def test_every_app_is_looked_at():
    installed = {name for name in settings.INSTALLED_APPS if (Path(settings.BASE_DIR) / name).is_dir()}
    assert installed <= set(APPS)


def test_no_two_modules_of_an_app_share_a_name():
    for app in APPS:
        found = defaultdict(list)
        for path in modules(app):
            found[path.name].append(str(path.relative_to(settings.BASE_DIR)))
        assert {name: paths for name, paths in found.items() if len(paths) > 1} == {}, app


def test_no_two_public_functions_or_classes_share_a_name():
    found = defaultdict(list)
    for app in APPS:
        for path in modules(app):
            for node in ast.parse(path.read_text()).body:
                named = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
                if named and not node.name.startswith("_") and "commands" not in path.parts:
                    found[node.name].append(str(path.relative_to(settings.BASE_DIR)))
    assert {name: paths for name, paths in found.items() if len(paths) > 1} == {}
