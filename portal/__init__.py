"""gpupool portal (Django project). Importing it loads the Celery app for shared_task."""

from portal.celery import app as celery_app

__all__ = ["celery_app"]
