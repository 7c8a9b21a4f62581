# gpupool — the two commands: `make demo` runs the product, `make test` runs the tests.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
PORT ?= 8000

.PHONY: demo test lint typecheck check bench-scheduler bench-replay bench-cluster bench-ingest \
	bench-longpoll \
	bench-latency bench-export clean

$(STAMP): requirements.txt requirements-dev.txt pyproject.toml
	$(PY) -m pip --version >/dev/null 2>&1 || $(PYTHON) -m venv --clear $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -r requirements-dev.txt
	$(PY) -m pip install -q --no-deps -e .  # the `gpupool` CLI at $(VENV)/bin/gpupool
	touch $(STAMP)

venv: $(STAMP)

## Run the whole stack on 127.0.0.1:$(PORT) with embedded defaults (SQLite, in-process worker).
demo: $(STAMP)
	$(PY) manage.py compilemessages -v0 2>/dev/null || true
	PORT=$(PORT) $(PY) manage.py demo

## The whole test suite. Uses PostgreSQL/Redis when DATABASE_URL/REDIS_URL are set;
## with REQUIRE_SERVICES=1 a missing service or tool fails instead of skipping.
test: $(STAMP)
	$(PY) -m pytest

lint: $(STAMP)
	$(PY) -m ruff check .
	$(VENV)/bin/lint-imports --no-cache

typecheck: $(STAMP)
	$(PY) -m mypy

check: lint typecheck
	$(PY) manage.py makemigrations --check --dry-run
	GPUPOOL_ENV=production SECRET_KEY=$$($(PY) -c 'import secrets;print(secrets.token_urlsafe(64))') \
	  ALLOWED_HOSTS=gpupool.example.com $(PY) manage.py check --deploy --fail-level WARNING

## Benchmarks: each prints its figures (they are not timed unit tests).
BENCH_DB ?= postgres://postgres@127.0.0.1:5432/gpupool_bench
TRACES ?= ../shared/bench/traces

bench-scheduler: $(STAMP)
	$(PY) -m scheduler.bench

.PHONY: bench-fabric
bench-fabric: $(STAMP)
	$(PY) -m scheduler.bench fabric --csv fabric-workload.csv

# Seeds 42-51 x loads x the three fabrics, fgd+ (today) against the default: the table of
# docs/scheduler.md ("Gangs that wait: measured"). PROCS=16 on a larger machine.
PROCS ?= 2
.PHONY: bench-fabric-sweep
bench-fabric-sweep: $(STAMP)
	$(PY) -m scheduler.bench fabric --seeds 42 43 44 45 46 47 48 49 50 51 \
	  --loads 0.8 0.9 0.95 --procs $(PROCS)

# The same seeds with the reference rows (ADR 0176): each policy without leaf requirements,
# the workload on one bin of GPUs, and that bin keeping 64 / 128 GPUs for gangs.
.PHONY: bench-fabric-references
bench-fabric-references: $(STAMP)
	$(PY) -m scheduler.bench fabric --seeds 42 43 44 45 46 47 48 49 50 51 \
	  --loads 0.9 0.95 --procs $(PROCS) --reference no-leaf fluid --fluid-headroom 0 64 128

# Issue 30 (ADR 0235): the steady state — 30,000 jobs, seeds 42-46, the default policy
# with the no-leaf and fluid-pool references; spread across seeds, wait_leaf_frag_pct and
# the other orders' wait. About 75 s per 30,000-job run on one core (40 runs + fluid).
.PHONY: bench-fabric-steady
bench-fabric-steady: $(STAMP)
	$(PY) -m scheduler.bench fabric --steady --jobs 30000 --seeds 42 43 44 45 46 \
	  --loads 0.9 0.95 --fabrics 2-tier rail --policies fgd+fabric \
	  --reference no-leaf fluid --procs $(PROCS)

bench-replay: $(STAMP)
	$(PY) -m scheduler.bench.replay snapshot --nodes $(TRACES)/openb_node_list_gpu_node.csv \
	  --pods $(TRACES)/openb_pod_list_default.csv --tune 1.3 --seed 42 --out report.json

# MIG across tenants vs time-sliced within one tenant, openb fractional pods (ADR 0236)
.PHONY: bench-mig
bench-mig: $(STAMP)
	$(PY) -m scheduler.bench.replay mig --nodes $(TRACES)/openb_node_list_gpu_node.csv \
	  --pods $(TRACES)/openb_pod_list_default.csv --seeds 42 43 44 45 46 --out mig-report.json

bench-cluster: $(STAMP)
	$(PY) -m tests.bench.generate_cluster --nodes 2000

# one scheduling pass: the core's schedule_pass (nodes 1k/5k/10k x queue 1/1,000/5,000),
# then the portal's snapshot from PostgreSQL (cold, warm cache, quotes) on the same sizes
.PHONY: bench-pass
bench-pass: $(STAMP)
	$(PY) -m scheduler.bench pass
	DATABASE_URL=$(BENCH_DB) $(PY) -m tests.bench.pass_snapshot

# 1,000 agents reporting every 10 s over HTTP: 100 reports/s (target ≤ 4 ms server CPU each)
bench-ingest: $(STAMP)
	DATABASE_URL=$(BENCH_DB) $(PY) -m tests.bench.ingest --nodes 1000 --interval 10 --seconds 120

# idle agents over HTTP: database commits per agent per long-poll timeout (target ≤ 1)
bench-longpoll: $(STAMP)
	$(PY) -m tests.bench.longpoll_idle --nodes 200 --long-poll 10 --timeouts 3

# agents over HTTP (agents.sim.fleet, GPUPOOL_SIMULATED_AGENTS=0): the production path
## order → active over the agent protocol (HTTP agent simulator; docs/adr/0140, 0160), at the
## intervals the portal gives a fleet that size (reports every max(10 s, nodes / 50), long-poll
## clamp(nodes / 100, 30 s, 120 s): 20 s / 30 s at 1,000 nodes, 200 s / 100 s at 10,000).
bench-latency: $(STAMP)
	$(PY) -m tests.bench.lease_latency --nodes 1000
	$(PY) -m tests.bench.lease_latency --nodes 10000 --orders 40 --idle-timeouts 1

.PHONY: bench-latency-demo
bench-latency-demo: $(STAMP)
	$(PY) -m tests.bench.lease_latency --agents in-db --nodes 1000

.PHONY: bench-real-agents
bench-real-agents: $(STAMP)
	$(PY) -m tests.bench.real_agents --nodes 8

# issue 27: faults in a running 1,000-node pool at ~80 % leased (HTTP agent simulator)
.PHONY: bench-healing
bench-healing: $(STAMP)
	$(PY) -m tests.bench.healing_fleet --nodes 1000

# issue 27: faults injected into running real agents; fault -> fenced / replacement active
.PHONY: bench-healing-agents
bench-healing-agents: $(STAMP)
	$(PY) -m tests.bench.healing --nodes 8

# issues 27 + 28: an XID on a MIG-mode GPU, real agents; its instances fenced and replaced
.PHONY: bench-healing-mig
bench-healing-mig: $(STAMP)
	$(PY) -m tests.bench.healing_mig --nodes 2

.PHONY: blackbox
blackbox: $(STAMP)  ## the black-box security harness (docs/security.md)
	$(PY) -m tests.security.blackbox

bench-export: $(STAMP)
	DATABASE_URL=$(BENCH_DB)_billing $(PY) -m tests.bench.export_focus --rows 1000000

clean:
	rm -rf $(VENV) data staticfiles
