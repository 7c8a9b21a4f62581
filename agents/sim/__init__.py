"""Simulators: many node agents in one process (``agents.sim.fleet`` over HTTP,
``agents.sim.simulate`` in-process for the demo), their HTTP pool, counters and the fault
control file. Load tests and the demo use them; a host runs ``agents.node`` /
``agents.fabric``, never these (issue 31: what runs on a host is what the package shows)."""
