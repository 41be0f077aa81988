"""The Tenant page (admins): where the tenant's request events go (a webhook connection granted to it) and its
approver groups (SPEC section 11); the switch to another of the member's tenants; and the Notifications page,
where every member opts in to e-mail digests.

Each form posts to its own address and comes back to the page (with the form's errors and a 400 when refused).
"""

from typing import Any

from django import forms
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.db.models import F
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agents.definitions import SLUG
from agents.models import AgentVersion
from approvals.answerers import AwayRefused, set_away
from approvals.digests import MOST_MINUTES
from approvals.models import ApproverGroup, Away, Digest, PendingRequest, routed_to
from approvals.webhooks import webhook_of
from console.models import Connection, ConnectionKind, Membership, Role, Tenant
from console.moments import storable_field
from console.tenancy import SESSION_KEY, ConsoleRequest, role_required, signed_in_required

User = get_user_model()


class WebhookForm(forms.Form):
    connection = forms.ModelChoiceField(
        queryset=Connection.objects.none(),
        required=False,
        empty_label="None: send no request events",
        label="Webhook connection",
        help_text="Connections are the installation's: ask its operators for one if the list is empty.",
    )

    def __init__(self, tenant: Tenant, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant
        # Only webhooks granted to the tenant: any other (or a made-up id) is "not one of the available choices".
        granted = Connection.objects.granted_to(tenant).filter(kind=ConnectionKind.WEBHOOK).order_by("name")
        self.fields["connection"].queryset = granted  # type: ignore[attr-defined]

    def save(self) -> str:
        """Send the tenant's request events to the chosen webhook (or none); what to tell the admin."""
        self.tenant.request_webhook = chosen = self.cleaned_data["connection"]
        self.tenant.save(update_fields=["request_webhook"])
        return f"Request events go to {chosen.name}." if chosen else "No request events are sent."


class GroupForm(forms.Form):
    name = forms.RegexField(
        regex=SLUG,
        max_length=63,
        label="New group",
        help_text="Lowercase letters, digits, - and _. Route requests to it in an agent's form: the Approvers of a"
        " tool or MCP server, or its Routing section (request kinds, policy escalations).",
        error_messages={"invalid": "Use lowercase letters, digits, - and _ only."},
    )

    def __init__(self, tenant: Tenant, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tenant = tenant

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        if ApproverGroup.objects.filter(tenant=self.tenant, name=name).exists():
            raise forms.ValidationError(f"There is a group named {name} already.")
        return name

    def save(self) -> str:
        name = self.cleaned_data["name"]
        ApproverGroup.objects.create(tenant=self.tenant, name=name)
        return f"Group {name} created; add its members below."


class MemberForm(forms.Form):
    user = forms.ModelChoiceField(queryset=User.objects.none(), label="Add a member", empty_label="Choose a member")

    def __init__(self, group: ApproverGroup, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.group = group
        # Members of the tenant only, and not those in the group already.
        candidates = User.objects.filter(memberships__tenant_id=group.tenant_id).exclude(approver_groups=group)
        self.fields["user"].queryset = candidates.order_by("username")  # type: ignore[attr-defined]
        self.fields["user"].label_from_instance = lambda user: user.username  # type: ignore[attr-defined]
        self.prefix = f"group-{group.pk}"

    def save(self) -> str:
        user = self.cleaned_data["user"]
        self.group.members.add(user)
        return f"{user.username} added to {self.group.name}."

    @property
    def added_cannot_answer(self) -> bool:
        """Whether the member just added is a reader, who answers nothing, routed to this group or not."""
        role = Membership.objects.filter(tenant_id=self.group.tenant_id, user=self.cleaned_data["user"])
        return role.values_list("role", flat=True).first() == Role.READER


class DigestForm(forms.Form):
    enabled = forms.BooleanField(required=False, label="E-mail me a digest of requests waiting for an answer")
    after_minutes = forms.IntegerField(
        min_value=1,
        max_value=MOST_MINUTES,
        initial=30,
        label="Waiting longer than (minutes)",
        help_text="At most one e-mail every this many minutes; each request in one digest at most.",
    )
    email = forms.EmailField(
        required=False,
        label="Send it to",
        widget=forms.TextInput(attrs={"autocomplete": "email", "inputmode": "email"}),
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        if cleaned.get("enabled") and not cleaned.get("email"):
            self.add_error("email", "An address is needed to send the digest to.")
        return cleaned


def routes_by_group(tenant: Tenant) -> dict[str, list[str]]:
    """Group name -> the tenant's live agents whose current definition routes requests to it."""
    current = AgentVersion.objects.filter(
        agent__tenant=tenant, agent__deleted_at__isnull=True, number=F("agent__current_version")
    ).select_related("agent")
    routes: dict[str, list[str]] = {}
    for version in current.order_by("agent__name"):
        for group in sorted(set(version.definition.approver_groups.values())):
            routes.setdefault(group, []).append(version.agent.name)
    return routes


def _group(request: ConsoleRequest, group_id: int) -> ApproverGroup:
    group = ApproverGroup.objects.filter(pk=group_id, tenant=request.tenant).first()
    if group is None:
        raise Http404("No such group in this tenant.")
    return group


type TenantForm = WebhookForm | GroupForm | MemberForm


def _tenant_page(
    request: ConsoleRequest, refused: TenantForm | None = None, others: dict[str, Any] | None = None
) -> HttpResponse:
    """The page, with the unbound forms except the one `refused` (bound, with its errors: a 400), or one of an app's
    own section (`others`, by the name its template tag reads)."""
    tenant = request.tenant
    routes = routes_by_group(tenant)
    readers = set(Membership.objects.filter(tenant=tenant, role=Role.READER).values_list("user_id", flat=True))
    kept = kept_by_sign_in(tenant)
    groups = []
    for group in ApproverGroup.objects.filter(tenant=tenant).prefetch_related("members"):
        mine = isinstance(refused, MemberForm) and refused.prefix == f"group-{group.pk}"
        form = refused if mine else MemberForm(group)
        members = [(member, member.pk in readers) for member in group.members.all()]
        routed_by = routes.get(group.name, [])
        groups.append(
            {"group": group, "members": members, "routed_by": routed_by, "form": form, "kept_by": kept.get(group.name)}
        )
    initial = {"connection": tenant.request_webhook_id}
    context = {
        "webhook_form": refused if isinstance(refused, WebhookForm) else WebhookForm(tenant, initial=initial),
        "webhook": tenant.request_webhook,
        "webhook_granted": webhook_of(tenant.pk) is not None,
        "group_form": refused if isinstance(refused, GroupForm) else GroupForm(tenant),
        "groups": groups,
        **(others or {}),
    }
    return render(request, "console/tenant.html", context, status=200 if refused is None and not others else 400)


def kept_by_sign_in(tenant: Tenant) -> dict[str, list[str]]:
    """The tenant's approver groups an identity provider's claims keep (SPEC section 19): group name -> the display
    names of the OpenID Connect connections whose mapping names it for this tenant."""
    kept: dict[str, list[str]] = {}
    for connection in Connection.objects.filter(kind=ConnectionKind.OIDC).order_by("name"):
        mapping = connection.oidc_settings.tenants.get(tenant.slug)
        for group in sorted(set(mapping.groups.values()) if mapping else ()):
            kept.setdefault(group, []).append(connection.sign_in_name)
    return kept


def render_tenant_page(request: ConsoleRequest, **refused: Any) -> HttpResponse:
    """The Tenant page again with a form of an app's own section refused (slackapp's channels: `slack_form`)."""
    return _tenant_page(request, others=refused)


def _save(request: ConsoleRequest, form: TenantForm) -> HttpResponse:
    """A form of the Tenant page posted: saved, back to the page with what it did; refused, the page again."""
    if not form.is_valid():
        return _tenant_page(request, form)
    messages.success(request, form.save())
    return redirect("tenant")


@role_required("admin")
@require_GET
def tenant_page(request: ConsoleRequest) -> HttpResponse:
    return _tenant_page(request)


class SwitchTenantForm(forms.Form):
    tenant = forms.IntegerField(min_value=1, max_value=2**63 - 1)


@signed_in_required
@require_POST
def switch_tenant(request: HttpRequest) -> HttpResponse:
    form = SwitchTenantForm(request.POST)
    # A tampered value ("", "abc", 30 digits) is no tenant of the user's rather than a database error.
    membership = (
        Membership.objects.filter(user_id=request.user.pk or 0, tenant_id=form.cleaned_data["tenant"]).first()
        if form.is_valid()
        else None
    )
    if membership is None:
        raise Http404("You are not a member of that tenant.")
    request.session[SESSION_KEY] = membership.tenant_id
    return redirect("dashboard")


@role_required("admin")
@require_POST
def choose_webhook(request: ConsoleRequest) -> HttpResponse:
    return _save(request, WebhookForm(request.tenant, request.POST))


@role_required("admin")
@require_POST
def create_group(request: ConsoleRequest) -> HttpResponse:
    return _save(request, GroupForm(request.tenant, request.POST))


@role_required("admin")
@require_POST
def add_member(request: ConsoleRequest, group_id: int) -> HttpResponse:
    form = MemberForm(_group(request, group_id), request.POST)
    if not form.is_valid() or not form.added_cannot_answer:
        return _save(request, form)
    # Added all the same (the role may change later), but the admin hears that the group gained no approver.
    added = form.save()
    messages.warning(request, f"{added} As a reader they cannot answer its requests: make them an operator first.")
    return redirect("tenant")


@role_required("admin")
@require_POST
def remove_member(request: ConsoleRequest, group_id: int, user_id: int) -> HttpResponse:
    group = _group(request, group_id)
    member = group.members.filter(pk=user_id).first()
    if member is None:
        raise Http404("No such member of the group.")
    group.members.remove(member)
    messages.success(request, f"{member.username} removed from {group.name}.")
    return redirect("tenant")


@role_required("admin")
@require_POST
def delete_group(request: ConsoleRequest, group_id: int) -> HttpResponse:
    group = _group(request, group_id)
    routed_by = routes_by_group(request.tenant).get(group.name, [])
    waiting = PendingRequest.objects.open().filter(routed_to([group.name]), tenant=request.tenant).count()
    if routed_by or waiting:
        reasons = [f"the definitions of {', '.join(routed_by)} route requests to it"] if routed_by else []
        reasons += [f"{waiting} open request{'s' if waiting != 1 else ''} wait for its members"] if waiting else []
        messages.error(request, f"Group {group.name} is not deleted: {' and '.join(reasons)}.")
        return redirect("tenant")
    group.delete()
    messages.success(request, f"Group {group.name} deleted.")
    return redirect("tenant")


class AwayForm(forms.Form):
    """Away from when until when, and who answers meanwhile (SPEC section 14)."""

    starts_at = forms.DateTimeField(
        required=False,
        label="From",
        help_text="Empty: from now. Times are UTC.",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        validators=[storable_field],
    )
    until = forms.DateTimeField(
        label="Until", widget=forms.DateTimeInput(attrs={"type": "datetime-local"}), validators=[storable_field]
    )
    delegate = forms.ChoiceField(label="Who answers for you", help_text="An operator or admin of this tenant.")

    def __init__(self, membership: Membership, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        others = Membership.objects.filter(tenant_id=membership.tenant_id, user__is_active=True).exclude(
            pk=membership.pk
        )
        names = others.filter(role__in=[Role.OPERATOR, Role.ADMIN]).order_by("user__username")
        delegate = self.fields["delegate"]
        assert isinstance(delegate, forms.ChoiceField)
        delegate.choices = [(n, n) for n in names.values_list("user__username", flat=True)]


@role_required("reader")
@require_http_methods(["GET", "POST"])
def notifications(request: ConsoleRequest) -> HttpResponse:
    """The member's own e-mail digest for the current tenant: on or off, after how many minutes, where to; and
    whether they are away (the form posts to `away`)."""
    digest = Digest.objects.filter(membership=request.membership).first()
    initial = {"enabled": digest is not None, "after_minutes": digest.after_minutes if digest else 30}
    form = DigestForm(request.POST or None, initial={**initial, "email": request.membership.user.email})
    if request.method == "POST" and form.is_valid():
        messages.success(request, _save_digest(request, form.cleaned_data))
        return redirect("notifications")
    return _notifications(request, form, AwayForm(request.membership), 400 if form.is_bound else 200)


def _notifications(request: ConsoleRequest, form: DigestForm, away_form: AwayForm, status: int) -> HttpResponse:
    digest = Digest.objects.filter(membership=request.membership).first()
    away = Away.objects.select_related("delegate__user").filter(membership=request.membership).first()
    context = {"form": form, "digest": digest, "away_form": away_form, "away": away}
    return render(request, "console/notifications.html", context, status=status)


@role_required("operator")
@require_POST
def away(request: ConsoleRequest) -> HttpResponse:
    """Mark yourself away with a delegate, or back (`back`)."""
    if request.POST.get("back"):
        Away.objects.filter(membership=request.membership).delete()
        messages.success(request, "You are back: nobody answers for you now.")
        return redirect("notifications")
    away_form = AwayForm(request.membership, request.POST)
    if away_form.is_valid():
        wanted = away_form.cleaned_data
        try:
            set_away(request.membership, wanted["starts_at"], wanted["until"], wanted["delegate"])
        except AwayRefused as refused:
            away_form.add_error("delegate" if refused.code == "invalid_delegate" else "until", refused.detail)
        else:
            until = wanted["until"].strftime("%Y-%m-%d %H:%M")
            messages.success(request, f"Away until {until} UTC: {wanted['delegate']} answers what you may meanwhile.")
            return redirect("notifications")
    return _notifications(request, DigestForm(initial={"email": request.membership.user.email}), away_form, 400)


def _save_digest(request: ConsoleRequest, wanted: dict[str, Any]) -> str:
    """Opt the member in or out as `wanted`; what to tell them."""
    if not wanted["enabled"]:
        Digest.objects.filter(membership=request.membership).delete()
        return "No more digests from this tenant."
    user = request.membership.user
    if user.email != wanted["email"]:
        user.email = wanted["email"]
        user.save(update_fields=["email"])
    minutes = wanted["after_minutes"]
    Digest.objects.update_or_create(membership=request.membership, defaults={"after_minutes": minutes})
    return f"Digests of requests waiting longer than {minutes} minute{'s' if minutes != 1 else ''} go to {user.email}."
