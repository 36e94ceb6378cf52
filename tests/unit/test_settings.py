"""Settings from a Go-style command line: syntax, defaults, validation, controllers, configz."""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_ccm.cli.flags import parse_flags, to_flags, usage, wants_help, wants_version
from trio_ccm.errors import ConfigError
from trio_ccm.settings import CLOUD_RATE_FAMILIES, FlagError, Settings

DAY_NS = 86_400 * 10**9
ALIASES = {
    "cloud-node": "cloud-node-controller",
    "cloud-node-lifecycle": "cloud-node-lifecycle-controller",
    "service": "service-lb-controller",
    "route": "node-route-controller",
}
KNOWN = [
    "cloud-node-controller",
    "cloud-node-lifecycle-controller",
    "service-lb-controller",
    "node-route-controller",
]
EFFECTIVE = [
    "--cloud-provider",
    "--cloud-config",
    "--kubeconfig",
    "--master",
    "--kube-api-qps",
    "--kube-api-burst",
    "--controllers",
    "--leader-elect",
    "--leader-elect-lease-duration",
    "--leader-elect-renew-deadline",
    "--leader-elect-retry-period",
    "--leader-elect-resource-lock",
    "--leader-elect-resource-name",
    "--leader-elect-resource-namespace",
    "--exit-on-lost-lease",
    "--cluster-name",
    "--cluster-cidr",
    "--allocate-node-cidrs",
    "--cidr-allocator-type",
    "--node-cidr-mask-size",
    "--node-cidr-mask-size-ipv4",
    "--node-cidr-mask-size-ipv6",
    "--service-cluster-ip-range",
    "--configure-cloud-routes",
    "--route-reconciliation-period",
    "--node-monitor-period",
    "--concurrent-node-syncs",
    "--concurrent-node-status-updates",
    "--node-status-update-frequency",
    "--concurrent-service-syncs",
    "--min-resync-period",
    "--controller-start-interval",
    "--secure-port",
    "--bind-address",
    "--cert-dir",
    "--tls-cert-file",
    "--tls-private-key-file",
    "--plain-http",
    "--v",
    "--logging-format",
    "--cloud-api-rate",
    "--cloud-batch-window",
    "--cloud-batch-size",
    "--load-balancer-sweep-period",
    "--delete-leaked-load-balancers",
    "--leaked-load-balancer-grace",
]
OPERATIONS_MD = Path(__file__).parents[2] / "docs" / "operations.md"

# The upstream flags accepted without effect: name -> True when it is a boolean in Go.
IGNORED = {
    "kube-api-content-type": False,
    "profiling": True,
    "contention-profiling": True,
    "feature-gates": False,
    "use-service-account-credentials": True,
    "external-cloud-volume-plugin": False,
    "allow-untagged-cloud": True,
    "node-sync-period": False,
    "enable-leader-migration": True,
    "leader-migration-config": False,
    "authentication-kubeconfig": False,
    "authentication-skip-lookup": True,
    "authentication-token-webhook-cache-ttl": False,
    "authentication-tolerate-lookup-failure": True,
    "authorization-kubeconfig": False,
    "authorization-always-allow-paths": False,
    "authorization-webhook-cache-authorized-ttl": False,
    "authorization-webhook-cache-unauthorized-ttl": False,
    "client-ca-file": False,
    "requestheader-client-ca-file": False,
    "requestheader-allowed-names": False,
    "requestheader-username-headers": False,
    "requestheader-group-headers": False,
    "requestheader-extra-headers-prefix": False,
    "requestheader-uid-headers": False,
    "tls-cipher-suites": False,
    "tls-curve-preferences": False,
    "tls-min-version": False,
    "tls-sni-cert-key": False,
    "http2-max-streams-per-connection": False,
    "disable-http2-serving": True,
    "permit-port-sharing": True,
    "permit-address-sharing": True,
    "vmodule": False,
    "log-flush-frequency": False,
    "webhooks": False,
    "webhook-secure-port": False,
    "webhook-bind-address": False,
    "webhook-cert-dir": False,
}
# A value Go would accept for each value-taking ignored flag.
IGNORED_VALUES = {
    "node-sync-period": "0s",
    "authentication-token-webhook-cache-ttl": "10s",
    "authorization-webhook-cache-authorized-ttl": "10s",
    "authorization-webhook-cache-unauthorized-ttl": "10s",
    "log-flush-frequency": "5s",
    "http2-max-streams-per-connection": "1000",
    "webhook-secure-port": "10260",
    "webhook-bind-address": "127.0.0.1",
}


