from django.contrib.auth.views import redirect_to_login
from django.db import connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render


def healthz(request: HttpRequest) -> JsonResponse:
    """Liveness + database reachability for load balancers."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    return JsonResponse({"status": "ok"})


def home(request: HttpRequest) -> HttpResponse:
    """Landing page: the signed-in user's tenants and the pool's capacity."""
    if not request.user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    from portal.inventory.selectors import capacity_by_model
    from portal.tenants.selectors import memberships_of

    return render(request, "home.html", {
        "memberships": memberships_of(user=request.user),
        "capacity": capacity_by_model(),
    })
