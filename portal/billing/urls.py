from django.urls import path

from portal.billing import views

app_name = "billing"
urlpatterns = [path("export/", views.export, name="export")]
