"""The lease lifecycle after an order, in one room: one module per phase.

Every step is one transaction on locked rows that first checks whether it is still needed,
so Celery's at-least-once delivery, a killed worker or a lost Redis only delay a step; the
reconciler (``reconcile``) finds anything in a transitional state and drives it again.

Imports go one way (``.importlinter`` keeps it so; ADR 0130):
``reconcile`` → ``placing`` → ``preemption`` → ``expiry`` → ``releasing`` →
``provisioning`` → ``pushing`` → ``dispatch``/``timing``. The lifecycle sends Celery work
by task name through ``dispatch`` and never imports ``portal.leasing.tasks``, whose thin
wrappers call into it (tasks → lifecycle, one way). Nothing is re-exported here: callers
import the phase they mean.
"""
