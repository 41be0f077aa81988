"""The agents pages' forms: the definition form (`definition`, its fields in `definition_fields`) and the policies'
Try panel (`policy_try`). This module only re-exports."""

from agents.forms.definition import DefinitionForm
from agents.forms.definition_fields import (
    APPROVAL_LABELS,
    AS_ITS_SERVER,
    KEPT_FIELDS,
    RUNTIMES,
    SECTIONS,
    TOP_FIELDS,
    choices,
    form_text,
    hooks_text,
)
from agents.forms.policy_try import SAMPLE_EMAIL, SAMPLE_MESSAGE, PolicyTryForm, try_builder, try_context

__all__ = [
    "APPROVAL_LABELS",
    "AS_ITS_SERVER",
    "KEPT_FIELDS",
    "RUNTIMES",
    "SAMPLE_EMAIL",
    "SAMPLE_MESSAGE",
    "SECTIONS",
    "TOP_FIELDS",
    "DefinitionForm",
    "PolicyTryForm",
    "choices",
    "form_text",
    "hooks_text",
    "try_builder",
    "try_context",
]
