"""The changes to runs and sessions, one callable each, used alike by the pages, the API, the inbox and the
continuation: each checks the member's right where one applies, writes in one transaction and announces once
committed."""

from agents.actions.deletion import delete_agent, delete_session
from agents.actions.replay import Replayed, ReplayRequest, replay_run
from agents.actions.runs import Ended, cancel_run, finish, run_to_end, start_run
from agents.actions.sessions import Fork, ForkRefused, continuation_of, continue_session, fork_session

__all__ = [
    "Ended",
    "Fork",
    "ForkRefused",
    "ReplayRequest",
    "Replayed",
    "cancel_run",
    "continuation_of",
    "continue_session",
    "delete_agent",
    "delete_session",
    "finish",
    "fork_session",
    "replay_run",
    "run_to_end",
    "start_run",
]
