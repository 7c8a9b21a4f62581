from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "portal.sso"
    label = "sso"
    verbose_name = "Single sign-on (OpenID Connect)"
