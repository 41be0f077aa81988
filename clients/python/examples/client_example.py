"""The bare client: ask Airlock before deploying, wait for the answer, report what the deploy did.

    AIRLOCK_URL=http://127.0.0.1:8000 AIRLOCK_TOKEN=... python clients/python/examples/client_example.py

Approve or deny the request in the inbox; the script prints what happened.
"""

import os

from _setup import AGENT, TOKEN, URL, ensure_agent, inbox_hint
from airlock_client import Airlock, RequestClosed


def main() -> None:
    ensure_agent()
    arguments = {"service": "billing", "environment": "staging"}
    with Airlock(URL, TOKEN) as airlock:
        opened = airlock.request(
            AGENT, tool_name="deploy", arguments=arguments, session_id=os.environ.get("AIRLOCK_SESSION")
        )
        print(f"asked to deploy {arguments}: request {opened.request_id} is {opened.status}")
        if opened.decision is None:
            inbox_hint(opened.request_id)
        try:
            decision = opened.decision or airlock.wait(opened.request_id)
        except RequestClosed as closed:
            print(f"the request closed unanswered ({closed.reason}): not deploying")
            return
        who = decision.answered_by or decision.via
        if not decision.approved:
            print(f"denied by {who}: {decision.text or 'no reason given'}")
            return
        print(f"approved by {who} ({decision.via}), with {decision.arguments}")
        print(f"deployed {decision.arguments}; reporting the outcome")
        airlock.report(opened.request_id, True, {"deployed": decision.arguments})


if __name__ == "__main__":
    main()
