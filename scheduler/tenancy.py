"""Who holds fractions of each GPU: a GPU is shared only within one tenant (issue 10.4)
unless its node is marked shared tenancy."""

from __future__ import annotations

from collections.abc import Mapping

from scheduler.model import MILLI

Held = dict[int, dict[str, int]]  # gpu -> {tenant: milli held}


def hold(held: Held, gpu: int, tenant: str, milli: int, free_now: int) -> None:
    """Record ``milli`` more (or, negative, less) of ``gpu`` for ``tenant``; a GPU fully
    free again has no holders; an unknown tenant ("") is not recorded."""
    if free_now >= MILLI:
        held.pop(gpu, None)
        return
    if not tenant:
        return
    per = held.setdefault(gpu, {})
    left = per.get(tenant, 0) + milli
    if left > 0:
        per[tenant] = left
        return
    per.pop(tenant, None)
    if not per:
        del held[gpu]


def foreign(held: Held, tenant: str, free: Mapping[int, int], shared: bool) -> set[int]:
    """GPUs a fraction for ``tenant`` may not share: partly free and holding a fraction
    of another tenant (none on a shared-tenancy node, none for an unknown tenant). A GPU
    with exactly nothing free reads 0 in every view already, so it is never listed: most
    held GPUs are whole ones, and a node's tenant view is then its own key (issue 30). An
    over-committed GPU (below 0, under a future lease's overlay) is still listed: its
    view reads 0, as before."""
    if not tenant or shared or not held:
        return set()
    return {g for g, per in held.items()
            if (f := free.get(g, 0)) < MILLI and f != 0
            and (len(per) > 1 or tenant not in per)}
