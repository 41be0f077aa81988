"""The changes to runs and sessions, one callable each, used alike by the pages, the API, the inbox and the
continuation: each checks the member's right where one applies, writes in one transaction and announces once
committed."""

from agents.actions.deletion import do_delete_agent, do_delete_session
from agents.actions.replay import Replayed, ReplayRequest, do_replay_run
from agents.actions.runs import Ended, do_cancel_run, finish, run_to_end, start_run
from agents.actions.sessions import Fork, ForkRefused, continue_after, continue_session, fork_session

__all__ = [
    "Ended",
    "Fork",
    "ForkRefused",
    "ReplayRequest",
    "Replayed",
    "continue_after",
    "continue_session",
    "do_cancel_run",
    "do_delete_agent",
    "do_delete_session",
    "do_replay_run",
    "finish",
    "fork_session",
    "run_to_end",
    "start_run",
]
