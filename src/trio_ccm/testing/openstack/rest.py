"""A small synchronous OpenStack REST client for the world's own set-up calls.

It talks to the services' own ports (never through the fault proxy): Keystone v3 password
auth with a project scope, the token re-used, every call under a timeout, an error raised
with the method, URL, status and body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import httpx

from trio_ccm.testing.openstack.layout import Layout

__all__ = ["Json", "OpenStackError", "Rest"]

Json = Any  # the services' JSON documents, read by key where they are used
_TIMEOUT_S: Final = 60.0


class OpenStackError(Exception):
    """A set-up call failed: method, URL, status and the service's answer."""

    def __init__(self, method: str, url: str, status: int, body: str) -> None:
        super().__init__(f"{method} {url}: HTTP {status}: {body[:500]}")
        self.status = status


@dataclass
class Rest:
    """A scoped session against the world's services (module docstring)."""

    layout: Layout
    username: str
    password: str
    project: str

    def __post_init__(self) -> None:
        self._http = httpx.Client(timeout=_TIMEOUT_S, headers={"Connection": "close"})
        self._token = ""
        self.project_id = ""
        self.user_id = ""

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Rest:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def authenticate(self) -> None:
        body = {
            "auth": {
                "identity": {
                    "methods": ["password"],
                    "password": {
                        "user": {
                            "name": self.username,
                            "domain": {"name": "Default"},
                            "password": self.password,
                        }
                    },
                },
                "scope": {"project": {"name": self.project, "domain": {"name": "Default"}}},
            }
        }
        url = self.layout.backend_url("identity") + "/auth/tokens"
        answer = self._http.post(url, json=body)
        if answer.status_code != 201:
            raise OpenStackError("POST", url, answer.status_code, answer.text)
        self._token = answer.headers["X-Subject-Token"]
        token = answer.json()["token"]
        self.project_id = token["project"]["id"]
        self.user_id = token["user"]["id"]

    def call(
        self,
        method: str,
        service: str,
        path: str,
        *,
        json: Json = None,
        content: bytes | None = None,
        params: Mapping[str, str] | None = None,
        headers: Mapping[str, str] | None = None,
        ok: tuple[int, ...] = (200, 201, 202, 204),
    ) -> Json:
        """`method` on `service`'s own endpoint + `path`; the decoded body (None if empty)."""
        if not self._token:
            self.authenticate()
        url = self.layout.backend_url(service) + path
        answer = self._http.request(
            method,
            url,
            json=json,
            content=content,
            params=params,
            headers={"X-Auth-Token": self._token, **(headers or {})},
        )
        if answer.status_code not in ok:
            raise OpenStackError(method, url, answer.status_code, answer.text)
        if not answer.content or answer.status_code == 204:
            return None
        return answer.json()

    def get(self, service: str, path: str, **params: str) -> Json:
        return self.call("GET", service, path, params=params)

    def post(self, service: str, path: str, json: Json) -> Json:
        return self.call("POST", service, path, json=json)

    def put(self, service: str, path: str, json: Json = None) -> Json:
        return self.call("PUT", service, path, json=json)
