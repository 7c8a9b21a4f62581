"""Services' error messages follow the request's language; codes and field names do not."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import translation

from portal.core.errors import ApplicationError
from portal.leasing import quoting, services
from portal.leasing.models import Lease, Quota
from portal.leasing.models import LeaseState as S
from portal.leasing.states import IllegalTransition
from portal.tenants.sshkeys import parse_public_key
from tests.portal import driving
from tests.portal.factories import client_for
from tests.portal.leasing.conftest import drive, pool

# The leasing tests' pool (tenant a: alice, quota 16 H100; tenant b: bob, quota 8).
frozen_clock = driving.frozen_clock
run_on_commit = driving.run_on_commit
__all__ = ["frozen_clock", "pool", "run_on_commit"]


@pytest.fixture(autouse=True)
def _default_language_afterwards() -> Iterator[None]:
    """A request leaves its language active in the thread; later tests expect English."""
    yield
    translation.deactivate()


def spec(**kw: Any) -> services.OrderSpec:
    return services.OrderSpec(**{"models": ["H100"], "gpu_count": 8,
                                 "duration_hours": Decimal(2), **kw})


def refusal(language: str, call: Any) -> ApplicationError:
    with translation.override(language), pytest.raises(ApplicationError) as info:
        call()
    return info.value


def both(call: Any) -> tuple[ApplicationError, ApplicationError]:
    return refusal("en", call), refusal("zh-hans", call)


def has_chinese(text: str) -> bool:
    return any("\u4e00" <= ch <= "\u9fff" for ch in text)


# --- (a) the services, under translation.override -----------------------------------------

def test_cancelling_an_active_lease(pool: dict[str, Any]) -> None:
    lease = services.order_create(actor=pool["alice"], tenant=pool["a"], spec=spec())
    drive()
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE
    en, zh = both(lambda: services.lease_cancel(actor=pool["alice"], lease=lease))
    assert isinstance(en, IllegalTransition) and isinstance(zh, IllegalTransition)
    assert en.message.endswith("active lease cannot be cancelled; release it instead.")
    assert zh.message == "运行中的租约无法取消，请改为释放。"
    assert en.code == zh.code == "illegal_transition"
    assert en.status_code == zh.status_code == 409
    assert list(en.fields) == list(zh.fields) == ["state"]
    assert zh.fields["state"] == [zh.message]
    lease.refresh_from_db()
    assert lease.state == S.ACTIVE


def test_an_order_over_quota(pool: dict[str, Any]) -> None:
    en, zh = both(lambda: services.order_create(actor=pool["bob"], tenant=pool["b"],
                                                spec=spec(nodes=2)))
    assert en.message == "This would exceed your GPU quota for H100: at most 8 GPUs at once, 8 free in that period."
    assert zh.message == "这将超出您的 H100 GPU 配额：同时最多 8 个 GPU，该时段内剩余 8 个。"
    assert en.code == zh.code == "order_rejected"
    assert list(en.fields) == list(zh.fields) == ["gpu_count"]
    assert not Lease.objects.exists()


def test_an_order_over_budget_names_the_hours_left(pool: dict[str, Any]) -> None:
    Quota.objects.filter(tenant=pool["a"]).update(gpu_hour_budget=10)
    en, zh = both(lambda: services.order_create(actor=pool["alice"], tenant=pool["a"],
                                                spec=spec()))
    assert en.message == ("This would exceed the monthly budget for H100: 10.0 GPU-hours, 10.0 "
                          "left; this order needs 16.0.")
    assert zh.message == "这将超出 H100 的月度预算：10.0 GPU 小时，剩余 10.0；此订单需要 16.0。"
    assert en.code == zh.code == "order_rejected"
    assert list(en.fields) == list(zh.fields) == ["duration_hours"]


def test_a_quote_tells_budget_from_quota_in_any_language(pool: dict[str, Any]) -> None:
    Quota.objects.filter(tenant=pool["a"]).update(gpu_hour_budget=10)
    for language in ("en", "zh-hans"):
        with translation.override(language):
            quote = quoting.order_quote(actor=pool["alice"], tenant=pool["a"], spec=spec())
        assert (quote.fits_quota, quote.fits_budget) == (True, False), language
    assert quote.messages == ["这将超出 H100 的月度预算：10.0 GPU 小时，剩余 10.0；此订单需要 16.0。"]
    with translation.override("zh-hans"):
        quote = quoting.order_quote(actor=pool["bob"], tenant=pool["b"], spec=spec(nodes=2))
    assert (quote.fits_quota, quote.fits_budget) == (False, True)
    assert quote.messages == ["这将超出您的 H100 GPU 配额：同时最多 8 个 GPU，该时段内剩余 8 个。"]


@pytest.mark.parametrize(("kw", "field", "english", "chinese"), [
    ({"models": ["B300"]}, "models", "Unknown GPU model(s): B300.", "未知的 GPU 型号：B300。"),
    ({"nodes": 1000}, "nodes", "Between 1 and 512 nodes.", "节点数须在 1 到 512 之间。"),
    ({"duration_hours": None}, "duration_hours", "Give a duration or an end.",
     "请填写时长或结束时间。"),
])
def test_a_bad_order_field(pool: dict[str, Any], kw: dict[str, Any], field: str, english: str,
                           chinese: str) -> None:
    en, zh = both(lambda: services.order_create(actor=pool["alice"], tenant=pool["a"],
                                                spec=spec(**kw)))
    assert (en.message, zh.message) == (english, chinese)
    assert en.code == zh.code == "invalid"
    assert en.fields == {field: [english]} and zh.fields == {field: [chinese]}


def test_a_weak_role_and_a_bad_ssh_key(pool: dict[str, Any]) -> None:
    en, zh = both(lambda: services.order_create(actor=pool["viewer"], tenant=pool["a"],
                                                spec=spec()))
    assert en.message == "This needs the member role or higher."
    assert zh.message == "此操作需要“成员”或更高的角色。"
    assert en.code == zh.code == "permission_denied"
    en, zh = both(lambda: parse_public_key("ssh-dss AAAA"))
    assert en.message == "Unsupported key type 'ssh-dss' (use ssh-ed25519, ecdsa or rsa)."
    assert zh.message == "不支持的密钥类型 'ssh-dss'（请使用 ssh-ed25519、ecdsa 或 rsa）。"
    assert list(en.fields) == list(zh.fields) == ["public_key"]


# --- (b) the API follows Accept-Language ----------------------------------------------------

def post_order(pool: dict[str, Any], body: dict[str, Any], **headers: Any) -> Any:
    return client_for(pool["bob"]).post(reverse("order-create"), body, format="json",
                                        **headers)


def test_api_refusal_in_the_callers_language(pool: dict[str, Any]) -> None:
    body = {"models": ["H100"], "gpu_count": 8, "nodes": 2, "duration_hours": 2}
    zh = post_order(pool, body, HTTP_ACCEPT_LANGUAGE="zh-hans")
    en = post_order(pool, body)
    assert zh.status_code == en.status_code == 400
    assert zh.json().pop("lease_id") != en.json().pop("lease_id")  # each refusal is kept
    assert {k: v for k, v in zh.json().items() if k != "lease_id"} == {"error": "order_rejected", "detail": "这将超出您的 H100 GPU 配额：同时最多 8 个 GPU，该时段内剩余 8 个。",
                         "fields": {"gpu_count": ["这将超出您的 H100 GPU 配额：同时最多 8 个 GPU，该时段内剩余 8 个。"]}}
    assert {k: v for k, v in en.json().items() if k != "lease_id"} == {"error": "order_rejected", "detail": "This would exceed your GPU quota for H100: at most 8 GPUs at once, 8 free in that period.",
                         "fields": {"gpu_count": ["This would exceed your GPU quota for H100: at most 8 GPUs at once, 8 free in that period."]}}


def test_api_input_errors_in_the_callers_language(pool: dict[str, Any]) -> None:
    body = {"models": ["H100"], "gpu_count": 1}  # neither a duration nor an end
    zh = post_order(pool, body, HTTP_ACCEPT_LANGUAGE="zh-hans").json()
    en = post_order(pool, body).json()
    assert zh == {"error": "invalid", "detail": "输入无效。",
                  "fields": {"duration_hours": ["请填写时长或结束时间。"]}}
    assert en == {"error": "invalid", "detail": "Invalid input.",
                  "fields": {"duration_hours": ["Give a duration or an end."]}}


def test_api_cancel_of_an_active_lease_in_chinese(pool: dict[str, Any]) -> None:
    lease = services.order_create(actor=pool["bob"], tenant=pool["b"], spec=spec())
    drive()
    url = reverse("lease-cancel", kwargs={"pk": lease.pk})
    response = client_for(pool["bob"]).post(url, {}, format="json",
                                            HTTP_ACCEPT_LANGUAGE="zh-hans")
    assert response.status_code == 409
    assert response.json()["error"] == "illegal_transition"
    assert response.json()["detail"] == "运行中的租约无法取消，请改为释放。"
    assert list(response.json()["fields"]) == ["state"]


# --- (c) pages, in the user's chosen language ------------------------------------------------

def page_client(user: Any, language: str) -> Client:
    client = Client()
    client.force_login(user)
    client.post("/i18n/setlang/", {"language": language, "next": "/"})
    return client


def order_page(client: Client, **overrides: str) -> str:
    data = {"models": ["H100"], "gpu_count": "8", "gpu_milli": "1000", "nodes": "2",
            "locality": "any", "priority": "on_demand", "start": "now", "start_at": "",
            "duration_hours": "2", "name": "train", "idempotency_key": "k-i18n", **overrides}
    response = client.post(reverse("web:order"), data)
    assert response.status_code == 400
    return str(response.content.decode())


def test_order_page_shows_the_service_refusal_in_chinese(pool: dict[str, Any]) -> None:
    body = order_page(page_client(pool["bob"], "zh-hans"))
    assert "这将超出您的 H100 GPU 配额：同时最多 8 个 GPU，该时段内剩余 8 个。" in body
    assert "exceed your GPU quota" not in body
    body = order_page(page_client(pool["bob"], "en"))
    assert "This would exceed your GPU quota for H100: at most 8 GPUs at once, 8 free in that period." in body


def test_profile_page_shows_the_ssh_key_error_in_chinese(pool: dict[str, Any]) -> None:
    client = page_client(pool["alice"], "zh-hans")
    response = client.post(reverse("web:profile"), {"name": "k", "public_key": "a\nb"})
    assert response.status_code == 400
    body = response.content.decode()
    assert "请只粘贴一行公钥。" in body and has_chinese(body)
    assert "Paste exactly one public key line." not in body