@pytest.mark.parametrize(
    ("field", "value"),
    [
        pytest.param("kube_api_qps", 20.0, id="qps"),
        pytest.param("kube_api_burst", 30, id="burst"),
        pytest.param("controllers", ("*",), id="controllers"),
        pytest.param("leader_elect", True, id="leader-elect"),
        pytest.param("leader_elect_lease_duration_s", 15.0, id="lease"),
        pytest.param("leader_elect_renew_deadline_s", 10.0, id="renew"),
        pytest.param("leader_elect_retry_period_s", 2.0, id="retry"),
        pytest.param("leader_elect_resource_name", "cloud-controller-manager", id="lease-name"),
        pytest.param("leader_elect_resource_namespace", "kube-system", id="lease-namespace"),
        pytest.param("exit_on_lost_lease", False, id="exit-on-lost-lease"),
        pytest.param("cluster_name", "kubernetes", id="cluster-name"),
        pytest.param("configure_cloud_routes", True, id="routes"),
        pytest.param("route_reconciliation_period_s", 10.0, id="route-period"),
        pytest.param("node_monitor_period_s", 5.0, id="monitor-period"),
        pytest.param("concurrent_node_syncs", 10, id="node-syncs"),
        pytest.param("node_status_update_frequency_s", 300.0, id="status-frequency"),
        pytest.param("min_resync_period_s", 43200.0, id="resync"),
        pytest.param("secure_port", 10258, id="port"),
        pytest.param("bind_address", "0.0.0.0", id="bind"),  # noqa: S104 - a default, not a bind
        pytest.param("cloud_batch_window_s", 0.02, id="batch-window"),
        pytest.param("cloud_batch_size", 200, id="batch-size"),
        pytest.param("ignored_flags", (), id="ignored"),
    ],
)
def test_an_empty_command_line_gives_the_defaults(field: str, value: object) -> None:
    """With no flags every setting has its documented default."""
    settings = parse_flags([])
    assert settings == Settings()
    assert getattr(settings, field) == value


