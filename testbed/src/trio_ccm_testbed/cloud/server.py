"""The simulated cloud: its state, its Python API and the one HTTP handler both front doors use.

Everything is deterministic: identifiers and fault dice come from `random.Random` streams
seeded from `seed`, and time is Trio's clock (`trio.current_time()`), so a test under
`MockClock` sees exact times. Outside a Trio run (a synchronous fixture setting up the
cloud) the clock reads minus infinity: changes made there are visible at once.
"""

from __future__ import annotations

import ipaddress
import math
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, cast

import msgspec
import trio

from trio_ccm_testbed._http import Request, Response
from trio_ccm_testbed.cloud import bodies
from trio_ccm_testbed.cloud.errors import SimApiError, bad_request, conflict, not_found
from trio_ccm_testbed.cloud.faults import METHOD_FAMILIES, Faults
from trio_ccm_testbed.cloud.model import (
    JSON,
    Call,
    CloudRoute,
    Instance,
    LoadBalancer,
    LoadBalancerPort,
)
from trio_ccm_testbed.cloud.transport import SimCloudTransport

if TYPE_CHECKING:
    import httpx


class DataPlaneView(Protocol):
    """What the admin API shows of a data plane serving this cloud's load balancers."""

    def to_json(self) -> dict[str, JSON]: ...

    def changed(self) -> None:
        """A load balancer was created, changed or deleted: look again soon."""


__all__ = ["SimCloud", "error_response", "json_response"]

JSON_TYPE = "application/json"
REPLICA_HEADER = "x-sim-replica"
INTERNAL_NETWORK = ipaddress.ip_network("10.0.0.0/8")
INGRESS_NETWORK = ipaddress.ip_network("203.0.113.0/24")
LB_PROTOCOLS = ("TCP", "UDP")
MAX_SOURCE_RANGES = 20
MAX_DESCRIPTION = 255
MAX_LIST_LIMIT = 1000
"""The largest page `ListLoadBalancers` answers (`limit`)."""
_FIRST_INTERNAL_OFFSET = 10  # 10.0.0.10 is the first address handed out


def _trio_now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:  # not in a Trio run: set-up before the test starts
        return -math.inf


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def json_response(
    status: int, body: Mapping[str, JSON], *, retry_after_s: float | None = None
) -> Response:
    headers = [("content-type", JSON_TYPE)]
    if retry_after_s is not None:
        headers.append(("retry-after", repr(float(retry_after_s))))
    return Response(status, msgspec.json.encode(body), headers)


def error_response(exc: SimApiError) -> Response:
    return json_response(exc.status, exc.to_json(), retry_after_s=exc.retry_after_s)


@dataclass(frozen=True)
class _Endpoint:
    """A routed API call: its method name and target for the call log, and its work."""

    method: str
    target: str
    run: Callable[[float], Response]


def _sorted_unique(names: list[str]) -> tuple[str, ...]:
    """`names` sorted, each once; a list already sorted and without repeats (as a CCM's
    node set is) is taken as it is: sorting 100,000 names from a set cost 0.2 s per call,
    and checking them pairwise in Python 19 ms, where a sort of sorted names is 1 ms and
    a set of them 10 ms."""
    if sorted(names) == names and len(set(names)) == len(names):
        return tuple(names)
    return tuple(sorted(set(names)))


