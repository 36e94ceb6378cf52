"""botocore as a codec: the AWS wire format of one service, and nothing else.

botocore's client does I/O with urllib3, blocking, and reads credentials and endpoints on
its own. We use only the pieces its client is built from, keyed on the service model's
protocol (EC2: `ec2`; ELB, ELBv2, STS: `query`), so a protocol change in a botocore
upgrade is followed automatically, and `tests/aws/test_codec.py` runs them against moto:

- the service model (`botocore.loaders.Loader` + `botocore.model.ServiceModel`, read from
  the JSON files botocore ships; no session, so no `~/.aws` file is read),
- `botocore.serialize.create_serializer(protocol)` (with parameter validation),
- `botocore.auth.SigV4Auth` on a `botocore.awsrequest.AWSRequest` (signing),
- `botocore.parsers.create_parser(protocol)` (answers and error bodies).

`Codec.parse` is pure CPU work (about 0.6 ms per EC2 instance in a DescribeInstances
answer): `AwsClient` runs large answers in a worker thread. A parser is created per parse,
so parses in threads share no parser state. The XML is fed to expat in 64 KiB pieces
(botocore feeds it whole): expat holds the GIL for a whole feed, 40-200 ms for a
1,000-instance page, which would stall the Trio thread even from a worker thread.

An answer that is not the XML document the action returns (an HTML page from moto's
unimplemented filters or a proxy, a truncated body) is an `AwsServerError`: transient,
never read as an empty answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, cast
from xml.etree import ElementTree

import botocore.auth
import botocore.awsrequest
import botocore.credentials
import botocore.exceptions
import botocore.loaders
import botocore.model
import botocore.parsers
import botocore.serialize

from trio_ccm._version import __version__
from trio_ccm.cloud.aws.credentials import AwsCredentials
from trio_ccm.cloud.aws.errors import (
    THROTTLING_CODES,
    TRANSIENT_CODES,
    AwsError,
    AwsServerError,
    AwsThrottledError,
)

__all__ = ["USER_AGENT", "Codec", "Parsed", "PreparedRequest"]

USER_AGENT: Final = f"trio-ccm/{__version__}"

Parsed = dict[str, object]
"""A parsed answer: botocore's output shape as plain dicts, lists and scalars."""

_ROOT_WINDOW: Final = 512  # the root element is within the first bytes of an answer
_FEED_BYTES: Final = 64 * 1024  # about 3 ms of expat per piece, the GIL released between


class _ChunkedFeed:
    """botocore's XML DOM step, fed to expat piece by piece (see the module docstring)."""

    DEFAULT_ENCODING: str

    def _parse_xml_string_to_dom(self, xml_string: bytes) -> ElementTree.Element:
        try:
            # What botocore itself does (S314): no external entities, and Python's expat
            # (>= 2.4) bounds entity expansion.
            parser = ElementTree.XMLParser(  # noqa: S314
                target=ElementTree.TreeBuilder(), encoding=self.DEFAULT_ENCODING
            )
            for start in range(0, len(xml_string), _FEED_BYTES):
                parser.feed(xml_string[start : start + _FEED_BYTES])
            return parser.close()
        except ElementTree.ParseError as exc:
            raise botocore.parsers.ResponseParserError(f"invalid XML: {exc}") from None


