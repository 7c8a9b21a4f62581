from django.urls import path

from portal.sso import views

app_name = "sso"

urlpatterns = [
    path("<slug:name>/login/", views.start, name="start"),
    path("<slug:name>/callback/", views.callback, name="callback"),
]
