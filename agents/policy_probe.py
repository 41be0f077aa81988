"""Why a Rego policy's evaluation failed, with the rule's line: what agent-control-spec does not say.

The engine answers a failed evaluation with a fail-closed deny and only its reason code
(`runtime_error:policy_output_invalid`, `runtime_error:policy_invocation_failed`) and the message "Request
blocked by Agent Control Specification.": the compiler's own words (a complete rule given two values, a
built-in's error) stay inside it. `explain` finds the cause by asking the same engine smaller questions about
the same input: the value of the rule the point queries, then of each of its definitions alone (each renamed in
a copy of its package), and of the rules a failing one reads. It runs in the policy worker (agents/policy_worker.py),
inside the task's budget, and imports nothing of Django.

A cause is `{"policy", "file", "line", "rule", "why"}`: the policy id, the module and line of the rule, and
the reason in words.
"""

import json
import re
from dataclasses import dataclass
from typing import Any

from agent_control_spec import ActivatedPolicy
from agent_control_spec.authoring import parse_rego_ast

# The decisions a policy may give: AGENT-HOOKS-0.1's three, and the two policy words agent-control-spec maps
# onto them (warn: an allow with a warning; escalate: a deny an operator may lift).
DECISIONS = ("allow", "deny", "transform", "warn", "escalate")
# The engine's failures worth a cause (a tool the manifest does not list is the declaration's problem, said at
# save by `agents.policies.unlisted_tools`).
_UNEXPLAINED = {"runtime_error:tool_unknown"}
_QUERY = re.compile(r"^data(\.[A-Za-z_][A-Za-z0-9_]*)+$")
_PROBE, _COPY, _RENAMED = "airlock_explain", "airlock_explain_copy", "airlock_explain_definition"
# Each question is one small compile of the policy: a bound on how many one explanation asks.
_MOST_QUESTIONS = 24


def explainable(verdict: dict[str, Any]) -> bool:
    """Whether `verdict` (wire) is the engine's fail-closed deny for a policy that failed."""
    reason = str(verdict.get("reason") or "")
    return reason.startswith("runtime_error:") and reason not in _UNEXPLAINED


@dataclass
class _Definition:
    """One definition of a complete rule (an `else` chain is part of its definition)."""

    rule: str
    file: str
    line: int
    head: tuple[int, int]  # the bytes of its name in the module
    node: dict[str, Any]


@dataclass
class _Module:
    file: str
    source: bytes
    package: tuple[str, ...]
    header: tuple[int, int]  # the bytes of its `package` line
    definitions: list[_Definition]
    defaults: dict[str, int]  # rule -> the line of its `default`
    functions: list[_Definition]


def _path(ref: dict[str, Any]) -> list[str] | None:
    if "Var" in ref:
        return [ref["Var"]["value"]]
    if "RefDot" in ref:
        inner = _path(ref["RefDot"]["refr"])
        return None if inner is None else [*inner, ref["RefDot"]["field"][1]]
    return None


def _module(file: str, source: str) -> _Module | None:
    try:
        ast = parse_rego_ast(source)[0]["ast"]
    except (ValueError, LookupError):
        return None
    package = _path(ast["package"]["refr"])
    if package is None:
        return None
    span = ast["package"]["span"]
    module = _Module(file, source.encode(), tuple(package), (span["start"], span["end"]), [], {}, [])
    for rule in ast["rules"]:
        if "Default" in rule and "Var" in rule["Default"]["refr"]:
            module.defaults[rule["Default"]["refr"]["Var"]["value"]] = rule["Default"]["span"]["line"]
        heads = rule.get("Spec", {}).get("head", {})
        for kind, found in (("Compr", module.definitions), ("Func", module.functions)):
            head = heads.get(kind, {}).get("refr", {}).get("Var")
            if head is not None:
                name, line = head["span"], rule["Spec"]["span"]["line"]
                found.append(_Definition(head["value"], file, line, (name["start"], name["end"]), rule))
    return module