@pytest.mark.parametrize(
    ("argv", "field", "value"),
    [
        pytest.param(["--kube-api-qps=5"], "kube_api_qps", 5.0, id="equals"),
        pytest.param(["--kube-api-qps", "5"], "kube_api_qps", 5.0, id="separate-value"),
        pytest.param(["--kube-api-qps=1e2"], "kube_api_qps", 100.0, id="exponent"),
        pytest.param(["--kube_api_qps=5"], "kube_api_qps", 5.0, id="underscores"),
        pytest.param(
            ["--kube-api-burst=7", "--kube-api-burst=40"], "kube_api_burst", 40, id="last-wins"
        ),
        pytest.param(["--leader-elect=false"], "leader_elect", False, id="bool-false"),
        pytest.param(["--leader-elect=F"], "leader_elect", False, id="bool-go-spelling"),
        pytest.param(
            ["--leader-elect=false", "--leader-elect"], "leader_elect", True, id="bool-bare"
        ),
        pytest.param(["--plain-http"], "plain_http", True, id="ours-bool"),
        pytest.param(["-v=2"], "verbosity", 2, id="v-equals"),
        pytest.param(["-v", "2"], "verbosity", 2, id="v-separate"),
        pytest.param(["-v2"], "verbosity", 2, id="v-glued"),
        pytest.param(["--v=3"], "verbosity", 3, id="v-long"),
        pytest.param(
            ["--leader-elect-lease-duration=1m30s"],
            "leader_elect_lease_duration_s",
            90.0,
            id="duration-compound",
        ),
        pytest.param(
            ["--leader-elect-retry-period=500ms"],
            "leader_elect_retry_period_s",
            0.5,
            id="duration-ms",
        ),
        pytest.param(
            ["--min-resync-period=1.5h"], "min_resync_period_s", 5400.0, id="duration-fraction"
        ),
        pytest.param(
            ["--controller-start-interval=0"], "controller_start_interval_s", 0.0, id="zero"
        ),
        pytest.param(
            ["--cloud-batch-window=250us"], "cloud_batch_window_s", 0.00025, id="duration-us"
        ),
        pytest.param(["--cluster-name", "--odd"], "cluster_name", "--odd", id="value-like-flag"),
        pytest.param(["--cluster-name=a=b"], "cluster_name", "a=b", id="value-with-equals"),
        pytest.param(["--bind-address=::"], "bind_address", "::", id="ipv6-bind"),
        pytest.param(
            ["--cluster-cidr=10.244.0.0/16,fd00::/48"],
            "cluster_cidr",
            "10.244.0.0/16,fd00::/48",
            id="dual-stack",
        ),
        pytest.param(
            ["--controllers=*,-route"],
            "controllers",
            ("*", "-node-route-controller"),
            id="alias-rewritten",
        ),
        pytest.param(
            ["--controllers=service", "--controllers=cloud-node"],
            "controllers",
            ("service-lb-controller", "cloud-node-controller"),
            id="controllers-repeated-append",
        ),
        pytest.param(["--controllers="], "controllers", (), id="controllers-empty-list"),
        pytest.param(
            ["--cloud-api-rate=instances=5:10,routes=0.5:1", "--cloud-api-rate=load_balancers=2:4"],
            "cloud_rates",
            (("instances", 5.0, 10), ("routes", 0.5, 1), ("load_balancers", 2.0, 4)),
            id="cloud-rates",
        ),
        pytest.param(
            ["--leader-elect=false", "--leader-elect-lease-duration=1s"],
            "leader_elect_lease_duration_s",
            1.0,
            id="lease-unchecked-without-election",
        ),
        pytest.param(
            ["--leader-elect=false", "--leader-elect-resource-lock=endpoints"],
            "leader_elect_resource_lock",
            "endpoints",
            id="lock-unchecked-without-election",
        ),
        pytest.param(
            ["--tls-cert-file=c.pem", "--tls-private-key-file=k.pem"],
            "tls_private_key_file",
            "k.pem",
            id="cert-and-key",
        ),
        pytest.param(["--help", "--version"], "verbosity", 0, id="help-version-skipped"),
        pytest.param(["--kubeconfig=x", "--"], "kubeconfig", "x", id="trailing-double-dash"),
    ],
)
def test_flags_parse_like_pflag(argv: list[str], field: str, value: object) -> None:
    """Each spelling pflag accepts sets the field to the typed value."""
    settings = parse_flags(argv, controller_aliases=ALIASES)
    assert getattr(settings, field) == value


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--kube-api-qps=abc"], "--kube-api-qps=abc: not a number", id="float"),
        pytest.param(["--kube-api-burst=1.5"], "--kube-api-burst=1.5: not an integer", id="int"),
        pytest.param(
            ["--leader-elect-lease-duration=15"],
            "--leader-elect-lease-duration=15: a duration needs a unit, e.g. 15s",
            id="duration-without-unit",
        ),
        pytest.param(
            ["--node-monitor-period=5 s"],
            "--node-monitor-period=5 s: not a duration",
            id="duration-garbage",
        ),
        pytest.param(
            ["--node-monitor-period=1d"], "--node-monitor-period=1d: not a duration", id="days"
        ),
        pytest.param(
            ["--min-resync-period=-1s"],
            "--min-resync-period=-1s: must be from 1s to 168h0m0s",
            id="negative-duration",
        ),
        pytest.param(
            ["--route-reconciliation-period=0"],
            "--route-reconciliation-period=0s: must be more than 0s and at most 24h0m0s",
            id="zero-period",
        ),
        pytest.param(["--foo"], "unknown flag: --foo", id="unknown"),
        pytest.param(["--foo=1"], "unknown flag: --foo", id="unknown-with-value"),
        pytest.param(
            ["-kubeconfig=x"],
            "-kubeconfig=x: long flags take two dashes, e.g. --kubeconfig=x",
            id="single-dash-long",
        ),
        pytest.param(["-x"], "unknown shorthand flag: 'x' in -x", id="unknown-shorthand"),
        pytest.param(["--h"], "unknown flag: --h", id="h-is-short-only"),
        pytest.param(["-help"], "-help: long flags take two dashes", id="single-dash-help"),
        pytest.param(["kubeconfig"], "unexpected argument 'kubeconfig'", id="positional"),
        pytest.param(["--", "-v=1"], "unexpected argument '-v=1'", id="after-double-dash"),
        pytest.param(
            ["--leader-elect", "false"],
            "a boolean flag takes its value after '=', e.g. --leader-elect=false",
            id="bool-space-value",
        ),
        pytest.param(["--leader-elect=no"], "--leader-elect=no: not a boolean", id="bool-garbage"),
        pytest.param(["--kubeconfig"], "--kubeconfig: the flag needs a value", id="no-value"),
        pytest.param(["-v"], "-v: the flag needs a value", id="v-no-value"),
        pytest.param(["-v=x"], "-v=x: not an integer", id="v-garbage"),
        pytest.param(["--v=-1"], "--v=-1: must be 0 to 10", id="v-negative"),
        pytest.param(
            ["--leader-elect-lease-duration=10s"],
            "--leader-elect-lease-duration=10s, --leader-elect-renew-deadline=10s, "
            "--leader-elect-retry-period=2s: need",
            id="lease-not-above-renew",
        ),
        pytest.param(
            ["--leader-elect-retry-period=9s"],
            "1.2 x --leader-elect-retry-period",
            id="renew-not-above-retry",
        ),
        pytest.param(
            ["--leader-elect-resource-lock=endpoints"],
            "--leader-elect-resource-lock=endpoints: only leases",
            id="lock",
        ),
        pytest.param(["--kube-api-qps=0"], "--kube-api-qps=0.0: must be more than 0", id="qps"),
        pytest.param(["--kube-api-burst=0"], "--kube-api-burst=0: must be 1 to 100000", id="burst"),
        pytest.param(
            ["--concurrent-node-syncs=0"], "--concurrent-node-syncs=0: must be 1 to 10000", id="n"
        ),
        pytest.param(
            ["--concurrent-service-syncs=0"],
            "--concurrent-service-syncs=0: must be 1 to 10000",
            id="service-syncs",
        ),
        pytest.param(
            ["--concurrent-node-status-updates=-1"],
            "--concurrent-node-status-updates=-1: must be 0",
            id="status-updates",
        ),
        pytest.param(["--cloud-batch-size=0"], "--cloud-batch-size=0: must be 1 to 10000", id="b"),
        pytest.param(["--secure-port=65536"], "--secure-port=65536: must be 0", id="port"),
        pytest.param(
            ["--bind-address=localhost"], "--bind-address=localhost: not an IP", id="bind"
        ),
        pytest.param(
            ["--tls-cert-file=c.pem"],
            "--tls-cert-file and --tls-private-key-file go together",
            id="cert-alone",
        ),
        pytest.param(
            ["--tls-private-key-file=k.pem"],
            "--tls-cert-file and --tls-private-key-file go together",
            id="key-alone",
        ),
        pytest.param(
            ["--plain-http", "--tls-cert-file=c", "--tls-private-key-file=k"],
            "--plain-http serves without TLS",
            id="plain-with-cert",
        ),
        pytest.param(
            ["--logging-format=xml"], "--logging-format=xml: write text or json", id="format"
        ),
        pytest.param(
            ["--cidr-allocator-type=CloudAllocator"],
            "--cidr-allocator-type=CloudAllocator: only RangeAllocator",
            id="allocator",
        ),
        pytest.param(["--cluster-cidr=10.0.0.0/33"], "'10.0.0.0/33' is not a CIDR", id="bad-cidr"),
        pytest.param(
            ["--cluster-cidr=10.0.0.0/8,10.1.0.0/16"],
            "one IPv4 and one IPv6",
            id="two-v4-cidrs",
        ),
        pytest.param(
            ["--controllers=*,,-route"], "--controllers=*,,-route: empty controller name", id="e"
        ),
        pytest.param(
            ["--controllers=*, -route"], "' -route' is not '*', NAME or -NAME", id="space"
        ),
        pytest.param(["--controllers=-*"], "'-*' is not '*', NAME or -NAME", id="minus-star"),
        pytest.param(
            ["--cloud-api-rate=instances=10"],
            "'instances=10' is not FAMILY=QPS:BURST",
            id="rate-syntax",
        ),
        pytest.param(["--cloud-api-rate="], "'' is not FAMILY=QPS:BURST", id="rate-empty"),
        pytest.param(["--cloud-api-rate=disks=1:1"], "unknown family 'disks'", id="rate-family"),
        pytest.param(["--cloud-api-rate=routes=0:1"], "QPS must be more than 0", id="rate-qps"),
        pytest.param(["--cloud-api-rate=routes=1:0"], "burst must be 1 to 100000", id="rate-burst"),
        pytest.param(
            ["--cloud-api-rate=routes=1:1", "--cloud-api-rate=routes=2:2"],
            "family routes is given twice",
            id="rate-twice",
        ),
        pytest.param(["--profiling=maybe"], "--profiling=maybe: not a boolean", id="ignored-bool"),
        pytest.param(
            ["--node-sync-period=5"],
            "--node-sync-period=5: a duration needs a unit",
            id="ignored-duration",
        ),
        pytest.param(
            ["--webhook-secure-port=x"], "--webhook-secure-port=x: not an integer", id="ig-int"
        ),
    ],
)
def test_bad_command_lines_name_the_flag(argv: list[str], message: str) -> None:
    """A bad command line raises FlagError (a ConfigError) whose message names the flag."""
    with pytest.raises(FlagError) as caught:
        parse_flags(argv, controller_aliases=ALIASES)
    assert message in str(caught.value)
    assert isinstance(caught.value, ConfigError)


