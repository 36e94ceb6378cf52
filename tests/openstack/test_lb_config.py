"""The load-balancer plan, pure: OCCM's [LoadBalancer] keys and annotations read with their
precedence, literal booleans and defaults; values that cannot mean anything are refused
naming the key or annotation and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from trio_ccm.cloud.openstack.lbconfig import (
    INTERNAL,
    PREFIX,
    LbOptions,
    lb_name,
    members,
    plan,
)
from trio_ccm.cloud.provider import NodeAddress, NodeInfo, ServiceInfo, ServicePort, ServiceRefused
from trio_ccm.errors import ConfigError

CLASSES = {"internet": {"floating-network-id": "class-fip-net", "subnet-id": "class-subnet"}}
CONFIG = {"subnet-id": "conf-subnet", "floating-network-id": "conf-fip-net"}


def service(**kw: Any) -> ServiceInfo:
    ann = {PREFIX + k: v for k, v in kw.pop("ann", {}).items()}
    ann.update(kw.pop("raw_ann", {}))
    ports = kw.pop("ports", (ServicePort("http", "TCP", 80, 30080),))
    return ServiceInfo("default", "web", "1234-abcd", annotations=ann, ports=ports, **kw)


def make(svc: ServiceInfo, **keys: str) -> Any:
    return plan(svc, LbOptions.parse({**CONFIG, **keys}, CLASSES), "kubernetes")


def test_names_and_defaults_are_occms() -> None:
    """Names, description, child names and the listener defaults are OCCM's."""
    p = make(service())
    assert p.name == "kube_service_kubernetes_default_web"
    assert p.legacy_name == "a1234abcd"
    assert p.description == "Kubernetes external service default/web from cluster kubernetes"
    port = p.ports[0]
    assert (port.listener_name, port.pool_name) == (
        "listener_0_kube_service_kubernetes_default_web",
        "pool_0_kube_service_kubernetes_default_web",
    )
    assert (port.protocol, port.pool_protocol, port.lb_method) == ("TCP", "TCP", "ROUND_ROBIN")
    assert port.timeouts_ms == (50000, 5000, 50000, 0)
    assert port.connection_limit == -1
    assert port.allowed_cidrs == ("0.0.0.0/0",)
    assert port.monitor is None
    assert p.fip_description.startswith("Floating IP for Kubernetes external service default/web")


def test_long_names_are_cut_at_255_bytes() -> None:
    """A name past 255 bytes is cut, as OCCM's Sprintf255."""
    svc = ServiceInfo("default", "x" * 300, "u", ports=(ServicePort("", "TCP", 80, 30080),))
    assert len(lb_name("c", svc).encode()) == 255


@pytest.mark.parametrize(
    ("ann", "keys", "field", "value"),
    [
        pytest.param({}, {}, "floating_network_id", "conf-fip-net", id="fip-net-config"),
        pytest.param(
            {"floating-network-id": "ann"},
            {},
            "floating_network_id",
            "ann",
            id="fip-net-annotation",
        ),
        pytest.param(
            {"floating-network-id": "ann", "class": "internet"},
            {},
            "floating_network_id",
            "class-fip-net",
            id="fip-net-class-beats-annotation",
        ),
        pytest.param({"floating-network-id": ""}, {}, "floating_network_id", "", id="empty-is-set"),
        pytest.param({"subnet-id": "ann"}, {}, "vip_subnet_id", "ann", id="subnet-annotation"),
        pytest.param(
            {"subnet-id": "ann", "class": "internet"},
            {},
            "vip_subnet_id",
            "class-subnet",
            id="subnet-class-wins-at-external-create",
        ),
        pytest.param({}, {}, "member_subnet_id", "conf-subnet", id="member-subnet-falls-back"),
        pytest.param(
            {"member-subnet-id": "m"}, {}, "member_subnet_id", "m", id="member-subnet-annotation"
        ),
        pytest.param({"keep-floatingip": "true"}, {}, "keep_floating_ip", True, id="keep-fip"),
        pytest.param({}, {"internal-lb": "true"}, "internal", True, id="internal-lb-config"),
        pytest.param({"flavor-id": "f"}, {"flavor-id": "c"}, "flavor_id", "f", id="flavor"),
        pytest.param(
            {"availability-zone": "az"}, {}, "availability_zone", "az", id="availability-zone"
        ),
        pytest.param({"hostname": "h.example"}, {}, "hostname", "h.example", id="hostname"),
        pytest.param({"load-balancer-id": "L"}, {}, "shared_lb_id", "L", id="shared"),
        pytest.param({"port-id": "P"}, {}, "vip_port_id", "P", id="port-id"),
        pytest.param(
            {"node-selector": "a=b, c"}, {}, "node_selector", {"a": "b", "c": ""}, id="selector"
        ),
        pytest.param({"proxy-protocol": "v2"}, {}, "proxy", True, id="proxy"),
    ],
)
def test_precedence(ann: dict[str, str], keys: dict[str, str], field: str, value: Any) -> None:
    """Each setting comes from the class, annotation or config as OCCM ranks them."""
    assert getattr(make(service(ann=ann), **keys), field) == value


