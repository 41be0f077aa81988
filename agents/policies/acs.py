"""The `airlock.acs` kind: Rego and Cedar policies run by agent-control-spec in the policy sandbox
(agents/policy_sandbox.py), their manifest checked key by key (`safe_manifest`), their compiling on save
rate-limited per tenant (`COMPILE_QUOTA`)."""

import hashlib
import json
import re
import threading
import time
from collections import OrderedDict
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import yaml
from agent_hooks import (
    Verdict,
)
from django.conf import settings

from agents.policies.escalations import stable_key
from agents.policy_probe import explainable
from agents.policy_sandbox import BudgetExceeded, PolicyInvalid, WorkerFailed, for_tenant, sandbox

# What a tenant's manifest may say (SPEC sections 2 and 8): every key the engine would resolve to a file or
# URL is refused, and so is every key this list does not name, so a key a later engine learns to resolve is
# refused too. The policies' sources ride in the binding's config (`modules`, `data`), never on the host.
MANIFEST_MAX = 64 * 1024
SOURCES_MAX = 256 * 1024
_MANIFEST_KEYS = {
    "agent_control_specification_version",
    "metadata",
    "extends",
    "policies",
    "intervention_points",
    "tools",
    "annotators",
    "approval",
}
_POLICY_KEYS = {"rego": {"type", "query"}, "cedar": {"type", "query", "policy_set"}}
_POINT_KEYS = {"policy_target", "policy_target_kind", "tool_name_from", "annotations", "policy"}
_POINT_POLICY_KEYS = {"id", "query"}
_TOOL_KEYS = {"type", "id", "description"}
_HOST_KEYS = {"bundle", "bundle_url", "inline_bundle", "data", "data_paths", "policy_path", "entities_path"}
_HOST_KEYS |= {"schema_path", "adapter", "url", "path", "file", "include"}
_READS_THE_HOST = "names a file or URL, and the server reads none: give Rego in config.modules, data in config.data"


class ManifestRefused(ValueError):
    """A manifest Airlock does not run; the message names the key (`policies.mail.bundle`) and why."""

    def __init__(self, key: str, why: str) -> None:
        super().__init__(f"manifest key {key} is not allowed: {why}" if key else f"the manifest {why}")


