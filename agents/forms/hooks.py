"""The Policies section of the agent form: the `agent-hooks-declaration/1.0` document (SPEC section 8) as
fields, and the loader's and compiler's refusals put back at the field and line they are about.

Each binding is a row (`binding-<key>-<field>`, console/rows.py): its id, kind and points; an `airlock.acs`
binding's manifest and data; an `airlock.webhook` binding's connection and timeout; any other keys as JSON.
Each Rego module is a row of its own (`module-<key>-<field>`) naming the binding row it belongs to. The rest
of the declaration (its version, configuration and surface) is one small JSON text. The document saved is
the one the API takes; a declaration the fields cannot hold exactly is edited as raw JSON instead.
"""

import json
import re
from typing import Any

from django.http import QueryDict

from agents.policies import POINTS
from console.rows import Row, RowKind

BINDINGS = RowKind(
    "binding",
    ("id", "kind", "manifest", "data", "connection", "timeout_ms", "other"),
    error_field="id",
    blank={"kind": "airlock.acs"},
    choices=("kind",),
    multiline=("manifest", "data", "other"),
)
MODULES = RowKind(
    "module", ("binding", "policy", "file", "source"), error_field="source", choices=("binding",), multiline=("source",)
)
KINDS = [
    ("airlock.acs", "Rego or Cedar policy (airlock.acs)"),
    ("airlock.webhook", "Policy webhook (airlock.webhook)"),
]
DEFAULT_SETTINGS = {
    "declaration": "agent-hooks-declaration/1.0",
    "configuration": {"approval": {"resolver": "airlock-inbox"}},
}
_ACS_CONFIG = {"manifest", "modules", "data"}
_WEBHOOK_CONFIG = {"connection", "timeoutMs"}
_BINDING_KEYS = {"id", "kind", "at", "config"}

# The loader's and compiler's codes, in words (agent_hooks `declaration_error:*`, the engine's `runtime_error:*`).
CODE_WORDS = {
    "binding_rejected": "This binding was refused",
    "invalid_field": "A value is not allowed here",
    "unknown_field": "The declaration has a field the standard does not know",
    "kind_unknown": "This kind of binding is not one Airlock runs (airlock.acs or airlock.webhook)",
    "reference_unresolved": "The declaration names something it does not define",
    "spec_unsupported": "The declaration's version is not agent-hooks-declaration/1.0",
    "version_unsupported": "The declaration's version is not agent-hooks-declaration/1.0",
    "surface_unsupported": "The surface names a point or capability Airlock does not offer",
    "inconsistent": "Parts of the declaration contradict each other",
    "policy_invocation_failed": "The policy does not compile",
    "policy_invalid": "The policy cannot be evaluated",
    "budget_exceeded": "The policy ran past its time budget",
    "policy_worker_failed": "The policy's evaluation stopped",
    "tool_unknown": "the manifest does not name the tool",
}
# A binding's id as the loader checks it (`^[a-z][a-z0-9_-]{0,63}$`), in words.
BINDING_ID_WORDS = "Use lowercase letters, digits, - and _, starting with a letter (at most 64)."
_LOADER = re.compile(r"^(?:declaration_error:(?P<code>\w+) )?at (?P<pointer>/\S*): (?P<detail>.*)$", re.S)
_REJECTED = re.compile(r'^binding "[^"]*" \(kind "[^"]*"\) rejected: ')
_REGO_AT = re.compile(r"--> (?P<file>[^\s:]+):(?P<line>\d+):\d+")
_REGO_ERROR = re.compile(r"^error: (?P<message>.+)$", re.M)
_YAML = re.compile(r"^the manifest is not valid YAML: (?P<problem>.*) \(line (?P<line>\d+), column \d+\)$", re.S)
_MANIFEST_KEY = re.compile(r"^manifest key (?P<key>\S+) is not allowed: (?P<why>.*)$", re.S)
_UNLISTED = re.compile(
    r"^the manifest of binding '(?P<id>[^']*)' governs tool calls but does not list (?P<tools>.+?) under"
)
_RUNTIME = re.compile(r"runtime_error:(\w+):?\s*")
# A policy that failed at a sample input at save (agents.policies.SampleFailure): the point, the rule's module and line.
_SAMPLE = re.compile(
    r"^(?:at (?P<point>[a-z_]+)(?:, (?P<policy>[^/\s]+)/(?P<file>\S+) line (?P<line>\d+))?: |evaluated at sample "
    r"inputs, )(?P<why>.*)$",
    re.S,
)


