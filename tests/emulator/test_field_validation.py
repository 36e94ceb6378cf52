"""fieldValidation (Strict, Warn, Ignore) and dryRun, with upstream's texts and order."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from tests.helpers.emulator import JSON_PATCH, MERGE, STRATEGIC
from trio_ccm_testbed.apiserver import ApiServer

DEPLOYMENTS = "/apis/apps/v1/namespaces/default/deployments"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"

# upstream's integration test body (test/integration/apiserver/field_validation_test.go),
# in spirit: repeated and unknown fields at several depths.
INVALID_DEPLOYMENT = b"""{
  "apiVersion": "apps/v1",
  "kind": "Deployment",
  "metadata": {"name": "dupe", "name": "web", "unknownMeta": "x", "labels": {"app": "web"}},
  "spec": {
    "unknown1": "val1",
    "unknownDupe": "valDupe",
    "unknownDupe": "valDupe2",
    "paused": true,
    "paused": false,
    "selector": {"matchLabels": {"app": "web"}},
    "template": {
      "metadata": {"labels": {"app": "web"}},
      "spec": {"containers": [{
        "name": "nginx",
        "image": "nginx:latest",
        "unknownNested": "val1",
        "imagePullPolicy": "Always",
        "imagePullPolicy": "Never"
      }]}
    }
  }
}"""
IN_ORDER = [
    'duplicate field "metadata.name"',
    'unknown field "metadata.unknownMeta"',
    'unknown field "spec.unknown1"',
    'unknown field "spec.unknownDupe"',
    'duplicate field "spec.paused"',
    'unknown field "spec.template.spec.containers[0].unknownNested"',
    'duplicate field "spec.template.spec.containers[0].imagePullPolicy"',
]


def warnings(response: httpx.Response) -> list[str]:
    """The texts of the Warning headers, as client-go reads them."""
    return [json.loads(value.split(" ", 2)[2]) for value in response.headers.get_list("warning")]


@pytest.fixture
async def client() -> AsyncIterator[httpx.AsyncClient]:
    server = ApiServer(seed=1)
    async with httpx.AsyncClient(transport=server.transport(), base_url="http://e") as c:
        yield c


@pytest.mark.parametrize(
    "query", [pytest.param("?fieldValidation=Warn", id="warn"), pytest.param("", id="default")]
)
async def test_warn_names_each_problem_in_body_order_and_drops_unknown_fields(
    client: httpx.AsyncClient, query: str
) -> None:
    """Warn (also the default) creates the object without its unknown fields and sends one
    Warning per repeated or unknown field, in the order of the body."""
    with trio.fail_after(5):
        response = await client.post(DEPLOYMENTS + query, content=INVALID_DEPLOYMENT)
    assert response.status_code == 201, response.text
    assert warnings(response) == IN_ORDER
    created = response.json()
    assert created["metadata"]["name"] == "web"  # the last of the repeated values
    assert "unknownMeta" not in created["metadata"]
    assert "unknown1" not in created["spec"]
    assert created["spec"]["paused"] is False
    container = created["spec"]["template"]["spec"]["containers"][0]
    assert container["imagePullPolicy"] == "Never"
    assert "unknownNested" not in container


async def test_strict_refuses_with_every_problem_named(client: httpx.AsyncClient) -> None:
    """Strict is a 400 naming each problem in order, and nothing is created."""
    with trio.fail_after(5):
        response = await client.post(
            DEPLOYMENTS + "?fieldValidation=Strict", content=INVALID_DEPLOYMENT
        )
        missing = await client.get(f"{DEPLOYMENTS}/web")
    assert response.status_code == 400
    assert response.json()["reason"] == "BadRequest"
    assert response.json()["message"] == (
        'Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: '
        + ", ".join(IN_ORDER)
    )
    assert missing.status_code == 404


async def test_ignore_drops_unknown_fields_silently(client: httpx.AsyncClient) -> None:
    """Ignore creates the object without its unknown fields and without a warning."""
    with trio.fail_after(5):
        response = await client.post(
            DEPLOYMENTS + "?fieldValidation=Ignore", content=INVALID_DEPLOYMENT
        )
    assert response.status_code == 201
    assert warnings(response) == []
    assert "unknown1" not in response.json()["spec"]


async def test_update_is_validated_like_a_create(client: httpx.AsyncClient) -> None:
    """A PUT with an unknown field is refused under Strict with the same wording."""
    with trio.fail_after(5):
        await client.post(CONFIGMAPS, json={"metadata": {"name": "cm"}, "data": {"a": "1"}})
        response = await client.put(
            f"{CONFIGMAPS}/cm?fieldValidation=Strict",
            json={"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}, "dta": {}},
        )
    assert response.status_code == 400
    assert response.json()["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'unknown field "dta"'
    )


async def test_yaml_body_names_repeated_keys_by_line(client: httpx.AsyncClient) -> None:
    """A YAML body's repeated keys are named by line, then the unknown fields sorted."""
    body = b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\n  name: b\nzeta: 1\ndta: {}\n"
    with trio.fail_after(5):
        response = await client.post(
            CONFIGMAPS + "?fieldValidation=Strict",
            content=body,
            headers={"content-type": "application/yaml"},
        )
    assert response.status_code == 400
    assert response.json()["message"] == (
        'ConfigMap in version "v1" cannot be handled as a ConfigMap: strict decoding error: '
        'yaml: unmarshal errors:\n  line 5: key "name" already set in map, '
        'unknown field "dta", unknown field "zeta"'
    )


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        pytest.param(
            MERGE,
            b'{"spec": {"unknown1": "v", "paused": true, "paused": false,'
            b' "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx",'
            b' "unknownNested": 1}]}}}}',
            [
                'duplicate field "spec.paused"',
                'unknown field "spec.template.spec.containers[0].unknownNested"',
                'unknown field "spec.unknown1"',
            ],
            id="merge-patch",
        ),
        pytest.param(
            STRATEGIC,
            b'{"spec": {"unknown1": "v", "paused": true, "paused": false}}',
            ['duplicate field "spec.paused"', 'unknown field "spec.unknown1"'],
            id="strategic",
        ),
        pytest.param(
            JSON_PATCH,
            b'[{"op": "add", "path": "/spec/unknown1", "value": "v", "foo": "bar"},'
            b' {"op": "add", "path": "/spec/unknown2", "path": "/spec/unknown3", "value": 1}]',
            [
                'json patch unknown field "[0].foo"',
                'json patch duplicate field "[1].path"',
                'unknown field "spec.unknown1"',
                'unknown field "spec.unknown3"',
            ],
            id="json-patch",
        ),
    ],
)
async def test_patch_problems_come_patch_first_then_result_sorted(
    client: httpx.AsyncClient, headers: dict[str, str], body: bytes, expected: list[str]
) -> None:
    """A patch's own repeated keys come first, then the patched object's unknown fields
    sorted by path; Warn applies the patch without them, Strict refuses it."""
    with trio.fail_after(5):
        created = await client.post(DEPLOYMENTS, content=INVALID_DEPLOYMENT)
        assert created.status_code == 201
        strict = await client.patch(
            f"{DEPLOYMENTS}/web?fieldValidation=Strict", content=body, headers=headers
        )
        warn = await client.patch(f"{DEPLOYMENTS}/web", content=body, headers=headers)
    assert strict.status_code == 400
    assert strict.json()["message"].endswith("strict decoding error: " + ", ".join(expected))
    assert warn.status_code == 200, warn.text
    assert warnings(warn) == expected
    assert "unknown1" not in warn.json()["spec"]


