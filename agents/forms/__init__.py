"""The agents pages' forms: the definition form (`definition`) and the policies' Try panel (`policy_try`). This
module only re-exports."""

from agents.forms.definition import (
    APPROVAL_LABELS,
    KEPT_FIELDS,
    KIND_LABELS,
    RUNTIMES,
    SECTIONS,
    TOP_FIELDS,
    DefinitionForm,
    as_text,
    choices,
    hooks_text,
)
from agents.forms.policy_try import SAMPLE_EMAIL, SAMPLE_MESSAGE, PolicyTryForm, sample_context, try_builder

__all__ = [
    "APPROVAL_LABELS",
    "KEPT_FIELDS",
    "KIND_LABELS",
    "RUNTIMES",
    "SAMPLE_EMAIL",
    "SAMPLE_MESSAGE",
    "SECTIONS",
    "TOP_FIELDS",
    "DefinitionForm",
    "PolicyTryForm",
    "as_text",
    "choices",
    "hooks_text",
    "sample_context",
    "try_builder",
]