class _Questions:
    """The engine asked about one input: the value of a Rego reference, in a policy made of the original's
    modules and the probe's."""

    def __init__(self, manifest: dict[str, Any], policy: str, modules: dict[str, str], point: str, context: Any):
        self.manifest, self.policy, self.modules = manifest, policy, modules
        self.point, self.context, self.asked = point, context, 0

    def value(self, ref: str, extra: dict[str, str] | None = None) -> tuple[str, Any]:
        """("value", v), ("undefined", None) or ("error", None): what `ref` evaluates to."""
        self.asked += 1
        if self.asked > _MOST_QUESTIONS:
            return "error", None
        probe = (
            f'package {_PROBE}\n\nimport rego.v1\n\ndefault verdict := {{"decision": "allow"}}\n\n'
            f'verdict := {{"decision": "allow", "message": json.marshal([v])}} if {{\n\tv := {ref}\n}}\n'
        )
        manifest = json.loads(json.dumps(self.manifest))
        manifest["intervention_points"][self.point]["policy"] = {"id": self.policy, "query": f"data.{_PROBE}.verdict"}
        modules = {**self.modules, **(extra or {}), f"{_PROBE}.rego": probe}
        try:
            policy = ActivatedPolicy.from_memory(json.dumps(manifest), {self.policy: {"modules": modules}})
            verdict = policy.evaluate(self.point, self.context).to_wire()
        except Exception:  # the probe does not load (ValueError, RuntimeError): nothing learnt
            return "error", None
        if verdict.get("decision") != "allow":
            return "error", None
        if "message" not in verdict:
            return "undefined", None
        return "value", json.loads(verdict["message"])[0]

    def definition(self, modules: list[_Module], chosen: _Definition) -> tuple[str, Any]:
        """What the definition `chosen` alone gives: its package copied, that definition renamed."""
        copies = {}
        for index, module in enumerate(modules):
            source = module.source
            if chosen.file == module.file:
                start, end = chosen.head
                source = source[:start] + _RENAMED.encode() + source[end:]
            start, end = module.header
            header = f"package {_COPY}.{'.'.join(module.package)}".encode()
            copies[f"{_COPY}_{index}.rego"] = (source[:start] + header + source[end:]).decode()
        return self.value(f"data.{_COPY}.{'.'.join(modules[0].package)}.{_RENAMED}", copies)


def _names(node: Any) -> set[str]:
    """The variables a rule's AST reads (with the rules of its package among them)."""
    found: set[str] = set()
    if isinstance(node, dict):
        if "Var" in node and isinstance(node["Var"], dict):
            found.add(str(node["Var"].get("value")))
        for value in node.values():
            found |= _names(value)
    elif isinstance(node, list):
        for value in node:
            found |= _names(value)
    return found


def _summary(value: Any) -> str:
    if isinstance(value, dict) and "decision" in value:
        said = f'decision "{value["decision"]}"'
        return said + (f', reason "{value["reason"]}"' if isinstance(value.get("reason"), str) else "")
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 120 else text[:120] + "…"


def _cause(policy: str, where: _Definition, why: str) -> dict[str, Any]:
    return {"policy": policy, "file": where.file, "line": where.line, "rule": where.rule, "why": why}


class _Explanation:
    def __init__(self, questions: _Questions, modules: list[_Module]) -> None:
        self.questions, self.modules = questions, modules
        self.rules = {d.rule for m in modules for d in m.definitions}
        self.functions: dict[str, list[_Definition]] = {}
        for function in (f for m in modules for f in m.functions):
            self.functions.setdefault(function.rule, []).append(function)

    def definitions(self, rule: str) -> list[_Definition]:
        return [d for m in self.modules for d in m.definitions if d.rule == rule]

    def failing(self, rule: str, seen: set[str]) -> dict[str, Any] | None:
        """Why evaluating `rule` fails: two of its definitions give different values, one of them reads a
        rule that fails, or a built-in fails in one; None when none of its definitions fails."""
        seen.add(rule)
        policy, given, failed = self.questions.policy, [], []
        for definition in self.definitions(rule):
            outcome, value = self.questions.definition(self.modules, definition)
            if outcome == "value":
                given.append((definition, value))
            elif outcome == "error":
                failed.append(definition)
        distinct = {json.dumps(value, sort_keys=True): (d, value) for d, value in given}
        if len(distinct) > 1:
            (first, one), (second, other) = list(distinct.values())[:2]
            where = f"line {first.line}" if first.file == second.file else f"line {first.line} of {first.file}"
            why = (
                f"two rules give {rule} a value for this input, {where} ({_summary(one)}) and this one "
                f"({_summary(other)}): a complete rule has one value, so the evaluation fails (make the "
                "conditions exclusive, or chain them with else)"
            )
            return _cause(policy, second, why)
        for definition in failed:
            read = _names(definition.node)
            for name in sorted(read & self.rules - seen):
                found = self.failing(name, seen)
                if found is not None:
                    return found
            for name in sorted(read & set(self.functions)):
                if len(self.functions[name]) > 1:
                    why = (
                        f"the function {name}, which {rule} calls, is defined {len(self.functions[name])} times: "
                        "two of them giving different values for the same arguments fail the evaluation"
                    )
                    return _cause(policy, self.functions[name][1], why)
            return _cause(policy, definition, f"evaluating {rule} fails for this input, in this rule or one it reads")
        return None

    def undefined(self, rule: str) -> dict[str, Any] | None:
        definitions = self.definitions(rule)
        if not definitions or any(rule in m.defaults for m in self.modules):
            return None
        why = (
            f"{rule} has no value for this input (no rule's conditions hold, or a built-in failed in them, and it "
            "has no default): "
            f'add `default {rule} := {{"decision": "allow"}}`'
        )
        return _cause(self.questions.policy, definitions[0], why)

    def unaccepted(self, rule: str, value: Any) -> dict[str, Any] | None:
        """Where the value the engine refused comes from, and what the standard wants instead."""
        given = [d for d in self.definitions(rule) if self.questions.definition(self.modules, d) == ("value", value)]
        where = given[0] if given else next(iter(self.definitions(rule)), None)
        defaults = [(m, m.defaults[rule]) for m in self.modules if rule in m.defaults]
        if not given and defaults:
            module, line = defaults[0]
            where = _Definition(rule, module.file, line, (0, 0), {})
        if where is None:
            return None
        cause = _cause(self.questions.policy, where, _unaccepted(value))
        decision = value.get("decision") if isinstance(value, dict) else None
        cause["line"] = _line_of(where.node, decision) or where.line
        return cause


