"""A policy worker: the process where tenants' Rego and Cedar policies compile and evaluate (SPEC section 8).

`agents.policy_sandbox` starts these with `python -m agents.policy_worker` and speaks to each over its
standard input and output: frames of a 4-byte big-endian length and a JSON object. A costly policy burns
this process's CPU, not the console's GIL, and the sandbox kills the process when it overruns its budget.

Before it reads a request the worker gives up what a policy could reach: it runs with an empty environment
(the sandbox starts it so), at a lower priority, with a cap on its memory and, where the kernel allows
(user namespaces), in an empty root directory with no network. The manifest checks in `agents.policies`
already refuse every key that names a file or URL; this is the second wall, not the first.

Requests: `{"op": "check", "manifest", "bundles"}` compiles a policy and keeps it (answer `{"problems":
[...]}`, empty when it compiled); `{"op": "evaluate", "key", "point", "context"}` (answer `{"verdict": <wire>}`,
or `{"missing": true}` when the worker does not hold `key`: the sandbox sends it again with `manifest` and
`bundles`, and the answer is `{"problems": [...]}` when it does not compile); `{"op": "explain", "manifest",
"bundles", "point", "context", "reason"}`, why an evaluation failed (answer `{"cause": {...} | null}`,
agents.policy_probe); `{"op": "sample", "key", "manifest", "bundles", "contexts": [[point, context], ...]}`,
what saving a definition asks (answer `{"results": [{"point", "verdict", "cause"}, ...]}`, a cause for each
failed evaluation, or `{"problems": [...]}`).
Nothing in this module may import Django: the worker starts in a fraction of a second.
"""

import json
import os
import resource
import sys
import tempfile
from collections import OrderedDict
from typing import Any, BinaryIO

from agent_control_spec import ActivatedPolicy, validate_artifacts

from agents.policy_probe import explain, explainable

# Activated policies this worker holds, least recently used first (the sandbox sends a policy along only
# when the worker answers `missing`).
HELD = 64
MEMORY_BYTES = 2 * 1024**3
NICENESS = 10


def read_frame(stream: BinaryIO) -> dict[str, Any] | None:
    head = stream.read(4)
    if len(head) < 4:
        return None
    body = stream.read(int.from_bytes(head, "big"))
    return json.loads(body)


def write_frame(stream: BinaryIO, message: dict[str, Any]) -> None:
    body = json.dumps(message, separators=(",", ":")).encode()
    stream.write(len(body).to_bytes(4, "big") + body)
    stream.flush()


def _problems(error: Exception) -> list[str]:
    return [str(error) or type(error).__name__]


def activate(manifest: str, bundles: dict[str, Any]) -> ActivatedPolicy:
    """The policy, compiled; ValueError with the compiler's words when it cannot be."""
    found = [p for p in validate_artifacts(manifest, bundles) if p.get("severity", "error") == "error"]
    if found:
        raise ValueError("; ".join(f"{p.get('code')}: {p.get('message')}" for p in found))
    try:
        return ActivatedPolicy.from_memory(manifest, bundles)
    except Exception as error:  # the native loader reports a bad manifest or module as RuntimeError
        raise ValueError(str(error)) from None


class Worker:
    def __init__(self) -> None:
        self.held: OrderedDict[str, ActivatedPolicy] = OrderedDict()

    def hold(self, key: str, policy: ActivatedPolicy) -> None:
        self.held[key] = policy
        self.held.move_to_end(key)
        while len(self.held) > HELD:
            self.held.popitem(last=False)

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        key, op = request.get("key") or "", request["op"]
        if op == "check":
            try:
                self.hold(key, activate(request["manifest"], request["bundles"]))
            except ValueError as error:
                return {"problems": _problems(error)}
            return {"problems": []}
        if op == "explain":
            said = (request[k] for k in ("manifest", "bundles", "point", "context", "reason"))
            return {"cause": explain(*said)}
        policy = self.held.get(key)
        if policy is None:
            if "manifest" not in request:
                return {"missing": True}
            try:
                policy = activate(request["manifest"], request["bundles"])
            except ValueError as error:
                return {"problems": _problems(error)}
        self.hold(key, policy)
        if op == "sample":
            return {
                "results": [self._sampled(policy, request, point, context) for point, context in request["contexts"]]
            }
        verdict = policy.evaluate(request["point"], request["context"])
        return {"verdict": verdict.to_wire()}

    @staticmethod
    def _sampled(policy: ActivatedPolicy, request: dict[str, Any], point: str, context: Any) -> dict[str, Any]:
        verdict, cause = policy.evaluate(point, context).to_wire(), None
        if explainable(verdict):
            try:
                cause = explain(request["manifest"], request["bundles"], point, context, verdict["reason"])
            except Exception:  # the failure stands without its cause
                cause = None
        return {"point": point, "verdict": verdict, "cause": cause}


def confine() -> None:
    """Give up the filesystem and the network where the kernel lets an unprivileged process (best effort:
    the manifest checks are the rule; see the module's docstring)."""
    os.setpriority(os.PRIO_PROCESS, 0, NICENESS)  # the sandbox may have lowered it already: not twice
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_BYTES, MEMORY_BYTES))
    empty = tempfile.mkdtemp(prefix="airlock-policy-")
    try:
        os.unshare(os.CLONE_NEWUSER | os.CLONE_NEWNS | os.CLONE_NEWNET)
        os.chroot(empty)
        os.chdir("/")
    except OSError:
        os.chdir(empty)


def main() -> None:
    inbound, outbound = sys.stdin.buffer, sys.stdout.buffer
    # Nothing a policy does may write to the channel the sandbox reads.
    sys.stdout = sys.stderr
    confine()
    worker = Worker()
    write_frame(outbound, {"ready": True})
    while (request := read_frame(inbound)) is not None:
        try:
            answer = worker.handle(request)
        except Exception as error:  # an unknown point, a context the engine refuses: the caller denies
            answer = {"failed": type(error).__name__}
        write_frame(outbound, answer)


if __name__ == "__main__":
    main()
