"""Shared test builders for kube clients against the emulator."""

from __future__ import annotations

from trio_ccm.kube.config import ConnectionConfig, StaticCredentials
from trio_ccm.testing.apiserver import ApiServer


def config_for(server: ApiServer) -> ConnectionConfig:
    """Connection settings for a client reaching `server` through its in-process transport."""
    del server  # the transport carries the requests; the URL only names the emulator
    return ConnectionConfig(
        server="http://emulator", credentials=StaticCredentials(), source="test emulator"
    )
