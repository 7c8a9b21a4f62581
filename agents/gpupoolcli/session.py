"""What every command shares: the profile, the resolved URL and key, and one Api."""

from __future__ import annotations

from dataclasses import dataclass, field

import click

from agents.gpupoolcli.api import Api
from agents.gpupoolcli.config import profile_load


@dataclass
class Session:
    profile: str
    url: str = ""
    api_key: str = ""
    _api: Api | None = field(default=None, repr=False)

    def resolved(self) -> tuple[str, str]:
        """Command line / environment first, the stored profile for what they leave out."""
        stored = profile_load(self.profile)
        return self.url or stored.url, self.api_key or stored.api_key

    @property
    def api(self) -> Api:
        if self._api is None:
            url, key = self.resolved()
            self._api = Api(url, key)
        return self._api

    def close(self) -> None:
        if self._api is not None:
            self._api.close()


pass_session = click.make_pass_decorator(Session)
