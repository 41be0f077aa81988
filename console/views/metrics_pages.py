"""`GET /metrics` (SPEC section 18): the Prometheus text format, for the addresses in `METRICS_ALLOW` or a bearer
token of `manage.py create_metrics_token`; anyone else gets 403 and an empty body, whatever the method.

What the processes count (console/metrics.py, summed over the installation's processes when they share a folder) and
what the database holds, read now: the open requests by tenant, agent and kind, and the queued runs by lane (two
grouped queries), plus the tenants' slugs (one) for the processes' tenant ids."""

import ipaddress
import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.conf import settings
from django.db.models import Count, Min
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from agents.lanes import DEFAULT_LANE
from agents.models import Run, RunStatus
from approvals.models import PendingRequest
from console import metrics
from console.metric_files import VARIABLE, forget_dead_processes
from console.models import MetricsToken, Tenant, bearer_token

MAX_TOKEN = 200  # a metrics token is 56 characters; anything much longer is not one, and is not hashed


@csrf_exempt  # a refused POST is the same empty 403 as any other, not the CSRF page
def metrics_page(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        return HttpResponse(status=403)
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    encoder, content_type = choose_encoder(request.headers.get("Accept", ""))
    return HttpResponse(encoder(_scraped()), content_type=content_type)


def _allowed(request: HttpRequest) -> bool:
    """The peer's address is in METRICS_ALLOW, or the request carries a metrics token."""
    try:
        address = ipaddress.ip_address(str(request.META.get("REMOTE_ADDR") or ""))
    except ValueError:
        address = None
    if address is not None:
        address = getattr(address, "ipv4_mapped", None) or address  # ::ffff:10.0.0.1 is 10.0.0.1
        if any(address in network for network in settings.METRICS_ALLOW):
            return True
    token = bearer_token(request.headers.get("Authorization"))
    return 0 < len(token) <= MAX_TOKEN and MetricsToken.accepts(token)


def _scraped() -> CollectorRegistry:
    slugs = {str(pk): slug for pk, slug in Tenant.objects.values_list("pk", "slug")}
    registry = CollectorRegistry(auto_describe=False)
    registry.register(TenantSlugs(_processes(), slugs))
    registry.register(Database())
    return registry


def _processes() -> Collector:
    """The installation's processes' metrics when they share a folder (`PROMETHEUS_MULTIPROC_DIR`), else this
    process's."""
    metrics.made()  # this process's metrics are listed, counted or not
    folder = os.environ.get(VARIABLE)
    if not folder:
        return metrics.REGISTRY
    forget_dead_processes(Path(folder))
    return MultiProcessCollector(None, path=str(Path(folder)))


class TenantSlugs(Collector):
    """`source`'s metrics with each `tenant` label (a tenant's id where it was counted) as its tenant's slug."""

    def __init__(self, source: Collector, slugs: dict[str, str]) -> None:
        self.source, self.slugs = source, slugs

    def collect(self) -> Iterable[Metric]:
        for family in self.source.collect():
            family.samples = [
                sample._replace(labels={**sample.labels, "tenant": self.slugs.get(tenant, tenant)})
                if (tenant := sample.labels.get("tenant")) is not None
                else sample
                for sample in family.samples
            ]
            yield family


class Database(Collector):
    """What the database holds now: open requests and queued runs."""

    def collect(self) -> Iterator[Metric]:
        now = timezone.now()
        labels = ["tenant", "agent", "kind"]
        waiting = GaugeMetricFamily("airlock_requests_open", "Requests waiting for an answer.", labels=labels)
        oldest = GaugeMetricFamily(
            "airlock_requests_open_oldest_seconds", "How long the oldest open request has waited.", labels=labels
        )
        rows = (
            PendingRequest.objects.open()
            .values_list("tenant__slug", "agent__name", "kind")
            .annotate(count=Count("pk"), since=Min("opened_at"))
            .order_by()
        )
        for tenant, agent, kind, count, since in rows:
            waiting.add_metric([tenant, agent, kind], count)
            oldest.add_metric([tenant, agent, kind], max((now - since).total_seconds(), 0.0))
        yield waiting
        yield oldest
        depth = GaugeMetricFamily("airlock_queue_depth", "Queued runs waiting for a worker.", labels=["lane"])
        age = GaugeMetricFamily(
            "airlock_queue_oldest_seconds", "How long the oldest queued run has waited.", labels=["lane"]
        )
        lanes = {lane: (0, now) for lane in [DEFAULT_LANE, *settings.RUN_LANES]}
        queued = (
            Run.objects.filter(status=RunStatus.QUEUED)
            .values_list("lane")
            .annotate(count=Count("pk"), since=Min("created_at"))
            .order_by()
        )
        lanes |= {lane: (count, since) for lane, count, since in queued}
        for lane, (count, since) in sorted(lanes.items()):
            depth.add_metric([lane], count)
            age.add_metric([lane], max((now - since).total_seconds(), 0.0))
        yield depth
        yield age