_PARSERS: Final = {
    protocol: type(f"Chunked{base.__name__}", (_ChunkedFeed, base), {})
    for protocol, base in botocore.parsers.PROTOCOL_PARSERS.items()
    if issubclass(base, botocore.parsers.BaseXMLResponseParser)
}
"""botocore's XML parsers (ec2, query, rest-xml) with the chunked feed."""


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A signed request, ready to send."""

    method: str
    url: str
    headers: Mapping[str, str]
    body: bytes


class Codec:
    """One AWS service's wire format (`service`: botocore's name: ec2, elb, elbv2, sts).

    Building one loads the service model from disk (0.1 s for EC2): do it off the Trio
    thread (`AwsClient` does).
    """

    def __init__(self, service: str) -> None:
        loader = botocore.loaders.Loader()
        self.service = service
        self.model = botocore.model.ServiceModel(
            loader.load_service_model(service, "service-2"), service_name=service
        )
        self.protocol: str = self.model.protocol
        self.signing_name: str = self.model.signing_name
        self._serializer = botocore.serialize.create_serializer(
            self.protocol, include_validation=True
        )
        self._operations: dict[str, botocore.model.OperationModel] = {}

    def operation(self, action: str) -> botocore.model.OperationModel:
        found = self._operations.get(action)
        if found is None:
            found = self._operations[action] = self.model.operation_model(action)
        return found

    def request(
        self,
        action: str,
        params: Mapping[str, object],
        *,
        endpoint_url: str,
        region: str,
        signing_name: str = "",
        credentials: AwsCredentials | None,
        headers: Mapping[str, str] | None = None,
    ) -> PreparedRequest:
        """Serialise `action` with `params` and sign it (unless `credentials` is None or the
        action is unsigned, as STS's AssumeRoleWithWebIdentity)."""
        operation = self.operation(action)
        try:
            serialized = self._serializer.serialize_to_request(dict(params), operation)
        except botocore.exceptions.ParamValidationError as exc:
            raise AwsError(
                f"the request's parameters are invalid (a trio-ccm bug, please report it): {exc}",
                service=self.service,
                action=action,
            ) from exc
        botocore.awsrequest.prepare_request_dict(
            serialized, endpoint_url=endpoint_url, user_agent=USER_AGENT
        )
        request = botocore.awsrequest.create_request_object(serialized)
        for key, value in (headers or {}).items():
            request.headers[key] = value
        if credentials is not None and operation.auth_type != "none":
            signer = botocore.auth.SigV4Auth(
                botocore.credentials.Credentials(
                    credentials.access_key_id,
                    credentials.secret_access_key,
                    credentials.session_token or None,
                ),
                signing_name or self.signing_name,
                region,
            )
            signer.add_auth(request)
        prepared = request.prepare()
        body = prepared.body
        if body is None:
            body = b""
        elif isinstance(body, str):
            body = body.encode()
        return PreparedRequest(
            method=prepared.method,
            url=prepared.url,
            headers={str(k): str(v) for k, v in prepared.headers.items()},
            body=bytes(body),
        )

    def parse(
        self,
        action: str,
        status: int,
        headers: Mapping[str, str],
        body: bytes,
        *,
        target: str = "",
    ) -> Parsed:
        """The answer as a dict, or the AwsError it carries (see the module docstring)."""
        operation = self.operation(action)
        parser = _PARSERS[self.protocol]()
        response = {"status_code": status, "headers": dict(headers), "body": body}
        if status < 300:
            if f"<{action}Response".encode() not in body[:_ROOT_WINDOW]:
                raise self._garbage(action, status, body, target)
            try:
                parsed = parser.parse(response, operation.output_shape)
            except botocore.parsers.ResponseParserError:
                # Not `from`: botocore's message holds the whole body (megabytes of logs).
                raise self._garbage(action, status, body, target) from None
            return cast(Parsed, parsed)
        try:
            parsed = parser.parse(response, operation.output_shape)
        except botocore.parsers.ResponseParserError:
            raise self._garbage(action, status, body, target) from None
        error = cast(Mapping[str, object], parsed.get("Error") or {})
        metadata = cast(Mapping[str, object], parsed.get("ResponseMetadata") or {})
        code = str(error.get("Code") or "")
        message = str(error.get("Message") or "")
        request_id = str(metadata.get("RequestId") or "")
        if not code or code == str(status):  # botocore's stand-in for a body without one
            raise self._garbage(action, status, body, target)
        kind: type[AwsError] = AwsError
        if code in THROTTLING_CODES or status == 429:
            kind = AwsThrottledError
        elif status >= 500 or code in TRANSIENT_CODES:
            kind = AwsServerError
        return_error = kind(
            message or "(no message)",
            service=self.service,
            action=action,
            target=target,
            status=status,
            code=code,
            request_id=request_id,
        )
        raise return_error

    def _garbage(self, action: str, status: int, body: bytes, target: str) -> AwsServerError:
        start = body[:120].decode(errors="replace").strip().replace("\n", " ")
        return AwsServerError(
            f"the answer is not the XML document AWS sends for {action} "
            f"(it starts with {start!r}); a proxy or an emulator answered instead of AWS, "
            "or the answer was cut short: retried",
            service=self.service,
            action=action,
            target=target,
            status=status,
        )