class SimCloud:
    """A simulated cloud with instances, load balancers and routes, faults and a call log.

    Front doors: `transport()` (an httpx transport, no sockets, MockClock-safe) and
    `serve_sim_cloud` (real HTTP on loopback). The Python methods change the state directly
    (no faults, no call log) and raise `SimApiError` as the HTTP API would answer.
    """

    def __init__(
        self,
        *,
        seed: int = 0,
        region: str = "sim-region-1",
        terminated_retention_s: float = 0.0,
        lb_provisioning_s: float = 0.0,
        lb_hostnames: bool = False,
        lb_network: str = str(INGRESS_NETWORK),
        internal_network: str = str(INTERNAL_NETWORK),
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.seed = seed
        self.region = region
        self.default_zone = f"{region}a"
        self.terminated_retention_s = terminated_retention_s
        """How long a terminated instance stays listed (state `terminated`) before it is gone."""
        self.lb_provisioning_s = lb_provisioning_s
        """How long a new load balancer is `provisioning` (no ingress; PUT answers 202)."""
        self.lb_hostnames = lb_hostnames
        """Whether load balancers get a DNS name besides their IP."""
        self.lb_network = ipaddress.ip_network(lb_network)
        """The IPv4 pool ingress addresses come from (203.0.113.0/24: 254 load balancers)."""
        self.internal_network = ipaddress.ip_network(internal_network)
        """The network instances' internal IPs come from, from its 10th address on (a
        loopback one, e.g. 127.240.1.0/24, lets the testbed's Nodes carry traffic)."""
        self.dataplane: DataPlaneView | None = None
        """The load balancers' data plane when one serves them (`GET /_sim/dataplane`)."""
        self.faults = Faults(random.Random(f"{seed}/faults"))  # noqa: S311 - dice, not secrets
        self.calls: list[Call] = []
        self._wall_clock = wall_clock
        self._id_rng = random.Random(f"{seed}/ids")  # noqa: S311 - names, not secrets
        self._used_ids: set[str] = set()
        self._instances: dict[str, Instance] = {}
        # Each instance's place in launch order (`_instances` keeps that order), and the
        # change log `touched_since` reads: each id once, at its last change's count, in
        # that order (a dict moved to its end on each change).
        self._launched: dict[str, int] = {}
        self._touches = 0
        self._touched: dict[str, int] = {}
        # Indexes over `_instances`, so that launching one of 100,000 instances stays cheap:
        # the id of the instance not terminated that holds each name, the ids of terminated
        # instances still listed, and how many instances hold each internal IP.
        self._names: dict[str, str] = {}
        self._terminated: set[str] = set()
        self._internal_in_use: Counter[str] = Counter()
        self._next_internal = _FIRST_INTERNAL_OFFSET
        # Every change of an instance (launch, addresses, state) takes the next revision,
        # and so does its becoming visible: `GET /v1/instance-changes?since=R` lists the
        # instances whose revision is above R. `_unseen`: ids of instances not yet visible.
        self._revision = 0
        self._unseen: set[str] = set()
        self._load_balancers: dict[str, LoadBalancer] = {}
        self._routes: dict[tuple[str, str], CloudRoute] = {}
        # The last backends body and the node set it named: a node-set pass sends the same
        # bytes to every load balancer (250 of them, 101,000 names each at 100,000 Nodes:
        # 16 ms to decode and 10 ms to check, per call, in the process of the kubelets).
        self._last_backends: tuple[bytes, tuple[str, ...]] = (b"", ())

    # -- front doors ------------------------------------------------------------------
    def transport(self) -> httpx.AsyncBaseTransport:
        """An httpx transport reaching this cloud without sockets (works under MockClock)."""
        return SimCloudTransport(self.handle)

    # -- instances: Python API --------------------------------------------------------
    def add_instance(
        self,
        name: str,
        *,
        instance_type: str = "sim.small",
        zone: str | None = None,
        internal_ips: Iterable[str] | None = None,
        external_ips: Iterable[str] | None = None,
        hostname: str | None = None,
        state: str = "running",
    ) -> Instance:
        """Launch an instance; internal IPs default to the next free 10.x address.

        It is invisible to API lookups for `faults.consistency_delay_s`. A name must be
        unique among instances not terminated (Node names are looked up by it).
        """
        now = _trio_now()
        self._purge(now)
        if not name:
            raise bad_request("an instance needs a name")
        if state not in ("running", "stopped"):
            raise bad_request(f"instance {name}: state {state!r} must be running or stopped")
        taken = self._by_name(name)
        if taken is not None:
            raise conflict(f"instance name {name} is taken by {taken.id} ({taken.state})")
        internal = self._addresses(internal_ips, f"instance {name}: internal IP")
        if internal_ips is None:
            internal = (self._allocate_internal_ip(),)
        instance = Instance(
            id=self._new_id(),
            name=name,
            instance_type=instance_type,
            zone=zone or self.default_zone,
            region=self.region,
            internal_ips=internal,
            external_ips=self._addresses(external_ips, f"instance {name}: external IP"),
            hostname=name if hostname is None else hostname,
            state=state,
            created_at=now,
            visible_at=now + self.faults.consistency_delay_s,
            revision=self._next_revision(),
        )
        self._keep(instance)
        if instance.visible_at > now:
            self._unseen.add(instance.id)
        self._names[name] = instance.id
        self._internal_in_use.update(internal)
        return instance

    def instance(self, instance_id: str) -> Instance:
        """The instance (visible or not yet); 404 SimApiError when there is none."""
        self._purge(_trio_now())
        found = self._instances.get(instance_id)
        if found is None:
            raise not_found(f"instance {instance_id}")
        return found

    def instances(self) -> list[Instance]:
        """Every instance not gone (including ones not yet visible), oldest first."""
        self._purge(_trio_now())
        return list(self._instances.values())

    def stop(self, instance_id: str) -> Instance:
        """Stop a running instance (stopping a stopped one changes nothing)."""
        return self._set_state(instance_id, "stopped")

    def start(self, instance_id: str) -> Instance:
        """Start a stopped instance (starting a running one changes nothing)."""
        return self._set_state(instance_id, "running")

    def terminate(self, instance_id: str) -> Instance:
        """Terminate an instance: listed as terminated for `terminated_retention_s`, then gone."""
        instance = self.instance(instance_id)
        if instance.state == "terminated":
            return instance
        now = _trio_now()
        updated = replace(
            instance, state="terminated", terminated_at=now, revision=self._next_revision()
        )
        self._keep(updated)
        self._terminated.add(instance_id)
        if self._names.get(instance.name) == instance_id:
            del self._names[instance.name]
        self._purge(now)
        return updated

    def set_addresses(
        self,
        instance_id: str,
        *,
        internal: Iterable[str] | None = None,
        external: Iterable[str] | None = None,
    ) -> Instance:
        """Replace an instance's internal and/or external IPs (None keeps them)."""
        instance = self.instance(instance_id)
        updated = replace(
            instance,
            internal_ips=instance.internal_ips
            if internal is None
            else self._addresses(internal, f"{instance_id}: internal IP"),
            external_ips=instance.external_ips
            if external is None
            else self._addresses(external, f"{instance_id}: external IP"),
            revision=self._next_revision(),
        )
        self._keep(updated)
        self._internal_in_use.subtract(instance.internal_ips)
        self._internal_in_use.update(updated.internal_ips)
        return updated

    def _set_state(self, instance_id: str, state: str) -> Instance:
        instance = self.instance(instance_id)
        if instance.state == "terminated":
            raise conflict(f"instance {instance_id} is terminated")
        if instance.state == state:
            return instance
        updated = replace(instance, state=state, revision=self._next_revision())
        self._keep(updated)
        return updated

    def _keep(self, instance: Instance) -> None:
        """Store a launched or changed instance (in launch order) and note the change."""
        if instance.id not in self._instances:
            self._launched[instance.id] = self._revision  # taken by each launch
        self._instances[instance.id] = instance
        self._touch(instance.id)

    def _touch(self, instance_id: str) -> None:
        self._touches += 1
        self._touched.pop(instance_id, None)
        self._touched[instance_id] = self._touches

    @property
    def touches(self) -> int:
        """How many instance changes this cloud has seen (a launch, a state or address
        change, becoming visible, being forgotten after termination): a cursor for
        `touched_since`."""
        self._purge(_trio_now())
        return self._touches

    def touched_since(self, cursor: int) -> tuple[int, dict[str, Instance | None]]:
        """The instances changed after `cursor` (an earlier `touches`), each once, in the
        order of their last change, as they are now (None: forgotten), and the cursor to
        ask from next time. A follower of 100,000 instances reads what changed instead of
        every instance (the testbed's kubelets poll this every second)."""
        self._purge(_trio_now())
        if cursor > self._touches:
            raise ValueError(f"cursor {cursor} is ahead of this cloud's {self._touches} changes")
        changed: list[str] = []
        for instance_id, seen in reversed(self._touched.items()):
            if seen <= cursor:
                break
            changed.append(instance_id)
        return self._touches, {i: self._instances.get(i) for i in reversed(changed)}

    def _next_revision(self) -> int:
        self._revision += 1
        return self._revision

    @property
    def revision(self) -> int:
        """The cloud's revision: the last one an instance change took."""
        self._purge(_trio_now())
        return self._revision

    def _new_id(self) -> str:
        while True:
            candidate = f"i-{self._id_rng.getrandbits(32):08x}"
            if candidate not in self._used_ids:
                self._used_ids.add(candidate)
                return candidate

    def _allocate_internal_ip(self) -> str:
        while True:
            if self._next_internal >= self.internal_network.num_addresses - 1:
                raise SimApiError(
                    503, f"the internal network {self.internal_network} has no free address"
                )
            address = str(self.internal_network[self._next_internal])
            self._next_internal += 1
            if self._internal_in_use[address] <= 0:
                return address

    @staticmethod
    def _addresses(values: Iterable[str] | None, what: str) -> tuple[str, ...]:
        if values is None:
            return ()
        if isinstance(values, str):
            raise bad_request(f"{what}s must be a list, not the string {values!r}")
        checked = []
        for value in values:
            try:
                checked.append(str(ipaddress.ip_address(value)))
            except ValueError as exc:
                raise bad_request(f"{what} {value!r} is not an IP address") from exc
        return tuple(checked)

    def _by_name(self, name: str) -> Instance | None:
        found = self._names.get(name)
        return None if found is None else self._instances[found]

    def _purge(self, now: float) -> None:
        """Apply held requests now due; stamp instances that became visible with a new
        revision; forget terminated instances whose retention is over."""
        self.faults.land(now)
        if self._unseen:
            for instance_id in sorted(self._unseen):
                instance = self._instances.get(instance_id)
                if instance is None or instance.visible_at <= now:
                    self._unseen.discard(instance_id)
                if instance is not None and instance.visible_at <= now:
                    self._keep(replace(instance, revision=self._next_revision()))
        gone = [
            instance_id
            for instance_id in self._terminated
            if now
            >= (self._instances[instance_id].terminated_at or 0.0) + self.terminated_retention_s
        ]
        for instance_id in gone:
            self._terminated.discard(instance_id)
            self._internal_in_use.subtract(self._instances.pop(instance_id).internal_ips)
            del self._launched[instance_id]
            self._touch(instance_id)

    def _visible(self, now: float) -> list[Instance]:
        self._purge(now)
        return [i for i in self._instances.values() if i.visible_at <= now]

    # -- load balancers and routes: Python API ----------------------------------------
    def load_balancers(self) -> list[LoadBalancer]:
        """Every load balancer, oldest first."""
        self.faults.land(_trio_now())
        return list(self._load_balancers.values())

    def load_balancer(self, name: str) -> LoadBalancer | None:
        self.faults.land(_trio_now())
        return self._load_balancers.get(name)

    def remove_load_balancer(self, name: str) -> None:
        """Delete a load balancer behind the provider's back (drift, an operator's mistake)."""
        self._load_balancers.pop(name, None)
        self._lb_changed()

    def _lb_changed(self) -> None:
        if self.dataplane is not None:
            self.dataplane.changed()

    def routes(self, cluster: str | None = None) -> list[CloudRoute]:
        """The routes (of `cluster`, or all), with `blackhole` as of now."""
        self._purge(_trio_now())
        return [
            self._with_blackhole(route)
            for (owner, _), route in self._routes.items()
            if cluster is None or owner == cluster
        ]

    def _with_blackhole(self, route: CloudRoute) -> CloudRoute:
        return replace(route, blackhole=self._by_name(route.target_node) is None)

    # -- the call log -----------------------------------------------------------------
    def calls_by(self, method: str | None = None, replica: str | None = None) -> list[Call]:
        """The calls to `method` (a method or a family) and/or by `replica`, in order."""
        return [
            call
            for call in self.calls
            if (method is None or method in (call.method, METHOD_FAMILIES.get(call.method)))
            and (replica is None or call.replica == replica)
        ]

    def clear_calls(self) -> None:
        self.calls = []

    def call_counts(self) -> Counter[str]:
        """The calls so far, by method."""
        return Counter(call.method for call in self.calls)

    def state(self) -> dict[str, JSON]:
        """Everything, as JSON: what `GET /_sim/state` answers."""
        now = _trio_now()
        self._purge(now)
        instances: list[JSON] = [
            {
                **instance.to_json(),
                "visibleAt": _finite(instance.visible_at),
                "terminatedAt": _finite(instance.terminated_at),
            }
            for instance in self._instances.values()
        ]
        return {
            "time": _finite(now),
            "region": self.region,
            "instances": instances,
            "loadBalancers": [lb.to_json(now) for lb in self._load_balancers.values()],
            "routes": [route.to_json() for route in self.routes()],
            "faults": self.faults.to_json(),
            "settings": self._settings(),
            "calls": len(self.calls),
        }

    def _settings(self) -> dict[str, JSON]:
        return {
            "consistencyDelaySeconds": self.faults.consistency_delay_s,
            "lbProvisioningSeconds": self.lb_provisioning_s,
            "terminatedRetentionSeconds": self.terminated_retention_s,
            "lbHostnames": self.lb_hostnames,
            "holdSeconds": self.faults.hold_s,
        }

    # -- the HTTP core ----------------------------------------------------------------
    async def handle(self, request: Request) -> Response:
        """Answer one HTTP request: the API under /v1/, the admin API under /_sim/."""
        if request.raw_path == "/_sim" or request.raw_path.startswith("/_sim/"):
            try:
                return self._admin(request)
            except SimApiError as exc:
                return error_response(exc)
        arrived = trio.current_time()
        # The kernel's receive time when served over a socket: a starved testbed reads a
        # request late, and the leadership referee must date it by when it left its replica.
        now_wall = self._wall_clock()
        wall = now_wall if request.received_at is None else request.received_at
        read_wall = None if request.received_at is None else now_wall
        replica = request.headers.get(REPLICA_HEADER, "")
        method, target, status = "Unknown", request.raw_path, 499  # 499: the caller went away
        try:
            try:
                endpoint = self._route(request)
                method, target = endpoint.method, endpoint.target
                delay_s = self.faults.delay_s(method)
                if delay_s > 0:
                    await trio.sleep(delay_s)
                now = trio.current_time()
                self.faults.land(now)
                self.faults.admit(method, now)
                held = self.faults.hold(method, now, endpoint.run)
                if held is None:
                    response = endpoint.run(now)
                else:  # applied at its time even if the caller is gone (faults.py)
                    await trio.sleep_until(held.due)
                    self.faults.land(trio.current_time())
                    if isinstance(held.answer, SimApiError):
                        raise held.answer
                    response = cast("Response", held.answer)
            except SimApiError as exc:
                response = error_response(exc)
            status = response.status
            return response
        finally:
            self.calls.append(Call(arrived, wall, replica, method, target, status, read_wall))

    def _route(self, request: Request) -> _Endpoint:
        parts = request.segments()
        if parts[:1] != ["v1"]:
            raise not_found(f"path {request.raw_path}")
        verb = request.method

        def allow(*verbs: str) -> None:
            if verb not in verbs:
                raise SimApiError(
                    405, f"{verb} {request.raw_path}: allowed methods are {', '.join(verbs)}"
                )

        match parts[1:]:
            case ["health"]:
                allow("GET")
                return _Endpoint("Health", "", self._health)
            case ["instances"]:
                allow("GET")
                target = "&".join(
                    f"{key}={','.join(values)}" for key, values in sorted(request.query.items())
                )
                return _Endpoint("ListInstances", target, lambda now: self._list(request, now))
            case ["instance-changes"]:
                allow("GET")
                since = request.arg("since")
                return _Endpoint(
                    "ListInstanceChanges", since, lambda now: self._changes(since, now)
                )
            case ["instances", instance_id]:
                allow("GET")
                return _Endpoint(
                    "GetInstance", instance_id, lambda now: self._get_instance(instance_id, now)
                )
            case ["clusters", cluster, "loadbalancers"]:
                allow("GET")
                return _Endpoint(
                    "ListLoadBalancers",
                    cluster,
                    lambda now: self._list_lbs(
                        cluster, now, request.arg("limit"), request.arg("marker")
                    ),
                )
            case ["clusters", cluster, "loadbalancers", name]:
                allow("GET", "PUT", "DELETE")
                target = f"{cluster}/{name}"
                if verb == "GET":
                    return _Endpoint(
                        "GetLoadBalancer", target, lambda now: self._get_lb(cluster, name, now)
                    )
                if verb == "PUT":
                    return _Endpoint(
                        "PutLoadBalancer",
                        target,
                        lambda now: self._put_lb(cluster, name, request.body, now),
                    )
                return _Endpoint(
                    "DeleteLoadBalancer", target, lambda now: self._delete_lb(cluster, name)
                )
            case ["clusters", cluster, "loadbalancers", name, "backends"]:
                allow("PUT")
                return _Endpoint(
                    "SetLoadBalancerBackends",
                    f"{cluster}/{name}",
                    lambda now: self._set_backends(cluster, name, request.body, now),
                )
            case ["clusters", cluster, "routes"]:
                allow("GET", "POST", "DELETE")
                if verb == "GET":
                    return _Endpoint("ListRoutes", cluster, lambda now: self._list_routes(cluster))
                if verb == "POST":
                    return _Endpoint(
                        "CreateRoute",
                        cluster,
                        lambda now: self._create_route(cluster, request.body),
                    )
                cidr = request.arg("destinationCIDR")
                return _Endpoint(
                    "DeleteRoute",
                    f"{cluster}/{cidr}",
                    lambda now: self._delete_route_by_cidr(cluster, cidr),
                )
            case ["clusters", cluster, "routes", name]:
                allow("GET", "DELETE")
                target = f"{cluster}/{name}"
                if verb == "GET":
                    return _Endpoint("GetRoute", target, lambda now: self._get_route(cluster, name))
                return _Endpoint(
                    "DeleteRoute", target, lambda now: self._delete_route(cluster, name)
                )
        raise not_found(f"path {request.raw_path}")

    # -- API handlers -----------------------------------------------------------------
    def _health(self, now: float) -> Response:
        return json_response(200, {"status": "ok", "region": self.region})

    def _list(self, request: Request, now: float) -> Response:
        names = set(request.list_arg("names") + request.list_arg("name"))
        ids = set(request.list_arg("ids"))
        found: list[JSON] = [instance.to_json() for instance in self._matching(names, ids, now)]
        return json_response(200, {"instances": found})

    def _matching(self, names: set[str], ids: set[str], now: float) -> list[Instance]:
        """The visible instances named in `names` or with an id in `ids` (every visible one
        when both are empty), in launch order: from the indexes, so a bulk lookup of 1,000
        Nodes does not walk 100,000 instances."""
        if not (names or ids):
            return self._visible(now)
        self._purge(now)
        wanted = {self._names[name] for name in names if name in self._names}
        wanted.update(i for i in ids if i in self._instances)
        wanted.update(i for i in self._terminated if self._instances[i].name in names)
        return [
            instance
            for instance in map(
                self._instances.__getitem__, sorted(wanted, key=self._launched.__getitem__)
            )
            if instance.visible_at <= now
        ]

    def _changes(self, since: str, now: float) -> Response:
        """The instances changed after revision `since` (terminated ones included while they
        are listed; gone ones are not), and the cloud's revision to ask from next time.
        Without `since`, only the revision."""
        self._purge(now)
        if not since:
            return json_response(200, {"revision": self._revision, "instances": []})
        if not since.isdigit():
            raise bad_request(
                f"since={since!r} is not a revision: pass the `revision` of an earlier answer"
            )
        after = int(since)
        if after > self._revision:
            raise SimApiError(
                410,
                f"revision {after} is ahead of this cloud's {self._revision} (the cloud "
                "restarted?): list every instance, then ask from a new revision",
            )
        found: list[JSON] = [
            instance.to_json()
            for instance in self._instances.values()
            if instance.revision > after and instance.visible_at <= now
        ]
        return json_response(200, {"revision": self._revision, "instances": found})

    def _get_instance(self, instance_id: str, now: float) -> Response:
        self._purge(now)
        instance = self._instances.get(instance_id)
        if instance is None or instance.visible_at > now:
            raise not_found(f"instance {instance_id}")
        return json_response(200, instance.to_json())

    def _lb_of(self, cluster: str, name: str) -> LoadBalancer:
        found = self._load_balancers.get(name)
        if found is None or found.cluster != cluster:
            raise not_found(f"load balancer {name} of cluster {cluster}")
        return found

    def _list_lbs(self, cluster: str, now: float, limit: str = "", marker: str = "") -> Response:
        """The cluster's load balancers; a page of at most `limit` of them (by name, after
        `marker`) with `nextMarker` when more follow, as clouds page their listings (each
        load balancer carries its node names: at 100,000 Nodes, 1.5 MB apiece)."""
        mine = [lb for lb in self._load_balancers.values() if lb.cluster == cluster]
        if not limit and not marker:
            return json_response(200, {"loadBalancers": [lb.to_json(now) for lb in mine]})
        size = len(mine)
        if limit:
            if not limit.isdigit() or not 1 <= int(limit) <= MAX_LIST_LIMIT:
                raise bad_request(
                    f"limit {limit!r}: a page holds 1 to {MAX_LIST_LIMIT} load balancers"
                )
            size = int(limit)
        ordered = sorted((lb for lb in mine if lb.name > marker), key=lambda lb: lb.name)
        page = ordered[:size]
        answer: dict[str, JSON] = {"loadBalancers": [lb.to_json(now) for lb in page]}
        if len(ordered) > size:
            answer["nextMarker"] = page[-1].name
        return json_response(200, answer)

    def _get_lb(self, cluster: str, name: str, now: float) -> Response:
        return json_response(200, self._lb_of(cluster, name).to_json(now))

    def _put_lb(self, cluster: str, name: str, raw: bytes, now: float) -> Response:
        what = f"load balancer {name}"
        body = bodies.decode(raw, bodies.LoadBalancerBody, what)
        existing = self._load_balancers.get(name)
        if existing is not None and existing.cluster != cluster:
            raise conflict(f"{what} belongs to cluster {existing.cluster}, not {cluster}")
        ports = self._ports(body.ports, what)
        ranges = self._source_ranges(body.source_ranges, what)
        if len(body.description) > MAX_DESCRIPTION:
            raise bad_request(
                f"{what}: the description is {len(body.description)} characters; at most "
                f"{MAX_DESCRIPTION} are allowed"
            )
        if existing is None:
            ingress_ip = self._claim_ip(body.load_balancer_ip, name)
            created_at, ready_at = now, now + self.lb_provisioning_s
        else:
            ingress_ip = existing.ingress_ip
            if body.load_balancer_ip and body.load_balancer_ip != ingress_ip:
                ingress_ip = self._claim_ip(body.load_balancer_ip, name)
            created_at, ready_at = existing.created_at, existing.ready_at
        lb = LoadBalancer(
            name=name,
            cluster=cluster,
            service=body.service,
            ports=ports,
            nodes=_sorted_unique(body.nodes),
            ingress_ip=ingress_ip,
            hostname=f"{name}.{self.region}.lb.sim" if self.lb_hostnames else "",
            created_at=created_at,
            ready_at=ready_at,
            source_ranges=ranges,
            health_check_node_port=body.health_check_node_port,
            session_affinity=body.session_affinity,
            description=body.description,
        )
        self._load_balancers[name] = lb
        self._lb_changed()
        if now < ready_at:
            return json_response(202, lb.to_json(now), retry_after_s=ready_at - now)
        return json_response(201 if existing is None else 200, lb.to_json(now))

    @staticmethod
    def _ports(ports: list[bodies.PortBody], what: str) -> tuple[LoadBalancerPort, ...]:
        if not ports:
            raise bad_request(f"{what}: a load balancer needs at least one port")
        seen: set[int] = set()
        checked = []
        for port in ports:
            if port.protocol not in LB_PROTOCOLS:
                raise bad_request(
                    f"{what}: protocol {port.protocol!r} is not one of {', '.join(LB_PROTOCOLS)}"
                )
            if not 1 <= port.port <= 65535 or not 0 <= port.node_port <= 65535:
                raise bad_request(f"{what}: port {port.port}/{port.node_port} is out of range")
            if port.port in seen:
                raise bad_request(
                    f"{what}: port {port.port} appears twice; a listener takes one protocol "
                    "per port"
                )
            seen.add(port.port)
            checked.append(LoadBalancerPort(port.name, port.protocol, port.port, port.node_port))
        return tuple(checked)

    @staticmethod
    def _source_ranges(ranges: list[str], what: str) -> tuple[str, ...]:
        if len(ranges) > MAX_SOURCE_RANGES:
            raise bad_request(
                f"{what}: {len(ranges)} source ranges; at most {MAX_SOURCE_RANGES} are allowed"
            )
        checked = []
        for value in ranges or ["0.0.0.0/0"]:
            try:
                network = ipaddress.ip_network(value)
            except ValueError as exc:
                raise bad_request(f"{what}: source range {value!r}: {exc}") from exc
            if network.version != 4:
                raise bad_request(
                    f"{what}: source range {value} is IPv6; the load balancers are IPv4 only"
                )
            checked.append(str(network))
        return tuple(checked)

    def _claim_ip(self, requested: str, name: str) -> str:
        used = {lb.ingress_ip for lb in self._load_balancers.values() if lb.name != name}
        if not requested:
            for address in self.lb_network.hosts():
                if str(address) not in used:
                    return str(address)
            raise SimApiError(503, f"load balancer {name}: the address pool is exhausted")
        try:
            address = ipaddress.ip_address(requested)
        except ValueError as exc:
            raise bad_request(f"load balancer {name}: {requested!r} is not an IP") from exc
        if address not in self.lb_network or address in (
            self.lb_network.network_address,
            self.lb_network.broadcast_address,
        ):
            raise bad_request(
                f"load balancer {name}: {requested} is not in the pool {self.lb_network}"
            )
        if requested in used:
            raise conflict(f"load balancer {name}: {requested} is in use")
        return requested

    def _set_backends(self, cluster: str, name: str, raw: bytes, now: float) -> Response:
        lb = self._lb_of(cluster, name)
        last_raw, nodes = self._last_backends
        if raw != last_raw or not raw:  # else the same bytes as the last call: the same set
            body = bodies.decode(raw, bodies.BackendsBody, f"load balancer {name} backends")
            nodes = _sorted_unique(body.nodes)
            self._last_backends = (raw, nodes)
        lb = replace(lb, nodes=nodes)
        self._load_balancers[name] = lb
        self._lb_changed()
        # No body (as Octavia's batch member update): an answer echoing the load balancer
        # repeated every name it was sent, 100,000 of them at that size, encoded here and
        # read by the CCM, 250 times a node-set pass. GET reads the load balancer.
        return Response(204)

    def _delete_lb(self, cluster: str, name: str) -> Response:
        self._lb_of(cluster, name)
        del self._load_balancers[name]
        self._lb_changed()
        return Response(204)

    def _list_routes(self, cluster: str) -> Response:
        found: list[JSON] = [route.to_json() for route in self.routes(cluster)]
        return json_response(200, {"routes": found})

    def _route_of(self, cluster: str, name: str) -> CloudRoute:
        found = self._routes.get((cluster, name))
        if found is None:
            raise not_found(f"route {name} of cluster {cluster}")
        return found

    def _get_route(self, cluster: str, name: str) -> Response:
        self._purge(_trio_now())
        return json_response(200, self._with_blackhole(self._route_of(cluster, name)).to_json())

    def _create_route(self, cluster: str, raw: bytes) -> Response:
        body = bodies.decode(raw, bodies.RouteBody, f"route of cluster {cluster}")
        what = f"route {body.name}"
        if not body.name or not body.target_node:
            raise bad_request(f"{what}: name and targetNode are required")
        try:
            cidr = str(ipaddress.ip_network(body.destination_cidr))
        except ValueError as exc:
            raise bad_request(f"{what}: destinationCIDR {body.destination_cidr!r}: {exc}") from exc
        wanted = CloudRoute(body.name, cluster, body.target_node, cidr)
        existing = self._routes.get((cluster, body.name))
        if existing == wanted:
            return json_response(200, self._with_blackhole(wanted).to_json())
        if existing is not None:
            raise conflict(
                f"{what} exists with target {existing.target_node} "
                f"and destination {existing.destination_cidr}"
            )
        for key, route in list(self._routes.items()):
            if key[0] != cluster or route.destination_cidr != cidr:
                continue
            if not self._with_blackhole(route).blackhole:
                raise conflict(f"{what}: destination {cidr} is taken by route {route.name}")
            del self._routes[key]  # a blackholed route yields its destination
        self._routes[(cluster, body.name)] = wanted
        return json_response(201, self._with_blackhole(wanted).to_json())

    def _delete_route(self, cluster: str, name: str) -> Response:
        self._route_of(cluster, name)
        del self._routes[(cluster, name)]
        return Response(204)

    def _delete_route_by_cidr(self, cluster: str, cidr: str) -> Response:
        if not cidr:
            raise bad_request("DELETE routes: name a route or give ?destinationCIDR=")
        for (owner, name), route in self._routes.items():
            if owner == cluster and route.destination_cidr == cidr:
                del self._routes[(owner, name)]
                return Response(204)
        raise not_found(f"route to {cidr} of cluster {cluster}")

    # -- the admin API ----------------------------------------------------------------
    def _admin(self, request: Request) -> Response:
        parts = request.segments()[1:]
        verb = request.method
        match verb, parts:
            case "GET", ["state"]:
                return json_response(200, self.state())
            case "GET", ["dataplane"]:
                if self.dataplane is None:
                    raise not_found(
                        "the data plane: no load balancer carries traffic in this cloud "
                        "(the testbed serves one with a loopback --lb-network)"
                    )
                return json_response(200, self.dataplane.to_json())
            case "GET", ["instances"]:
                found: list[JSON] = [i.to_json() for i in self.instances()]
                return json_response(200, {"instances": found})
            case "POST", ["instances"]:
                body = bodies.decode(request.body, bodies.InstanceBody, "new instance")
                instance = self._add_instance(body)
                return json_response(201, instance.to_json())
            case "POST", ["instance-batches"]:
                batch = bodies.decode(request.body, bodies.InstanceBatchBody, "instance batch")
                launched: list[JSON] = [i.to_json() for i in self._launch_batch(batch.instances)]
                return json_response(201, {"instances": launched})
            case "GET", ["instances", instance_id]:
                return json_response(200, self.instance(instance_id).to_json())
            case "POST", ["instances", instance_id, ("stop" | "start" | "terminate") as action]:
                change = {"stop": self.stop, "start": self.start, "terminate": self.terminate}
                return json_response(200, change[action](instance_id).to_json())
            case "PUT", ["instances", instance_id, "addresses"]:
                addresses = bodies.decode(request.body, bodies.AddressesBody, "addresses")
                instance = self.set_addresses(
                    instance_id, internal=addresses.internal, external=addresses.external
                )
                return json_response(200, instance.to_json())
            case "GET", ["calls"]:
                calls: list[JSON] = [
                    call.to_json()
                    for call in self.calls_by(
                        request.arg("method") or None, request.arg("replica") or None
                    )
                ]
                return json_response(200, {"calls": calls})
            case "DELETE", ["calls"]:
                self.clear_calls()
                return Response(204)
            case "GET", ["faults"]:
                return json_response(200, self.faults.to_json())
            case "DELETE", ["faults"]:
                self.faults.clear()
                return Response(204)
            case "POST", ["faults", kind]:
                return json_response(201, self._add_fault(kind, request.body))
            case "DELETE", ["faults", rule_id]:
                try:
                    self.faults.remove(int(rule_id))
                except (KeyError, ValueError) as exc:
                    raise not_found(f"fault rule {rule_id}") from exc
                return Response(204)
            case "GET", ["settings"]:
                return json_response(200, self._settings())
            case "PATCH", ["settings"]:
                self._change_settings(request.body)
                return json_response(200, self._settings())
        raise not_found(f"admin endpoint {verb} {request.raw_path}")

    def _add_instance(self, body: bodies.InstanceBody) -> Instance:
        """`add_instance` as an admin API body asks it."""
        return self.add_instance(
            body.name,
            instance_type=body.instance_type,
            zone=body.zone,
            internal_ips=body.internal_ips,
            external_ips=body.external_ips,
            hostname=body.hostname,
            state=body.state,
        )

    def _launch_batch(self, batch: list[bodies.InstanceBody]) -> list[Instance]:
        """Launch every instance of `batch` (as one call of a cloud that launches many at
        once, an autoscaler's burst), or none: each is checked first (name given, free and
        once in the batch, state, addresses). Only the internal address pool running out
        stops a batch part-way: that 503 says how many were launched."""
        seen: set[str] = set()
        for body in batch:
            what = f"instance {body.name or '(no name)'}"
            if not body.name:
                raise bad_request("instance batch: every instance needs a name")
            if body.name in seen:
                raise bad_request(f"instance batch: {what} is named twice")
            seen.add(body.name)
            if body.state not in ("running", "stopped"):
                raise bad_request(f"{what}: state {body.state!r} must be running or stopped")
            taken = self._by_name(body.name)
            if taken is not None:
                raise conflict(f"instance name {body.name} is taken by {taken.id} ({taken.state})")
            self._addresses(body.internal_ips, f"{what}: internal IP")
            self._addresses(body.external_ips, f"{what}: external IP")
        launched: list[Instance] = []
        for body in batch:
            try:
                launched.append(self._add_instance(body))
            except SimApiError as exc:
                raise SimApiError(
                    exc.status,
                    f"instance batch: {len(launched)} of {len(batch)} launched "
                    f"({', '.join(i.id for i in launched) or 'none'}), then {exc.message}",
                ) from exc
        return launched

    def _add_fault(self, kind: str, raw: bytes) -> dict[str, JSON]:
        try:
            if kind == "latency":
                latency = bodies.decode(raw, bodies.LatencyBody, "latency fault")
                return self.faults.latency(
                    latency.method, fixed_s=latency.fixed_seconds, jitter_s=latency.jitter_seconds
                ).to_json()
            if kind == "error":
                error = bodies.decode(raw, bodies.ErrorBody, "error fault")
                return self.faults.error(
                    error.method,
                    status=error.status,
                    probability=error.probability,
                    count=error.count,
                    retry_after_s=error.retry_after_seconds,
                ).to_json()
            if kind == "late":
                late = bodies.decode(raw, bodies.LateBody, "late fault")
                return self.faults.late(
                    late.method, delay_s=late.delay_seconds, count=late.count
                ).to_json()
            if kind == "throttle":
                throttle = bodies.decode(raw, bodies.ThrottleBody, "throttle fault")
                return self.faults.throttle(
                    throttle.target, rate_per_s=throttle.rate_per_second, burst=throttle.burst
                ).to_json()
        except ValueError as exc:
            raise bad_request(str(exc)) from exc
        raise not_found(f"fault kind {kind!r}: use latency, error, throttle or late")

    def _change_settings(self, raw: bytes) -> None:
        body = bodies.decode(raw, bodies.SettingsBody, "settings")
        durations = (
            body.consistency_delay_seconds,
            body.lb_provisioning_seconds,
            body.terminated_retention_seconds,
        )
        if any(value is not None and value < 0 for value in durations):
            raise bad_request("settings: durations must not be negative")
        if body.consistency_delay_seconds is not None:
            self.faults.consistency_delay_s = body.consistency_delay_seconds
        if body.lb_provisioning_seconds is not None:
            self.lb_provisioning_s = body.lb_provisioning_seconds
        if body.terminated_retention_seconds is not None:
            self.terminated_retention_s = body.terminated_retention_seconds
        if body.lb_hostnames is not None:
            self.lb_hostnames = body.lb_hostnames
