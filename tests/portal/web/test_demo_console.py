"""Finding 10 (issue 13): the demo's console is readable.

Old code: Celery's INFO lines and every e-mail (console backend) flooded the demo's console
(~200 lines a minute) and the URL banner, printed before the server's own start-up lines,
scrolled away at once.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import pytest
from django.core import mail

from portal.web import demo


@pytest.fixture
def levels() -> Any:
    names = ("portal", *demo.QUIET_LOGGERS)
    saved = {n: logging.getLogger(n).level for n in names}
    yield
    for name, level in saved.items():
        logging.getLogger(name).setLevel(level)


def test_demo_noise_celery_and_server_logs_at_warning(levels: Any, settings: Any,
                                                      tmp_path: Path) -> None:
    demo.configure_output(verbose=False, mail_dir=tmp_path)
    assert logging.getLogger("portal.leasing.tasks").getEffectiveLevel() == logging.INFO
    for name in ("celery.app.trace", "celery.worker.strategy", "uvicorn.access"):
        assert logging.getLogger(name).getEffectiveLevel() == logging.WARNING, name


def test_demo_noise_mails_go_to_files_not_the_console(levels: Any, settings: Any,
                                                      tmp_path: Path, capsys: Any) -> None:
    demo.configure_output(verbose=False, mail_dir=tmp_path / "mail")
    from django.conf import settings as live

    assert live.EMAIL_BACKEND == "django.core.mail.backends.filebased.EmailBackend"
    mail.get_connection().send_messages([mail.EmailMessage("Lease ending", "body", None,
                                                           ["x@example.com"])])
    assert "Lease ending" not in capsys.readouterr().out
    assert any("Lease ending" in p.read_text() for p in (tmp_path / "mail").iterdir())


def test_demo_noise_verbose_keeps_everything(levels: Any, settings: Any,
                                             tmp_path: Path) -> None:
    logging.getLogger("celery").setLevel(logging.NOTSET)
    backend_before = settings.EMAIL_BACKEND
    demo.configure_output(verbose=True, mail_dir=tmp_path)
    assert logging.getLogger("celery").level == logging.NOTSET
    assert backend_before == settings.EMAIL_BACKEND


def test_demo_noise_banner_is_printed_after_the_server_started() -> None:
    class Server:
        started = False

    server, written = Server(), []
    thread = demo.announce_when_started(server, written.append, "BANNER")
    time.sleep(0.2)
    assert written == []  # not before the server's own start-up lines
    server.started = True
    thread.join(timeout=5)
    assert written == ["BANNER"]
    assert not thread.is_alive()


def test_demo_noise_banner_names_console_and_docs() -> None:
    text = demo.banner("http://127.0.0.1:8000/", Path("/tmp/mail"))
    assert "http://127.0.0.1:8000/console/" in text and "/api/docs/" in text
    assert text.rstrip().splitlines()[-1].strip().startswith("e-mails:")
