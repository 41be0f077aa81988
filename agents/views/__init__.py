"""The agents app's pages, by concern: the agents (`agent_pages`, with `policy_pages` and `diff_pages` under them),
the Runs page (`run_list_pages`), a run's page (`run_pages`, its `timeline_pages`) and the trial page
(`trial_pages`)."""

from agents.views.agent_pages import (
    agent_create,
    agent_delete,
    agent_detail,
    agent_diff,
    agent_edit,
    agent_list,
    agent_rollback,
    agent_try,
    agent_version,
    agent_versions,
    blank_row,
    starter_policy,
)
from agents.views.policy_pages import policy_preview, policy_row
from agents.views.run_list_pages import jobs_panel, run_list
from agents.views.run_pages import run_cancel, run_detail, run_fork, run_replay
from agents.views.trial_pages import trial, trial_turn

__all__ = [
    "agent_create",
    "agent_delete",
    "agent_detail",
    "agent_diff",
    "agent_edit",
    "agent_list",
    "agent_rollback",
    "agent_try",
    "agent_version",
    "agent_versions",
    "blank_row",
    "jobs_panel",
    "policy_preview",
    "policy_row",
    "run_cancel",
    "run_detail",
    "run_fork",
    "run_list",
    "run_replay",
    "starter_policy",
    "trial",
    "trial_turn",
]