def test_all_validation_problems_are_reported_together() -> None:
    """Validation reports every bad setting at once, not only the first."""
    with pytest.raises(FlagError) as caught:
        parse_flags(["--kube-api-burst=0", "--secure-port=-1"])
    assert "--kube-api-burst=0" in str(caught.value)
    assert "--secure-port=-1" in str(caught.value)


def test_settings_built_in_code_are_validated_too() -> None:
    """Constructing Settings directly applies the same checks as the command line."""
    with pytest.raises(FlagError, match="--concurrent-service-syncs=0"):
        Settings(concurrent_service_syncs=0)
    with pytest.raises(FlagError, match="--kube-api-qps=nan"):
        dataclasses.replace(Settings(), kube_api_qps=float("nan"))
    with pytest.raises(FlagError, match="'--bogus' is not a flag accepted"):
        Settings(ignored_flags=("--bogus",))


@pytest.mark.parametrize(
    ("name", "boolean"), [pytest.param(name, boolean, id=name) for name, boolean in IGNORED.items()]
)
def test_compatibility_flags_are_accepted_and_recorded(name: str, boolean: bool) -> None:
    """Each upstream flag we do not implement parses as in Go and is listed in ignored_flags."""
    if boolean:
        argv = [f"--{name}", "--cluster-name=c"]
    else:
        argv = [f"--{name}", IGNORED_VALUES.get(name, "x"), "--cluster-name=c"]
    settings = parse_flags(argv)
    assert settings.ignored_flags == (f"--{name}",)
    assert settings.cluster_name == "c"


