"""Regression: test_the_healing_fill_plans_on_fresh_statistics — a stack on a server with
autovacuum off planned on empty-table statistics and stalled (issue 27, autoanalyze.py)."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from tests.portal.leasing.autoanalyze import Autoanalyze, autovacuum_on
from tests.portal.leasing.stack import db_prefix, server_url

pytestmark = pytest.mark.services("postgres")


@pytest.fixture
def scratch_db() -> Any:
    import psycopg

    name = f"{db_prefix()}_autoanalyze_{os.getpid()}"
    with psycopg.connect(f"{server_url()}/postgres", autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{server_url()}/{name}"
    try:
        yield lambda: psycopg.connect(url, autocommit=True)
    finally:
        with psycopg.connect(f"{server_url()}/postgres", autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _planned_rows(conn: Any) -> float:
    return float(conn.execute("SELECT reltuples FROM pg_class WHERE relname = 'gpu'")
                 .fetchone()[0])


def test_the_healing_fill_plans_on_fresh_statistics(scratch_db: Any) -> None:
    with scratch_db() as conn:
        conn.execute("CREATE TABLE gpu (id int PRIMARY KEY, model text)")
        conn.execute("INSERT INTO gpu SELECT g, 'H100' FROM generate_series(1, 8000) g")
        on = autovacuum_on(conn)
        if not on:
            assert _planned_rows(conn) <= 0  # never analysed: the planner guesses
    analyzer = Autoanalyze(scratch_db, every_s=0.1)
    started = analyzer.start()
    try:
        assert started == (not on)  # stands in for the daemon only where it is off
        if started:
            with scratch_db() as conn:
                assert _planned_rows(conn) == 8000
                conn.execute("INSERT INTO gpu SELECT g, 'A100' FROM generate_series(8001, 9000) g")
            for _ in range(50):  # the loop keeps them fresh
                with scratch_db() as conn:
                    if _planned_rows(conn) == 9000:
                        break
                time.sleep(0.1)
            with scratch_db() as conn:
                assert _planned_rows(conn) == 9000
    finally:
        analyzer.stop()