def test_internal_annotation_is_the_core_one() -> None:
    """`service.beta.kubernetes.io/openstack-internal-load-balancer: "true"` makes it
    internal and spec.loadBalancerIP becomes the VIP."""
    p = make(service(raw_ann={INTERNAL: "true"}, load_balancer_ip="10.0.0.5"))
    assert (p.internal, p.vip_address, p.loadbalancer_ip) == (True, "10.0.0.5", "")
    external = make(service(load_balancer_ip="172.24.4.9"))
    assert (external.vip_address, external.loadbalancer_ip) == ("", "172.24.4.9")


@pytest.mark.parametrize(
    ("ann", "listener", "pool"),
    [
        pytest.param({"x-forwarded-for": "true"}, "HTTP", "HTTP", id="xff"),
        pytest.param({"default-tls-container-ref": "ref"}, "TERMINATED_HTTPS", "HTTP", id="tls"),
        pytest.param({"proxy-protocol": "true"}, "TCP", "PROXY", id="proxy-v1"),
        pytest.param({"proxy-protocol": "v2"}, "TCP", "PROXYV2", id="proxy-v2"),
    ],
)
def test_protocol_mapping(ann: dict[str, str], listener: str, pool: str) -> None:
    """x-forwarded-for → HTTP, a TLS container → TERMINATED_HTTPS, proxy → PROXY/PROXYV2."""
    port = make(service(ann=ann)).ports[0]
    assert (port.protocol, port.pool_protocol) == (listener, pool)


def test_udp_and_sctp_pass_through_with_their_monitors() -> None:
    """UDP and SCTP ports get their own listeners and UDP-CONNECT / SCTP monitors."""
    ports = (ServicePort("a", "UDP", 53, 30053), ServicePort("b", "SCTP", 99, 30099))
    p = make(service(ports=ports, ann={"enable-health-monitor": "true"}))
    assert [(x.protocol, x.monitor.type if x.monitor else "") for x in p.ports] == [
        ("UDP", "UDP-CONNECT"),
        ("SCTP", "SCTP"),
    ]


def test_local_traffic_always_gets_an_http_healthz_monitor() -> None:
    """externalTrafficPolicy: Local gets an HTTP GET /healthz monitor even with monitors off
    (OCCM's silent black hole), and members carry the healthCheckNodePort."""
    svc = service(external_traffic_policy="Local", health_check_node_port=32000)
    p = make(svc)
    monitor = p.ports[0].monitor
    assert monitor is not None
    assert (monitor.type, monitor.url_path, monitor.delay_s, monitor.timeout_s) == (
        "HTTP",
        "/healthz",
        5,
        3,
    )
    node = NodeInfo("n1", addresses=(NodeAddress("InternalIP", "10.0.0.1"),))
    assert [m.monitor_port for m in members(p, p.ports[0], [node], 32000)] == [32000]


def test_monitor_parameters_come_from_annotations_then_config() -> None:
    """health-monitor-* annotations beat monitor-* keys; the config durations are Go's."""
    p = make(
        service(ann={"enable-health-monitor": "true", "health-monitor-delay": "9"}),
        **{"monitor-timeout": "4s", "monitor-max-retries": "2"},
    )
    m = p.ports[0].monitor
    assert m is not None
    assert (m.delay_s, m.timeout_s, m.max_retries, m.max_retries_down) == (9, 4, 2, 3)


def test_members_are_the_selected_nodes_of_the_family() -> None:
    """Members: InternalIP of the Service's family (else ExternalIP), on the NodePort,
    named by Node, filtered by the node selector; a NodePort of 0 gives none."""
    nodes = [
        NodeInfo("a", labels={"pool": "x"}, addresses=(NodeAddress("InternalIP", "10.0.0.1"),)),
        NodeInfo("b", labels={"pool": "y"}, addresses=(NodeAddress("ExternalIP", "1.2.3.4"),)),
        NodeInfo("c", addresses=(NodeAddress("InternalIP", "fd00::1"),)),
    ]
    p = make(service())
    assert [(m.name, m.address, m.protocol_port) for m in members(p, p.ports[0], nodes, 0)] == [
        ("a", "10.0.0.1", 30080),
        ("b", "1.2.3.4", 30080),
    ]
    selected = make(service(ann={"node-selector": "pool=x"}))
    assert [m.name for m in members(selected, selected.ports[0], nodes, 0)] == ["a"]
    zero = make(service(ports=(ServicePort("", "TCP", 80, 0),)))
    assert members(zero, zero.ports[0], nodes, 0) == ()


