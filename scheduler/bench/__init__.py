"""Benchmarks and reference models of the scheduling core (``python -m scheduler.bench``).

Nothing here is the core: every module imports the core (``scheduler.*``), the core never
imports this package (an import-linter contract, ``.importlinter``). Sub-commands of
``python -m scheduler.bench``: none (decision cost, :mod:`.latency`), ``fabric``
(:mod:`.fabriccli`: :mod:`.fabricbench`, :mod:`.fabricsweep`, :mod:`.fluidpool`,
:mod:`.gangwait`) and ``pass`` (:mod:`.passbench`); the openb trace replay is
``python -m scheduler.bench.replay``. The generated HGX workload is :mod:`.workload`.
"""