@pytest.mark.parametrize(
    ("query", "kind", "message"),
    [
        pytest.param(
            "fieldValidation=bogus",
            "CreateOptions",
            'fieldValidation: Unsupported value: "bogus": supported values: "", "Ignore", '
            '"Strict", "Warn"',
            id="field-validation",
        ),
        pytest.param(
            "dryRun=bogus",
            "CreateOptions",
            'dryRun: Unsupported value: []string{"bogus"}: supported values: "All"',
            id="dry-run",
        ),
    ],
)
async def test_bad_option_values_are_invalid(
    client: httpx.AsyncClient, query: str, kind: str, message: str
) -> None:
    """An unsupported fieldValidation or dryRun value is a 422 on the options kind."""
    with trio.fail_after(5):
        response = await client.post(f"{CONFIGMAPS}?{query}", json={"metadata": {"name": "cm"}})
        missing = await client.get(f"{CONFIGMAPS}/cm")
    assert response.status_code == 422
    assert response.json()["message"] == f'{kind}.meta.k8s.io "" is invalid: {message}'
    assert missing.status_code == 404


async def test_force_is_only_for_apply(client: httpx.AsyncClient) -> None:
    """`force` on a merge patch is refused as upstream's PatchOptions validation does."""
    with trio.fail_after(5):
        await client.post(CONFIGMAPS, json={"metadata": {"name": "cm"}})
        response = await client.patch(
            f"{CONFIGMAPS}/cm?force=true", json={"data": {"a": "1"}}, headers=MERGE
        )
    assert response.status_code == 422
    assert response.json()["message"] == (
        'PatchOptions.meta.k8s.io "" is invalid: force: Forbidden: may not be specified for '
        "non-apply patch"
    )


async def test_dry_run_writes_nothing(client: httpx.AsyncClient) -> None:
    """dryRun=All answers the object that would be created and stores nothing."""
    with trio.fail_after(5):
        response = await client.post(
            f"{CONFIGMAPS}?dryRun=All", json={"metadata": {"name": "cm"}, "data": {"a": "1"}}
        )
        missing = await client.get(f"{CONFIGMAPS}/cm")
    assert response.status_code == 201
    assert response.json()["data"] == {"a": "1"}
    assert missing.status_code == 404
