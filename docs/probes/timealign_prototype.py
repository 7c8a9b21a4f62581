"""Bench-only prototype: time-aligned leaves (horizon-aware placement), measured on
wait_leaf_frag_pct. Usage: python ta.py VARIANT SEED FABRIC LOAD JOBS"""
import sys, time
from scheduler.bench import fabricbench as fb
from scheduler.attempt import Found, commit, find, shape_of
from scheduler.cluster import Choice

VARIANT, SEED, FABRIC, LOAD, JOBS = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]), int(sys.argv[5])
STEP = int(sys.argv[6]) if len(sys.argv) > 6 else 1800

orig = fb._Sim.try_place

def horizons(sim, t):
    tr = sim.tracker
    H = {}
    names = sim.state.names
    for lid, members in enumerate(tr.members):
        h = t
        for i in members:
            h = max(h, sim.free_at.get(names[i], 0.0))
        H[lid] = h
    return H

def try_place(self, job, t):
    if VARIANT == "base" or self.tracker is None:
        return orig(self, job, t)
    req = job.request(t)
    shape = shape_of(req)
    if job.nodes != 1:
        if VARIANT in ("singles", "singles_tier") or not job.leaf_required:
            return orig(self, job, t)
        return gang_place(self, job, t, req, shape)
    blocked = self.state.blocked_for(req.id, req.end, req.nodes)
    choices = []
    st = self.state
    for i in range(len(st.names)):
        if i in blocked:
            continue
        ev = st.eval_node(i, shape)
        if ev is not None:
            choices.append(Choice(i, ev[0], ev[1]))
    if not choices:
        return orig(self, job, t)
    H = horizons(self, t)
    E = t + job.duration
    leaf = self.tracker.leaf
    def ext(c):
        x = max(0.0, E - H[leaf[c.node]])
        return int(x // STEP)
    if VARIANT.startswith("singles_tier") or VARIANT == "tier_gangs":
        # keep the policy's first decision (does it break an idle node / drained leaf?)
        key = lambda c: (c.cost[0], int(c.cost[1]), ext(c), c.cost, c.node)
    else:
        key = lambda c: (ext(c), c.cost, c.node)
    best = min(choices, key=key)
    found = Found((best,), 0)
    self.start(job, commit(self.state, shape, found), t, True)
    return True

def gang_place(self, job, t, req, shape):
    blocked = self.state.blocked_for(req.id, req.end, req.nodes)
    choices = [c for c in self.state.feasible_nodes(shape) if c.node not in blocked]
    leaf = self.tracker.leaf
    by = {}
    for c in choices:
        by.setdefault(leaf[c.node], []).append(c)
    ok = {l: cs for l, cs in by.items() if l >= 0 and len(cs) >= job.nodes}
    if not ok:
        return orig(self, job, t)
    H = horizons(self, t)
    E = t + job.duration
    def lkey(l):
        return (int(max(0.0, E - H[l]) // STEP), len(ok[l]), l)
    l = min(ok, key=lkey)
    cs = sorted(ok[l], key=lambda c: (c.cost, c.node))[:job.nodes]
    found = Found(tuple(sorted(cs, key=lambda c: c.node)), 0)
    self.start(job, commit(self.state, shape, found), t, True)
    return True

fb._Sim.try_place = try_place
t0 = time.process_time()
res = fb.run(["fgd+fabric"], JOBS, SEED, LOAD, None, None, [FABRIC])
r = res[0][1][0]
print(f"{VARIANT:14} step={STEP} seed={SEED} {FABRIC:6} load={LOAD} leaf_frag={r['wait_leaf_frag_pct']:5.1f} "
      f"others_mean={r['other_wait_mean_s']:6.1f} gang_p95={r['gang_wait_p95_s']:6.0f} gang_mean={r['gang_wait_mean_s']:6.0f} "
      f"alloc={r['alloc_pct']} cap={r['wait_capacity_pct']} over={r['wait_overtaken_pct']} node={r['wait_node_frag_pct']} cpu={time.process_time()-t0:.0f}s", flush=True)
