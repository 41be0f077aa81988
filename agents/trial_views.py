"""The trial-run page: try an agent turn by turn, answering what it asks for inline."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from console.tenancy import role_required


@role_required("operator")
def trial(request: HttpRequest) -> HttpResponse:
    return render(request, "console/not_yet.html", {"page": "trial"})
