from django.urls import path

from portal.billing import views

app_name = "billing"
urlpatterns = [
    path("export/", views.export, name="export"),
    path("invoices/<int:year>-<int:month>/", views.invoice_page, name="invoice"),
    path("invoices/<int:year>-<int:month>.csv", views.invoice_csv, name="invoice_csv"),
]