def test_ignored_flags_are_recorded_once_in_order() -> None:
    """Repeated compatibility flags appear once each, in the order first given."""
    argv = ["--profiling=false", "--vmodule=x=2", "--profiling", "--feature-gates=A=true"]
    settings = parse_flags(argv)
    assert settings.ignored_flags == ("--profiling", "--vmodule", "--feature-gates")


@pytest.mark.parametrize(
    ("argv", "help_", "version"),
    [
        pytest.param([], False, False, id="none"),
        pytest.param(["--help"], True, False, id="help"),
        pytest.param(["-h"], True, False, id="h"),
        pytest.param(["--kubeconfig=x", "-h"], True, False, id="h-after-flags"),
        pytest.param(["--help=false"], False, False, id="help-false"),
        pytest.param(["-h=true"], True, False, id="h-true"),
        pytest.param(["-help"], False, False, id="single-dash-help"),
        pytest.param(["--h"], False, False, id="double-dash-h"),
        pytest.param(["--kubeconfig", "-h"], False, False, id="h-as-value"),
        pytest.param(["--", "--help"], False, False, id="after-double-dash"),
        pytest.param(["--version"], False, True, id="version"),
        pytest.param(["--version=raw"], False, True, id="version-raw"),
        pytest.param(["--version=false"], False, False, id="version-false"),
        pytest.param(["--foo", "--version"], False, True, id="version-after-unknown"),
    ],
)
def test_help_and_version_are_detected_before_parsing(
    argv: list[str], help_: bool, version: bool
) -> None:
    """wants_help and wants_version find the cli's own flags the way pflag would."""
    assert wants_help(argv) is help_
    assert wants_version(argv) is version


@pytest.mark.parametrize(
    ("controllers", "disabled_by_default", "enabled"),
    [
        pytest.param(("*",), (), KNOWN, id="star"),
        pytest.param(("*", "-route"), (), KNOWN[:3], id="star-minus-route"),
        pytest.param(("*", "-node-route-controller"), (), KNOWN[:3], id="star-minus-canonical"),
        pytest.param(("service",), (), ["service-lb-controller"], id="only-one"),
        pytest.param((), (), [], id="none"),
        pytest.param(("*",), ("node-route-controller",), KNOWN[:3], id="off-by-default"),
        pytest.param(("*", "route"), ("node-route-controller",), KNOWN, id="off-by-default-named"),
        pytest.param(("-route", "route", "*"), (), KNOWN[:3], id="first-match-off"),
        pytest.param(("route", "-route"), (), ["node-route-controller"], id="first-match-on"),
        pytest.param(("-service",), (), [], id="minus-without-star"),
    ],
)
def test_controllers_follow_upstream_semantics(
    controllers: tuple[str, ...], disabled_by_default: tuple[str, ...], enabled: list[str]
) -> None:
    """The first matching token decides; otherwise `*` enables all not disabled by default."""
    settings = Settings(controllers=controllers)
    assert settings.enabled_controllers(KNOWN, ALIASES, disabled_by_default) == enabled


def test_parsed_controllers_need_no_aliases_later() -> None:
    """Aliases rewritten at parse time select the same controllers without the alias table."""
    settings = parse_flags(["--controllers=*,-route"], controller_aliases=ALIASES)
    assert settings.enabled_controllers(KNOWN) == KNOWN[:3]


def test_unknown_controller_lists_the_known_ones() -> None:
    """A token naming no controller is a FlagError naming --controllers, the nearest name
    and the known names."""
    settings = Settings(controllers=("*", "-routes"))
    with pytest.raises(FlagError) as caught:
        settings.enabled_controllers(KNOWN, ALIASES)
    message = str(caught.value)
    assert message.startswith(
        "--controllers=*,-routes: unknown controller 'routes' (did you mean 'route'?)"
    )
    assert all(name in message for name in KNOWN)