def _yaml_document(text: str) -> Any:
    """The manifest's YAML as plain data; tags (`!include` reads a file), anchors and aliases (which expand
    without bound) are refused before anything is built."""
    if len(text.encode()) > MANIFEST_MAX:
        raise ManifestRefused("", f"is over {MANIFEST_MAX // 1024} KB")
    try:
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
                raise ManifestRefused("", "uses a YAML anchor or alias: write each value out")
            tag = getattr(event, "tag", None)
            if tag is not None and not tag.startswith("tag:yaml.org,2002:") and tag != "!":
                raise ManifestRefused("", f"uses the YAML tag {tag}: tags are not read")
        return yaml.load(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        problem = getattr(error, "problem", None) or "cannot be read"
        raise ManifestRefused("", f"is not valid YAML: {problem}{where}") from None


def _only(mapping: Any, allowed: set[str], where: str) -> dict[str, Any]:
    if not isinstance(mapping, dict):
        raise ManifestRefused(where, "must be a mapping")
    for key in mapping:
        if key not in allowed:
            path = f"{where}.{key}" if where else str(key)
            raise ManifestRefused(path, _READS_THE_HOST if key in _HOST_KEYS else "unknown key")
    return mapping


def safe_manifest(text: str) -> dict[str, Any]:
    """The manifest `text` as data, when it names nothing on the host; ManifestRefused naming the key."""
    document = _only(_yaml_document(text), _MANIFEST_KEYS, "")
    if document.get("extends") not in (None, []):
        raise ManifestRefused("extends", "a manifest cannot name another manifest: " + _READS_THE_HOST)
    if document.get("annotators") not in (None, {}):
        raise ManifestRefused("annotators", "annotators call services from the server: use a policy webhook")
    if document.get("approval") is not None:
        raise ManifestRefused("approval", "escalations go to the declaration's resolver (airlock-inbox)")
    for name, policy in _section(document, "policies").items():
        kind = policy.get("type") if isinstance(policy, dict) else None
        if kind not in _POLICY_KEYS:
            raise ManifestRefused(f"policies.{name}.type", "must be rego or cedar")
        _only(policy, _POLICY_KEYS[kind], f"policies.{name}")
    for point, config in _section(document, "intervention_points").items():
        _only(config, _POINT_KEYS, f"intervention_points.{point}")
        if config.get("annotations") not in (None, {}):
            raise ManifestRefused(f"intervention_points.{point}.annotations", "annotators are not available")
        _only(config.get("policy") or {}, _POINT_POLICY_KEYS, f"intervention_points.{point}.policy")
    for name, tool in _section(document, "tools").items():
        _only(tool, _TOOL_KEYS, f"tools.{name}")
    return document


def _section(document: dict[str, Any], key: str) -> dict[str, Any]:
    """The manifest's section `key`, which maps names to entries (none when absent)."""
    section = document.get(key) or {}
    if not isinstance(section, dict):
        raise ManifestRefused(key, "must be a mapping")
    return section


@dataclass(frozen=True)
class AcsSources:
    """A binding's policy as the sandbox runs it: the checked manifest (as JSON, which the engine reads as
    YAML: no tag or anchor reaches it), its bundles and the key both are known by."""

    key: str
    manifest: str
    bundles: dict[str, Any]
    points: frozenset[str]
    tools: frozenset[str]


def _text_map(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def _data_list(value: Any) -> bool:
    return isinstance(value, list) and all(
        isinstance(item, dict)
        and set(item) == {"mount", "document"}
        and isinstance(item["mount"], list)
        and all(isinstance(part, str) for part in item["mount"])
        for item in value
    )


@lru_cache(maxsize=256)
def _checked(manifest_text: str, modules_text: str, data_text: str) -> AcsSources:
    if len(modules_text) + len(data_text) > SOURCES_MAX:
        raise ValueError(f"config.modules and config.data are over {SOURCES_MAX // 1024} KB together")
    document = safe_manifest(manifest_text)
    # Back from the texts the cache is keyed by (the config's dicts cannot be a key).
    modules, data = json.loads(modules_text), json.loads(data_text)
    bundles = {policy: {"modules": modules.get(policy, {}), "data": data.get(policy, [])} for policy in modules | data}
    manifest = json.dumps(document, sort_keys=True, default=str)
    key = hashlib.sha256(json.dumps([manifest, bundles], sort_keys=True).encode()).hexdigest()
    points = frozenset(document.get("intervention_points") or {})
    tools = frozenset(str(t.get("id", name)) for name, t in (document.get("tools") or {}).items())
    return AcsSources(key, manifest, bundles, points, tools)


def acs_sources(config: Mapping[str, Any]) -> AcsSources:
    """The policy of an `airlock.acs` binding's config, checked (ValueError says why it cannot run)."""
    manifest, modules, data = config.get("manifest"), config.get("modules", {}), config.get("data", {})
    if not isinstance(manifest, str) or not manifest.strip():
        raise ValueError("config.manifest must be the manifest's YAML text")
    if not isinstance(modules, dict) or not all(_text_map(files) for files in modules.values()):
        raise ValueError('config.modules must map policy ids to {"<file>.rego": "<source>"}')
    if not isinstance(data, dict) or not all(_data_list(documents) for documents in data.values()):
        raise ValueError('config.data must map policy ids to [{"mount": ["<name>", ...], "document": {...}}]')
    extra = set(config) - {"manifest", "modules", "data"}
    if extra:
        raise ValueError(f"config has unknown fields: {', '.join(sorted(extra))}")
    return _checked(manifest, json.dumps(modules, sort_keys=True), json.dumps(data, sort_keys=True))


# The compiler's messages quote the tenant's own sources, never the host (nothing it reads is the host's);
# its positions are in the JSON the sandbox hands it, not in the tenant's YAML, so they are dropped.
_POSITION = re.compile(r" at line \d+,? column \d+")


def _in_our_words(problem: str) -> str:
    problem = _POSITION.sub("", problem)
    return problem if len(problem) <= 500 else problem[:500] + "…"


class AcsBinding:
    """An `airlock.acs` binding: points its manifest does not govern allow at once (the declaration binds
    every point); the rest are evaluated in the policy sandbox under its budget, which fails closed."""

    def __init__(self, sources: AcsSources, name: str) -> None:
        self.sources, self.name = sources, name

    def intercept(self, context: dict[str, Any]) -> Verdict | Awaitable[Verdict]:
        if context["interception_point"] not in self.sources.points:
            return ALLOW
        return self._evaluate(context)

    async def _evaluate(self, context: dict[str, Any]) -> Verdict:
        sources, point = self.sources, context["interception_point"]
        try:
            wire, cause = await sandbox().evaluate(sources.key, sources.manifest, sources.bundles, point, context)
        except BudgetExceeded:
            return Verdict.deny(reason=BUDGET_EXCEEDED, message="The policy ran past its time budget.")
        except WorkerFailed:
            return Verdict.deny(reason=WORKER_FAILED, message="The policy's evaluation stopped.")
        except PolicyInvalid as error:
            return Verdict.deny(reason="runtime_error:policy_invalid", message=_in_our_words(str(error)))
        if explainable(wire):  # the engine says only "Request blocked by Agent Control Specification."
            where = f": {said(cause)}" if cause else f" at {point}"
            wire = wire | {"message": f"The policy {self.name} failed ({wire['reason']}){where}."}
        return Verdict.from_wire(wire)


def said(cause: Mapping[str, Any]) -> str:
    """A failed evaluation's cause (agents.policy_probe) in a sentence: the module, the rule's line, why."""
    return f"{cause['policy']}/{cause['file']} line {cause['line']}: {cause['why']}"


@dataclass(frozen=True)
class SampleFailure:
    """A policy that failed at a sample context of `point` (the engine's `reason`; `cause` when found), or
    whose evaluation of the samples ran past its budget or stopped (`point` empty)."""

    point: str
    reason: str
    cause: Mapping[str, Any] | None = None

    def __str__(self) -> str:
        if not self.point and self.reason == BUDGET_EXCEEDED:
            return f"evaluated at sample inputs, the policy ran past its time budget ({self.reason})"
        if not self.point:
            return f"evaluated at sample inputs, the policy's evaluation stopped ({self.reason})"
        if self.cause is None:
            return f"at {self.point}: the policy fails for a sample input ({self.reason})"
        return f"at {self.point}, {said(self.cause)} ({self.reason})"


# Policy key and samples -> the failures found (a tenant saving the same broken text again costs nothing).
_SAMPLED: OrderedDict[str, tuple[SampleFailure, ...]] = OrderedDict()


def sampled(sources: AcsSources, tenant: str, contexts: list[dict[str, Any]]) -> tuple[SampleFailure, ...]:
    """How the compiled `sources` fail at `contexts` (those of the points their manifest governs), evaluated in
    the policy sandbox as `tenant`'s task under the budgets a turn's evaluations have: what saving a definition
    checks after compiling, once per process per policy text and samples."""
    asked = [(c["interception_point"], c) for c in contexts if c["interception_point"] in sources.points]
    key = hashlib.sha256(json.dumps([sources.key, [stable_key(c) for _, c in asked]]).encode()).hexdigest()
    found = _SAMPLED.get(key) if asked else ()
    if found is None:
        try:
            with for_tenant(tenant):
                results = sandbox().sample(sources.key, sources.manifest, sources.bundles, asked)
        except BudgetExceeded:  # not kept: a busy machine may be why
            return (SampleFailure("", BUDGET_EXCEEDED),)
        except WorkerFailed:  # not kept either; refused as a turn would deny
            return (SampleFailure("", WORKER_FAILED),)
        except PolicyInvalid:  # the compile check said why
            return ()
        failed = [r for r in results if explainable(r["verdict"])]
        found = _SAMPLED[key] = tuple(SampleFailure(r["point"], r["verdict"]["reason"], r["cause"]) for r in failed)
        while len(_SAMPLED) > _COMPILED_HELD:
            _SAMPLED.popitem(last=False)
    return found


ALLOW = Verdict.allow()
# The budget is the host's, but agent-hooks reserves `host_error:*` for the emitter's own failures (an
# interceptor's verdict may not use it, section 5): ours take the prefix the policy engine's fail-closed
# denies use.
BUDGET_EXCEEDED = "runtime_error:budget_exceeded"
WORKER_FAILED = "runtime_error:policy_worker_failed"


def acs_binding(config: Mapping[str, Any], binding: Any) -> Any:  # an AcsBinding (sync or async: not the SDK's type)
    return AcsBinding(acs_sources(config), binding.id)


class CompileQuota:
    """Compiles of new policy texts per tenant (saves that bring one), at most `POLICY_COMPILES_PER_MINUTE`
    a minute in this process: a token bucket per tenant. A text compiled before costs nothing."""

    def __init__(self) -> None:
        self._buckets: dict[str, tuple[float, float]] = {}
        self._lock = threading.Lock()

    def take(self, tenant: str) -> float:
        """0 when `tenant` may compile now (and it is counted), else the seconds until it may."""
        per_minute = float(settings.POLICY_COMPILES_PER_MINUTE)
        with self._lock:
            now = time.monotonic()
            tokens, then = self._buckets.get(tenant, (per_minute, now))
            tokens = min(per_minute, tokens + (now - then) * per_minute / 60)
            if tokens < 1:
                self._buckets[tenant] = (tokens, now)
                return (1 - tokens) * 60 / per_minute
            self._buckets[tenant] = (tokens - 1, now)
            return 0.0


COMPILE_QUOTA = CompileQuota()
# Policy key -> why it does not compile (empty: it does), for the texts this process compiled; oldest first.
_COMPILED: OrderedDict[str, tuple[str, ...]] = OrderedDict()
_COMPILED_HELD = 1024


class CompilesThrottled(Exception):
    """The tenant compiled `CompileQuota.per_minute` new policies in the last minute; `retry_after` seconds."""

    def __init__(self, retry_after: float) -> None:
        self.retry_after = max(1, round(retry_after))
        super().__init__(f"too many new policies compiled in a minute; try again in {self.retry_after} s")


def _compile(sources: AcsSources, tenant: str) -> tuple[str, ...]:
    wait = COMPILE_QUOTA.take(tenant)
    if wait:
        raise CompilesThrottled(wait)
    try:
        with for_tenant(tenant):
            problems = sandbox().check(sources.key, sources.manifest, sources.bundles)
        return tuple(_in_our_words(p) for p in problems)
    except BudgetExceeded:
        budget = settings.POLICY_COMPILE_BUDGET_MS / 1000
        return (f"{BUDGET_EXCEEDED}: the policy did not compile within {budget:g} s",)


def compiled(sources: AcsSources, tenant: str) -> tuple[str, ...]:
    """Why `sources` do not compile (empty: they do), once per process per policy text; CompilesThrottled when
    `tenant` compiled too many new texts lately."""
    found = _COMPILED.get(sources.key)
    if found is None:
        try:
            found = _compile(sources, tenant)
        except WorkerFailed:  # not kept: the next save tries again
            return ("the policy compiler stopped while compiling this policy",)
        _COMPILED[sources.key] = found
        while len(_COMPILED) > _COMPILED_HELD:
            _COMPILED.popitem(last=False)
    return found