def _line_of(node: Any, decision: Any) -> int | None:
    """The line of `"decision": <decision>` within a rule's AST."""
    if isinstance(node, dict):
        for field in node.get("fields", []) if "fields" in node and "span" in node else []:
            key, value = field[1], field[2]
            if key.get("String", {}).get("value") == "decision" and value.get("String", {}).get("value") == decision:
                return int(value["String"]["span"]["line"])
        for value in node.values():
            if (line := _line_of(value, decision)) is not None:
                return line
    elif isinstance(node, list):
        for value in node:
            if (line := _line_of(value, decision)) is not None:
                return line
    return None


def _unaccepted(value: Any) -> str:
    """Why agent-control-spec refused `value` as a verdict, in the standard's words."""
    if not isinstance(value, dict):
        return f"the verdict is {_summary(value)}, not an object with a decision"
    decision = value.get("decision")
    if decision not in DECISIONS:
        return (
            f"the verdict's decision {json.dumps(decision)} is not one AGENT-HOOKS-0.1 accepts: allow, deny or "
            "transform (or warn and escalate, which the engine maps to them)"
        )
    for key in ("reason", "message"):
        if value.get(key) is not None and not isinstance(value[key], str):
            return f"the verdict's {key} is {_summary(value[key])}, not a string"
    if str(value.get("reason") or "").startswith(("runtime_error:", "host_error:")):
        return "the verdict's reason uses a prefix the engine and the host keep for themselves"
    if (decision == "transform") != ("transform" in value):
        return "a transform verdict, and only a transform verdict, carries a transform object {path, value}"
    return f"the verdict {_summary(value)} is not one the standard accepts (its fields' types or its transform)"


def explain(manifest: str, bundles: dict[str, Any], point: str, context: Any, reason: str) -> dict[str, Any] | None:
    """The cause of the failed evaluation at `point` (its verdict's `reason`), or None when it cannot be found:
    a Cedar policy, a query that is not a plain rule, or a failure the questions do not isolate."""
    document = json.loads(manifest)
    binding = (document.get("intervention_points") or {}).get(point) or {}
    policy = str((binding.get("policy") or {}).get("id"))
    declared = (document.get("policies") or {}).get(policy) or {}
    query = (binding.get("policy") or {}).get("query") or declared.get("query")
    sources = (bundles.get(policy) or {}).get("modules") or {}
    if declared.get("type") != "rego" or not isinstance(query, str) or not _QUERY.match(query):
        return None
    *package, rule = query.split(".")[1:]
    modules = [m for m in (_module(f, s) for f, s in sources.items()) if m is not None]
    modules = [m for m in modules if m.package == tuple(package)]
    if not modules:
        return None
    questions = _Questions(document, policy, sources, point, context)
    explanation = _Explanation(questions, modules)
    if reason == "runtime_error:policy_invocation_failed":
        return explanation.failing(rule, set()) or explanation.undefined(rule)
    outcome, value = questions.value(query)
    return explanation.unaccepted(rule, value) if outcome == "value" else None
