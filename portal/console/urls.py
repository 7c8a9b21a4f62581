from django.urls import path

from portal.console import enrolments, members, repair, views

app_name = "console"
urlpatterns = [
    path("", views.index, name="index"),
    path("fabric/", views.fabric, name="fabric"),
    path("nodes/<str:hostname>/", views.node, name="node"),
    path("gpus/<int:pk>/health/", views.gpu_health, name="gpu_health"),
    path("queue/", views.queue, name="queue"),
    path("repair/", repair.repair_queue, name="repair"),
    path("partitions/", views.partitions, name="partitions"),
    path("storage/", views.storage, name="storage"),
    path("tenants/", views.tenants, name="tenants"),
    path("tenants/<slug:slug>/", views.tenant, name="tenant"),
    path("tenants/<slug:slug>/members/invite/", members.member_invite, name="member_invite"),
    path("tenants/<slug:slug>/members/<uuid:member_id>/role/", members.member_role,
         name="member_role"),
    path("tenants/<slug:slug>/members/<uuid:member_id>/remove/", members.member_remove,
         name="member_remove"),
    path("tenants/<slug:slug>/invitations/<uuid:invitation_id>/revoke/",
         members.invitation_revoke, name="invitation_revoke"),
    path("audit/", views.audit, name="audit"),
    path("billing/", views.billing_page, name="billing"),
    path("enrolments/", enrolments.enrolments, name="enrolments"),
]
