"""The console's repair queue: nodes and GPUs out of service with their age and cause, and
the operators' actions on them (``portal.fleet.services.operator``), each with a reason."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.translation import gettext as _

from portal.console.views import _act, staff_only
from portal.fleet import lifecycle
from portal.fleet.services import operator
from portal.inventory.models import Gpu, Node


def _part(request: HttpRequest) -> Node | Gpu:
    gpu = request.POST.get("gpu", "")
    if gpu.isdigit():
        return get_object_or_404(Gpu.objects.select_related("node"), pk=int(gpu))
    node = request.POST.get("node", "")
    return get_object_or_404(Node, pk=int(node) if node.isdigit() else 0)


@staff_only
def repair_queue(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        part = _part(request)
        action, reason = request.POST.get("action", ""), request.POST.get("reason", "")
        _act(request, lambda: operator.service_act(actor=request.user, part=part,
                                                   action=action, reason=reason),
             _("Done."))
        return redirect("console:repair")
    return render(request, "console/repair.html", {"rows": lifecycle.repair_queue(),
                                                   "actions": operator.ACTIONS})
