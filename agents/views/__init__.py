"""The agents app's pages, by concern: the agents (`agents`, with `policies` and `diff` under them), the Runs
page (`runs`), a run's page (`run`, its `timeline`) and the trial page (`trial`)."""

from agents.views.agents import (
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
from agents.views.policies import policy_preview, policy_row
from agents.views.run import run_cancel, run_detail, run_fork, run_replay
from agents.views.runs import jobs_panel, run_list
from agents.views.trial import trial, trial_turn

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
