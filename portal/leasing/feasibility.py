"""Refuse orders the pool can never hold (issue 11.3), with words and the field to change.

The core's ``never_fits`` compares a request with the hardware only; this module asks it
(through the leasing adapter) for an order that is never saved and turns its structured
reason into an :class:`ApplicationError` (400) naming the order field. Reads only.
"""

from __future__ import annotations

from datetime import datetime

from django.utils.translation import gettext as _

from portal.core.errors import ApplicationError
from portal.leasing import allocation
from portal.leasing.models import Lease
from portal.leasing.orderspec import OrderSpec, Window
from portal.tenants.models import Tenant

# Core request field -> order field (cpu/memory are not ordered: no field of their own).
ORDER_FIELD = {"gpus": "gpu_count", "nodes": "nodes", "models": "models"}


class NeverPlaceable(ApplicationError):
    code = "never_placeable"


def message(why: allocation.NeverFits) -> str:
    values = {"asked": why.asked, "most": why.most,
              "models": "/".join(why.models) or _("any model")}
    texts = {
        allocation.Limit.MODEL: _("The pool has no GPUs of the requested model(s)."),
        allocation.Limit.POOL_GPUS: _("The pool holds %(most)s %(models)s GPUs; this order asks "
                                "for %(asked)s."),
        allocation.Limit.NODE_GPUS: _("The largest %(models)s node has %(most)s GPUs; this order "
                                "asks for %(asked)s per node."),
        allocation.Limit.NVLINK: _("The largest NVLink domain has %(most)s GPUs; this order asks "
                             "for %(asked)s in one."),
        allocation.Limit.NODE_CPU: _("No node that holds these GPUs has enough CPU."),
        allocation.Limit.NODE_MEMORY: _("No node that holds these GPUs has enough memory."),
        allocation.Limit.POOL_NODES: _("The pool has %(most)s %(models)s nodes that hold this "
                                 "shape; this order asks for %(asked)s."),
        allocation.Limit.LOCAL_NODES: _("No leaf switch holds %(asked)s %(models)s nodes (at most "
                                  "%(most)s); order fewer nodes or drop the required "
                                  "locality."),
    }
    return texts[why.limit] % values


def check_order_fits(*, tenant: Tenant, spec: OrderSpec, window: Window, models: list[str],
                     now: datetime) -> None:
    """Raise :class:`NeverPlaceable` if no future state of the pool can hold the order."""
    lease = Lease(tenant=tenant, allowed_models=models, gpu_count=spec.gpu_count,
                  gpu_milli=spec.gpu_milli, nodes=spec.nodes, locality=spec.locality,
                  locality_required=spec.locality_required, priority=spec.priority,
                  start_at=window.start, end_at=window.end, created=now)
    why = allocation.never_fits(lease, now)
    if why is None:
        return
    text = message(why)
    raise NeverPlaceable(text, fields={ORDER_FIELD.get(why.field, "non_field_errors"): [text]})
