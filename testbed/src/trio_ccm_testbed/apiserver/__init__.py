"""A Kubernetes API server emulator for tests, served in-process or over HTTP(S).

server = ApiServer()
async with httpx.AsyncClient(transport=server.transport(), base_url="http://emulator"):
    ...
listening = await nursery.start(serve_apiserver, server)   # real HTTP on loopback
"""

from trio_ccm_testbed._http import Request, Response
from trio_ccm_testbed.apiserver.auth import User
from trio_ccm_testbed.apiserver.errors import ApiError
from trio_ccm_testbed.apiserver.faults import FaultRule, Faults
from trio_ccm_testbed.apiserver.listener import Listening, serve_apiserver
from trio_ccm_testbed.apiserver.server import ApiServer
from trio_ccm_testbed.apiserver.transport import ApiServerTransport

__all__ = [
    "ApiError",
    "ApiServer",
    "ApiServerTransport",
    "FaultRule",
    "Faults",
    "Listening",
    "Request",
    "Response",
    "User",
    "serve_apiserver",
]