def test_source_ranges_become_allowed_cidrs() -> None:
    """spec.loadBalancerSourceRanges (else the core annotation) → allowed_cidrs."""
    p = make(service(load_balancer_source_ranges=("10.1.0.0/16", "192.168.0.1/32")))
    assert p.ports[0].allowed_cidrs == ("10.1.0.0/16", "192.168.0.1/32")
    q = make(
        service(raw_ann={"service.beta.kubernetes.io/load-balancer-source-ranges": "10.2.0.0/16"})
    )
    assert q.ports[0].allowed_cidrs == ("10.2.0.0/16",)


@pytest.mark.parametrize(
    ("ann", "raw", "words"),
    [
        pytest.param(
            {"keep-floatingip": "yes"}, {}, ["keep-floatingip", '"true" or "false"'], id="bool"
        ),
        pytest.param(
            {}, {INTERNAL: "True"}, ["openstack-internal-load-balancer"], id="internal-bool"
        ),
        pytest.param({"connection-limit": "lots"}, {}, ["connection-limit", "integer"], id="int"),
        pytest.param(
            {"health-monitor-delay": "0"}, {}, ["health-monitor-delay", "1 or more"], id="min"
        ),
        pytest.param({"lb-method": "FASTEST"}, {}, ["lb-method", "ROUND_ROBIN"], id="method"),
        pytest.param({"proxy-protocol": "v3"}, {}, ["proxy-protocol", '"v2"'], id="proxy"),
        pytest.param({"class": "nope"}, {}, ["class", "internet"], id="unknown-class"),
        pytest.param(
            {"x-forwarded-for": "true", "proxy-protocol": "true"},
            {},
            ["cannot be used together"],
            id="xff-proxy",
        ),
    ],
)
def test_meaningless_values_are_refused(
    ann: dict[str, str], raw: dict[str, str], words: list[str]
) -> None:
    """A value that cannot mean anything is a ServiceRefused naming the annotation and fix."""
    with pytest.raises(ServiceRefused) as caught:
        make(service(ann=ann, raw_ann=raw))
    for word in words:
        assert word in str(caught.value)


def test_proxy_protocol_on_udp_is_refused() -> None:
    """Proxy protocol on a UDP port is refused before Octavia's 409 (OCCM #2368)."""
    ports = (ServicePort("a", "TCP", 80, 30080), ServicePort("b", "UDP", 53, 30053))
    with pytest.raises(ServiceRefused, match="TCP ports only"):
        make(service(ports=ports, ann={"proxy-protocol": "true"}))


@pytest.mark.parametrize(
    ("keys", "words"),
    [
        pytest.param({"lb-method": "FAST"}, ["lb-method"], id="method"),
        pytest.param({"create-monitor": "maybe"}, ["create-monitor", "boolean"], id="bool"),
        pytest.param({"monitor-delay": "soon"}, ["monitor-delay", "duration"], id="duration"),
        pytest.param({"max-shared-lb": "0"}, ["max-shared-lb"], id="shared"),
        pytest.param({"lb-version": "v1"}, ["lb-version"], id="version"),
        pytest.param({"flavour": "x"}, ["unknown keys", "flavour"], id="unknown"),
        pytest.param({"provider-requires-serial-api-calls": "true"}, ["serial"], id="serial"),
        pytest.param(
            {"trio-ccm-max-writes-in-flight": "0"}, ["trio-ccm-max-writes-in-flight"], id="writes"
        ),
        pytest.param(
            {"trio-ccm-max-creates-in-flight": "many"},
            ["trio-ccm-max-creates-in-flight", "integer"],
            id="creates",
        ),
    ],
)
def test_bad_config_is_a_config_error(keys: dict[str, str], words: list[str]) -> None:
    """A bad [LoadBalancer] key or value stops the start naming the key."""
    with pytest.raises(ConfigError) as caught:
        LbOptions.parse(keys)
    for word in words:
        assert word in str(caught.value)


def test_unknown_class_key_is_a_config_error() -> None:
    """[LoadBalancerClass "x"] takes only OCCM's class keys."""
    with pytest.raises(ConfigError, match="lb-method"):
        LbOptions.parse({}, {"x": {"lb-method": "SOURCE_IP"}})


@pytest.mark.parametrize(
    ("keys", "writes", "creates"),
    [
        pytest.param({}, 4, 8, id="defaults"),
        pytest.param(
            {"trio-ccm-max-writes-in-flight": "1", "trio-ccm-max-creates-in-flight": "3"},
            1,
            3,
            id="set",
        ),
    ],
)
def test_the_caps_in_flight_are_our_keys(keys: dict[str, str], writes: int, creates: int) -> None:
    """trio-ccm's own [LoadBalancer] keys cap the Octavia writes and creates in flight."""
    options = LbOptions.parse(keys)
    assert (options.max_writes_in_flight, options.max_creates_in_flight) == (writes, creates)
