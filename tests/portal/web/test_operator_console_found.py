"""Finding 2 (issue 13): the operators' console can be found.

Old code: no page linked ``/console/``; a staff user without a tenant got "You belong to
no tenant yet"; the README sent operators to ``/admin/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.urls import reverse

from tests.portal.factories import make_user
from tests.portal.web.conftest import client_for

README = Path(__file__).resolve().parents[3] / "README.md"


def test_console_link_in_the_header_for_staff(pool: dict[str, Any]) -> None:
    staff = client_for(make_user("op", staff=True))
    body = staff.get(reverse("console:index")).content.decode()
    assert f'href="{reverse("console:index")}"' in body and 'data-testid="console-link"' in body


def test_console_link_not_shown_to_tenant_users(alice: Any) -> None:
    assert 'data-testid="console-link"' not in alice.get("/").content.decode()


def test_console_is_where_staff_without_a_tenant_land(pool: dict[str, Any]) -> None:
    staff = client_for(make_user("op", staff=True))
    response = staff.get("/")
    assert response.status_code == 302
    assert response["Location"] == reverse("console:index")
    assert "You belong to no tenant yet" not in staff.get("/", follow=True).content.decode()


def test_console_staff_who_chose_a_tenant_see_its_dashboard(pool: dict[str, Any]) -> None:
    staff = client_for(make_user("op", staff=True))
    staff.post(reverse("web:tenant_switch"), {"tenant": "a", "next": "/"})
    assert staff.get("/").status_code == 200


def test_console_readme_names_it_for_operators() -> None:
    row = next(line for line in README.read_text().splitlines() if line.startswith("| `operator`"))
    assert "`/console/`" in row
