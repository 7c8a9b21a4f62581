"""Console page: enrolments held for approval (a host would take over an enrolled agent's
identity). Staff approve or deny; the decision is audited by the fleet service."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.utils.translation import gettext as _

from portal.console.views import _act, staff_only
from portal.fleet import selectors
from portal.fleet.services.approval import enrolment_decide


@staff_only
def enrolments(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        try:
            request_id = int(request.POST.get("request", ""))
        except ValueError:
            request_id = 0
        approve = request.POST.get("action") == "approve"
        _act(request, lambda: enrolment_decide(actor=request.user, request_id=request_id,
                                               approve=approve,
                                               reason=request.POST.get("reason", "")),
             _("Enrolment approved.") if approve else _("Enrolment denied."))
        return redirect("console:enrolments")
    show_all = request.GET.get("all") == "1"
    return render(request, "console/enrolments.html", {
        "rows": selectors.enrolment_requests(pending_only=not show_all)[:200],
        "show_all": show_all})