@pytest.mark.parametrize(
    ("argv", "extra", "message"),
    [
        pytest.param(
            ["--controllers=*,-routes"],
            (),
            "--controllers=*,-routes: unknown controller 'routes' (did you mean 'route'?)",
            id="near-an-alias",
        ),
        pytest.param(
            ["--controllers=cloud-node-controler"],
            (),
            "unknown controller 'cloud-node-controler' (did you mean 'cloud-node-controller'?)",
            id="near-a-name",
        ),
        pytest.param(
            ["--controllers=*,name-zone-controler"],
            ("name-zone-controller",),
            "(did you mean 'name-zone-controller'?)",
            id="near-an-extra-controller",
        ),
        pytest.param(
            ["--controllers=bogus"], (), "unknown controller 'bogus'; known", id="nothing-near"
        ),
    ],
)
def test_parse_flags_refuses_unknown_controllers(
    argv: list[str], extra: tuple[str, ...], message: str
) -> None:
    """parse_flags refuses a --controllers name that is neither built in, an alias nor one
    of the extra controllers, naming the flag and the nearest known name."""
    with pytest.raises(FlagError) as caught:
        parse_flags(argv, controllers=extra)
    assert message in str(caught.value)


def test_parse_flags_knows_extra_controllers_by_class_or_name() -> None:
    """Extra controllers given as classes or names may be named; None defers the check."""

    class NameZone:
        name = "name-zone-controller"

    for extra in ([NameZone], ["name-zone-controller"], None):
        settings = parse_flags(["--controllers=*,-name-zone-controller,-route"], controllers=extra)
        assert settings.controllers == ("*", "-name-zone-controller", "-node-route-controller")


def test_builtin_controller_names_match_the_builtin_controllers() -> None:
    """The names parse_flags knows without importing the controllers are theirs, in order."""
    from trio_ccm.actors.builtin import BUILTIN_CONTROLLERS
    from trio_ccm.kube.wellknown import BUILTIN_CONTROLLER_NAMES

    assert [c.name for c in BUILTIN_CONTROLLERS] == list(BUILTIN_CONTROLLER_NAMES)


@pytest.mark.parametrize(
    ("master", "shown"),
    [
        pytest.param("", "", id="empty"),
        pytest.param("https://10.0.0.1:6443", "https://10.0.0.1:6443", id="no-userinfo"),
        pytest.param(
            "https://admin:s3cret@10.0.0.1:6443/api?x=y@z",
            "https://REDACTED@10.0.0.1:6443/api?x=y@z",
            id="user-password",
        ),
        pytest.param("http://token@host", "http://REDACTED@host", id="user-only"),
        pytest.param("admin:s3cret@host:6443", "REDACTED@host:6443", id="no-scheme"),
    ],
)
def test_configz_redacts_credentials_in_the_master_url(master: str, shown: str) -> None:
    """/configz shows the master URL with any userinfo replaced by REDACTED."""
    document = Settings(master=master).configz()
    settings = document["settings"]
    assert isinstance(settings, dict)
    assert settings["master"] == shown


def test_configz_is_json_with_every_setting() -> None:
    """/configz is a JSON document of kind CloudControllerManagerConfiguration with every field."""
    settings = parse_flags(
        ["--cloud-api-rate=routes=1:2", "--profiling", "--controllers=*,-route"],
        controller_aliases=ALIASES,
    )
    document = json.loads(json.dumps(settings.configz()))
    assert document["kind"] == "CloudControllerManagerConfiguration"
    assert document["apiVersion"] == "cloudcontrollermanager.config.k8s.io/v1alpha1"
    assert set(document["settings"]) == {f.name for f in dataclasses.fields(Settings)}
    assert document["settings"]["cloud_rates"] == [{"family": "routes", "qps": 1.0, "burst": 2}]
    assert document["settings"]["controllers"] == ["*", "-node-route-controller"]
    assert document["settings"]["ignored_flags"] == ["--profiling"]


@pytest.mark.parametrize(
    ("settings", "flags"),
    [
        pytest.param(Settings(), [], id="defaults"),
        pytest.param(
            Settings(leader_elect=False, verbosity=2),
            ["--leader-elect=false", "--v=2"],
            id="bool-and-v",
        ),
        pytest.param(
            Settings(min_resync_period_s=5400.0, cloud_batch_window_s=0.0005),
            ["--min-resync-period=1h30m0s", "--cloud-batch-window=500us"],
            id="durations",
        ),
        pytest.param(Settings(controllers=()), ["--controllers="], id="no-controllers"),
        pytest.param(
            Settings(ignored_flags=("--profiling", "--node-sync-period")),
            ["--profiling=true", "--node-sync-period=0s"],
            id="ignored",
        ),
    ],
)
def test_to_flags_writes_only_what_differs(settings: Settings, flags: list[str]) -> None:
    """to_flags lists the non-default settings as --flag=value."""
    assert to_flags(settings) == flags


def _seconds(low_ns: int, high_ns: int) -> st.SearchStrategy[float]:
    return st.integers(low_ns, high_ns).map(lambda ns: ns / 1e9)