class PolicyEditor:
    """The Policies section as typed; `document()` assembles the declaration, `place()` shows refusals."""

    def __init__(self, settings: str, bindings: list[Row], modules: list[Row], raw: bool = False) -> None:
        self.settings, self.bindings, self.modules, self.raw = settings, bindings, modules, raw
        self.settings_error = ""
        self.problems: list[str] = []  # refusals no field holds, in words

    @classmethod
    def of(cls, hooks: dict[str, Any] | None) -> "PolicyEditor":
        """The fields holding `hooks`; raw JSON when a part of it has no field that would give it back."""
        if hooks is None:
            return cls("", [], [])
        try:
            return cls._split(hooks)
        except (TypeError, ValueError, AttributeError, KeyError):
            return cls("", [], [], raw=True)

    @classmethod
    def _split(cls, hooks: dict[str, Any]) -> "PolicyEditor":
        settings = {key: value for key, value in hooks.items() if key != "bindings"}
        bindings: list[Row] = []
        modules: list[Row] = []
        for binding in hooks["bindings"]:
            config, kind = binding.get("config", {}), binding["kind"]
            at = binding.get("at")
            if not isinstance(binding["id"], str) or not isinstance(config, dict) or kind not in dict(KINDS):
                raise ValueError("not a binding the fields hold")
            if at is not None and not (isinstance(at, list) and at and set(at) <= set(POINTS)):
                raise ValueError("points the checkboxes cannot hold")
            other = {key: value for key, value in binding.items() if key not in _BINDING_KEYS}
            row = BINDINGS.new(id=binding["id"], kind=kind, other=_json_text(other) if other else "")
            row.values["at"] = ",".join(at or [])
            if kind == "airlock.acs":
                if set(config) - _ACS_CONFIG or not isinstance(config["manifest"], str):
                    raise ValueError("an acs config the fields cannot hold")
                row.values["manifest"] = config["manifest"]
                row.values["data"] = _json_text(config["data"]) if "data" in config else ""
                for policy, files in config.get("modules", {}).items():
                    if not files:
                        raise ValueError("a policy with no module")
                    for file, source in files.items():
                        if not isinstance(source, str):
                            raise ValueError("a module that is not text")
                        modules.append(MODULES.new(binding=row.key, policy=policy, file=file, source=source))
            else:
                timeout = config.get("timeoutMs")
                if set(config) - _WEBHOOK_CONFIG or not isinstance(config.get("connection", ""), str):
                    raise ValueError("a webhook config the fields cannot hold")
                if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, int)):
                    raise ValueError("a timeout the field cannot hold")
                row.values["connection"] = config.get("connection", "")
                row.values["timeout_ms"] = "" if timeout is None else str(timeout)
            bindings.append(row)
        if not bindings:
            raise ValueError("a declaration with no binding")
        return cls(_json_text(settings), bindings, modules)

    @classmethod
    def from_post(cls, data: QueryDict) -> "PolicyEditor":
        """The posted fields; the raw JSON box counts when it is chosen, or when the post has no fields (one
        made by hand, or from before the fields)."""
        bindings = BINDINGS.posted(data)
        for row in bindings:
            row.values["at"] = ",".join(p for p in data.getlist(f"binding-{row.key}-at") if p in POINTS)
        keys = {row.key for row in bindings}
        modules = [row for row in MODULES.posted(data) if row.values["binding"] in keys]
        raw = bool(data.get("hooks_raw")) or not data.get("hooks_editor")
        return cls(data.get("hooks_settings", "").replace("\r\n", "\n"), bindings, modules, raw)

    @property
    def grouped(self) -> list[tuple[Row, list[Row], list[str]]]:
        """Each binding row with its module rows and its points, as the editor lays them out."""
        return [(row, self.modules_of(row), row.values["at"].split(",")) for row in self.bindings]

    def modules_of(self, binding: Row) -> list[Row]:
        return [row for row in self.modules if row.values["binding"] == binding.key]

    @property
    def has_errors(self) -> bool:
        rows = self.bindings + self.modules
        return bool(self.settings_error or self.problems or any(row.errors for row in rows))

    def document(self) -> dict[str, Any] | None:
        """The declaration the fields hold (None: no binding, no policies); what cannot be converted is an
        error at its field (`has_errors`)."""
        self.settings_error, self.problems = "", []
        for row in self.bindings + self.modules:
            row.errors = {}
        if not self.bindings:
            return None
        settings: Any = DEFAULT_SETTINGS
        if self.settings.strip():
            settings = _json(self.settings)
            if isinstance(settings, str) or not isinstance(settings, dict):
                self.settings_error = settings if isinstance(settings, str) else "Give a JSON object."
                settings = {}
        return {**settings, "bindings": [self._binding(row) for row in self.bindings]}

    def _binding(self, row: Row) -> dict[str, Any]:
        v = row.values
        binding: dict[str, Any] = {"id": v["id"], "kind": v["kind"]}
        if not v["id"]:
            row.errors["id"] = "Give the binding an id, like mail-guard."
        if v["kind"] not in dict(KINDS):
            row.errors["kind"] = "Choose airlock.acs or airlock.webhook."
        if v["at"]:
            binding["at"] = v["at"].split(",")
        if v["other"].strip():
            other = _json(v["other"])
            if isinstance(other, dict):
                binding = other | binding
            else:
                row.errors["other"] = other if isinstance(other, str) else "Give a JSON object."
        if v["kind"] == "airlock.webhook":
            config: dict[str, Any] = {"connection": v["connection"]}
            if v["timeout_ms"]:
                try:
                    config["timeoutMs"] = int(v["timeout_ms"])
                except ValueError:
                    row.errors["timeout_ms"] = "Give a whole number of milliseconds, or leave it empty (2000)."
            return binding | {"config": config}
        config = {"manifest": v["manifest"]}
        modules: dict[str, dict[str, str]] = {}
        for module in self.modules_of(row):
            policy, file = module.values["policy"], module.values["file"]
            if not policy:
                module.errors["policy"] = "Give the id of the policy (under policies: in the manifest)."
            if not file:
                module.errors["file"] = "Give the module a file name, like policy.rego."
            elif file in modules.get(policy, {}):
                module.errors["file"] = f"Policy {policy} has another module named {file}."
            modules.setdefault(policy, {})[file] = module.values["source"]
        if modules:
            config["modules"] = modules
        if v["data"].strip():
            data = _json(v["data"])
            if isinstance(data, str):
                row.errors["data"] = data
                row.errors["data_line"] = _line(data)
            else:
                config["data"] = data
        return binding | {"config": config}

    def place(self, problem: str) -> None:
        """Show one refusal of the loader or compiler at the field (and line) it is about, in words."""
        found = _LOADER.match(problem)
        pointer, code = (found["pointer"], found["code"]) if found else ("/", None)
        detail = _REJECTED.sub("", found["detail"] if found else problem)
        parts = pointer.strip("/").split("/")
        row = None
        if parts[0] == "bindings" and len(parts) > 1 and parts[1].isdigit() and int(parts[1]) < len(self.bindings):
            row = self.bindings[int(parts[1])]
        unlisted = _UNLISTED.match(detail)
        if unlisted:
            row = next((r for r in self.bindings if r.values["id"] == unlisted["id"]), None)
            detail = (
                f"The manifest does not name {unlisted['tools']} under tools:, so every call of it would be "
                "denied (the tool is unknown to the policy). Add it there, or use the starter policy, which "
                "names the agent's tools."
            )
            self._put(row, "manifest", detail, _key_line(row, "tools") if row else None)
            return
        sample = _SAMPLE.match(detail)
        if sample:
            self._sampled(row, sample)
            return
        if row is None or self.raw:
            self.problems.append(_words(code, detail))
            return
        rego, yaml_error, key = _REGO_AT.search(detail), _YAML.match(detail), _MANIFEST_KEY.match(detail)
        if rego:
            file = rego["file"]
            module = next((m for m in self.modules_of(row) if m.values["file"] == file), None)
            message = _REGO_ERROR.search(detail)
            words = f"Rego module {file}, line {rego['line']}: {message['message'] if message else detail}"
            if module is not None:
                module.errors.setdefault("source", words)
                module.errors.setdefault("source_line", rego["line"])
            else:
                row.errors.setdefault("id", words)
        elif yaml_error:
            words = f"The manifest, line {yaml_error['line']}: this is not valid YAML ({yaml_error['problem']})."
            self._put(row, "manifest", words, yaml_error["line"])
        elif key:
            words = f"The manifest's key {key['key']} is not allowed: {key['why']}."
            self._put(row, "manifest", words, _key_line(row, key["key"].split(".")[-1]))
        elif detail.startswith("the manifest") or detail.startswith("config.manifest"):
            self._put(row, "manifest", _words(None, detail), None)
        elif detail.startswith("config.data"):
            self._put(row, "data", _words(None, detail), None)
        elif detail.startswith("config.connection") or parts[2:4] == ["config", "connection"]:
            self._put(row, "connection", _words(None, detail), None)
        elif detail.startswith("config.timeoutMs"):
            self._put(row, "timeout_ms", _words(None, detail), None)
        elif parts[2:3] == ["at"]:
            self._put(row, "at", _words(code, detail), None)
        elif parts[2:3] == ["kind"] or code == "kind_unknown":
            self._put(row, "kind", _words(code, detail), None)
        elif parts[2:] == ["id"] and detail.startswith("must match"):
            self._put(row, "id", BINDING_ID_WORDS, None)
        else:
            self._put(row, "id", _words(code, detail), None)

    def _sampled(self, row: Row | None, failure: re.Match[str]) -> None:
        """A policy that failed at a sample input of its point: on its module's source at the rule's line."""
        point, why = failure["point"], failure["why"].rstrip(".")
        if failure["file"] is None:
            where = f"At {point}, for a sample input" if point else "Evaluated at sample inputs"
            self._put(None if self.raw else row, "id", f"{where}: {why}.", None)
            return
        modules = self.modules_of(row) if row is not None and not self.raw else []
        module = next(
            (m for m in modules if (m.values["policy"], m.values["file"]) == failure.group("policy", "file")), None
        )
        if module is None:
            where = f"Rego module {failure['policy']}/{failure['file']}, line {failure['line']}"
            self._put(None if self.raw else row, "id", f"At {point}, for a sample input, {where}: {why}.", None)
            return
        module.errors.setdefault("source", f"At {point}, for a sample input, line {failure['line']}: {why}.")
        module.errors.setdefault("source_line", failure["line"])

    def _put(self, row: Row | None, field: str, words: str, line: int | str | None) -> None:
        if row is None:
            self.problems.append(words)
            return
        row.errors.setdefault(field, words)
        if line:
            row.errors.setdefault(f"{field}_line", str(line))


def _words(code: str | None, detail: str) -> str:
    """A refusal in a sentence: its code named in words, the engine's codes in the detail too."""
    detail = _RUNTIME.sub(lambda m: f"{CODE_WORDS.get(m[1], m[1].replace('_', ' '))}: ", detail).strip()
    detail = detail[:1].upper() + detail[1:]
    if not detail.endswith((".", "…")):
        detail += "."
    return f"{CODE_WORDS[code]}. {detail}" if code in CODE_WORDS and code != "binding_rejected" else detail


def _json(text: str) -> Any:
    """The JSON in `text`, or the words saying where it is not JSON (a str: a JSON string is refused too)."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        return f"Not valid JSON, line {error.lineno}, column {error.colno}: {error.msg}."
    return "Give a JSON object or list." if isinstance(value, str) else value


def _line(message: str) -> str:
    found = re.search(r"line (\d+)", message)
    return found[1] if found else ""


def _key_line(row: Row, key: str) -> int | None:
    """The first line of the manifest where `key:` is written, for an error about that key."""
    for number, line in enumerate(row.values["manifest"].split("\n"), 1):
        if re.match(rf"^\s*{re.escape(key)}\s*:", line):
            return number
    return None


def _json_text(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)
