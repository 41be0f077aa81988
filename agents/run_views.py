"""Console pages for run history: the list with filters and a run's timeline."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.tenancy import role_required


@role_required("reader")
def run_list(request: HttpRequest) -> HttpResponse:
    return render(request, "console/not_yet.html", {"page": "runs"})


@role_required("reader")
def run_detail(request: HttpRequest, run_id: str) -> HttpResponse:
    return render(request, "console/not_yet.html", {"page": "runs"})