@st.composite
def _settings(draw: st.DrawFn) -> Settings:
    text = st.text(st.characters(exclude_categories=["Cs"]), max_size=20)
    name = st.from_regex(r"[a-z0-9][a-z0-9-]{0,15}", fullmatch=True)
    leader_elect = draw(st.booleans())
    if leader_elect:
        retry = draw(st.integers(1, 10**11))
        renew = draw(st.integers(retry * 6 // 5 + 2, 2 * 10**11))
        lease = draw(st.integers(renew + 1, 3 * 10**11))
        lease_s, renew_s, retry_s = lease / 1e9, renew / 1e9, retry / 1e9
        lock = "leases"
    else:
        lease_s, renew_s, retry_s = (draw(_seconds(0, 10**15)) for _ in range(3))
        lock = draw(text)
    with_cert = draw(st.booleans())
    families = draw(st.lists(st.sampled_from(CLOUD_RATE_FAMILIES), unique=True))
    positive = st.floats(min_value=0, max_value=10_000, exclude_min=True)
    cluster_cidr = draw(st.sampled_from(["", "10.244.0.0/16", "10.0.0.0/8,fd00::/48"]))
    values = {
        "cloud_provider": draw(text),
        "cloud_config": draw(text),
        "kubeconfig": draw(text),
        "master": draw(text),
        "kube_api_qps": draw(positive),
        "kube_api_burst": draw(st.integers(1, 10**5)),
        "controllers": tuple(
            draw(st.lists(st.one_of(st.just("*"), name, name.map(lambda n: "-" + n))))
        ),
        "leader_elect": leader_elect,
        "leader_elect_lease_duration_s": lease_s,
        "leader_elect_renew_deadline_s": renew_s,
        "leader_elect_retry_period_s": retry_s,
        "leader_elect_resource_lock": lock,
        "leader_elect_resource_name": draw(text),
        "leader_elect_resource_namespace": draw(text),
        "exit_on_lost_lease": draw(st.booleans()),
        "cluster_name": draw(text),
        "cluster_cidr": cluster_cidr,
        # --allocate-node-cidrs needs a --cluster-cidr.
        "allocate_node_cidrs": bool(cluster_cidr) and draw(st.booleans()),
        "cidr_allocator_type": "RangeAllocator",
        "node_cidr_mask_size": 0,
        "node_cidr_mask_size_ipv4": draw(st.sampled_from([0, 16, 24])),
        "node_cidr_mask_size_ipv6": draw(st.sampled_from([0, 56, 64])),
        "service_cluster_ip_range": draw(
            st.sampled_from(["", "10.96.0.0/12", "10.96.0.0/12,fd01::/108"])
        ),
        "configure_cloud_routes": draw(st.booleans()),
        "route_reconciliation_period_s": draw(_seconds(1, DAY_NS)),
        "node_monitor_period_s": draw(_seconds(1, DAY_NS)),
        "concurrent_node_syncs": draw(st.integers(1, 1000)),
        "concurrent_node_status_updates": draw(st.integers(0, 1000)),
        "node_status_update_frequency_s": draw(_seconds(1, DAY_NS)),
        "concurrent_service_syncs": draw(st.integers(1, 1000)),
        "min_resync_period_s": draw(_seconds(10**9, 7 * DAY_NS)),
        "controller_start_interval_s": draw(_seconds(0, 3600 * 10**9)),
        "secure_port": draw(st.integers(0, 65535)),
        "bind_address": str(draw(st.ip_addresses())),
        "cert_dir": draw(text),
        "tls_cert_file": "c.pem" if with_cert else "",
        "tls_private_key_file": "k.pem" if with_cert else "",
        "plain_http": False if with_cert else draw(st.booleans()),
        "verbosity": draw(st.integers(0, 10)),
        "logging_format": draw(st.sampled_from(["", "text", "json"])),
        "cloud_rates": tuple(
            (family, draw(positive), draw(st.integers(1, 10**5))) for family in families
        ),
        "cloud_batch_window_s": draw(_seconds(0, 5 * 10**9)),
        "cloud_batch_size": draw(st.integers(1, 10**4)),
        "load_balancer_sweep_period_s": draw(_seconds(1, DAY_NS)),
        "delete_leaked_load_balancers": draw(st.booleans()),
        "leaked_load_balancer_grace_s": draw(_seconds(0, 7 * DAY_NS)),
        "ignored_flags": tuple(
            f"--{flag}" for flag in draw(st.lists(st.sampled_from(sorted(IGNORED)), unique=True))
        ),
    }
    assert set(values) == {field.name for field in dataclasses.fields(Settings)}
    return Settings(**values)  # type: ignore[arg-type]  # values drawn per field above


@given(_settings())
def test_to_flags_round_trips(settings: Settings) -> None:
    """Parsing what to_flags writes gives back the same settings, for any valid settings."""
    # Names unchecked and not rewritten: the strategy's names may be anything, even "route".
    assert parse_flags(to_flags(settings), controllers=None, controller_aliases={}) == settings


def _flag_names(text: str) -> set[str]:
    """The `--name` flags mentioned in text, without the placeholder `--flag`."""
    return set(re.findall(r"(?<![\w-])--[a-z0-9][a-z0-9-]*", text)) - {"--flag"}


def _usage_entries(text: str) -> dict[str, str]:
    """Flag -> its --help entry (the flag's line joined with its continuation lines)."""
    entries: dict[str, str] = {}
    flag = ""
    for line in text.splitlines():
        head = re.match(r" {2}(?:-[a-z], | {4})(--[a-z0-9-]+)", line)
        if head:
            flag = head.group(1)
            entries[flag] = line
        elif flag and line.startswith(" " * 20):
            entries[flag] += " " + line.strip()
        else:
            flag = ""
    return entries


def test_usage_lists_exactly_the_flags_we_accept() -> None:
    """--help lists every effective flag with its default, then the compatibility flags."""
    text = usage()
    assert _flag_names(text) == {*EFFECTIVE, *(f"--{n}" for n in IGNORED), "--help", "--version"}
    entries = _usage_entries(text)
    assert sorted(entries) == sorted([*EFFECTIVE, "--help", "--version"])
    assert all("(default" in entries[flag] for flag in EFFECTIVE)


def _error(argv: Sequence[str]) -> str:
    """parse_flags' error message for argv, or "" when it parses."""
    try:
        parse_flags(argv)
    except FlagError as exc:
        return str(exc)
    return ""


def test_every_listed_flag_parses() -> None:
    """Each flag --help lists is known to parse_flags (no 'unknown flag' error)."""
    for flag in _flag_names(usage()) - {"--help", "--version"}:
        assert "unknown flag" not in _error([flag, "1s"]), flag


def test_operations_doc_covers_every_flag() -> None:
    """docs/operations.md mentions every flag that --help lists."""
    missing = _flag_names(usage()) - _flag_names(OPERATIONS_MD.read_text())
    assert not missing


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--cluster-name=c", "--controllers=*"], id="plain"),
        pytest.param(["--controllers=*,-route", "--leader-elect=false"], id="alias"),
    ],
)
def test_parse_is_pure(argv: Sequence[str]) -> None:
    """Parsing the same argv twice gives equal settings and does not change argv."""
    before = list(argv)
    assert parse_flags(argv, controller_aliases=ALIASES) == parse_flags(
        argv, controller_aliases=ALIASES
    )
    assert list(argv) == before


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["--cloud-batch-window=1000h"],
            "--cloud-batch-window=1000h0m0s: must be from 0s to 5s",
            id="batch-window-hours",
        ),
        pytest.param(
            ["--concurrent-node-syncs=100000000000000000000"],
            "--concurrent-node-syncs=100000000000000000000: must be 1 to 10000",
            id="node-syncs-huge",
        ),
        pytest.param(
            ["--kube-api-qps=1e9"],
            "--kube-api-qps=1000000000.0: must be more than 0 and at most 10000",
            id="qps-huge",
        ),
        pytest.param(
            ["--node-monitor-period=1000h"],
            "--node-monitor-period=1000h0m0s: must be more than 0s and at most 24h0m0s",
            id="monitor-period-hours",
        ),
        pytest.param(
            ["--min-resync-period=0s"],
            "--min-resync-period=0s: must be from 1s to 168h0m0s",
            id="resync-zero",
        ),
        pytest.param(
            ["--cloud-api-rate=routes=1e6:1"],
            "QPS must be more than 0 and at most 10000",
            id="rate-qps-huge",
        ),
        pytest.param(
            ["--leader-elect-lease-duration=2h", "--leader-elect-renew-deadline=90m"],
            "--leader-elect-lease-duration=2h0m0s: must be more than 0s and at most 1h0m0s",
            id="lease-hours",
        ),
    ],
)
def test_every_number_and_duration_has_a_sane_range(argv: list[str], message: str) -> None:
    """Values that parse but make no sense are refused at parse time, naming the flag,
    the value as given and the range."""
    with pytest.raises(FlagError) as caught:
        parse_flags(argv)
    assert message in str(caught.value)


@pytest.mark.parametrize(
    ("argv", "hint"),
    [
        pytest.param(["--kubeconfg=x"], "did you mean --kubeconfig?", id="typo"),
        pytest.param(
            ["--leader-elect-lease=4s"], "did you mean --leader-elect-lease-duration?", id="prefix"
        ),
        pytest.param(["--frobnicate=1"], "", id="nothing-close"),
    ],
)
def test_an_unknown_flag_suggests_the_nearest_known_one(argv: list[str], hint: str) -> None:
    """An unknown flag is refused as Go refuses it, with a "did you mean" when one is close."""
    with pytest.raises(FlagError) as caught:
        parse_flags(argv)
    text = str(caught.value)
    assert text.startswith(f"unknown flag: {argv[0].split('=')[0]}")
    if hint:
        assert hint in text
    else:
        assert "did you mean" not in text
