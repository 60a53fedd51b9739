"""The cluster metadata as the metadata log carries it (KRaft-style): the controller turns each
change of its state into records (`records_for`, through a `Publication`: only when its state
changed), and every broker replays the records into a `MetadataImage` -- brokers with their
addresses and registration state, topics with ids and configs, partitions with their full
leadership record.
"""
from __future__ import annotations

import logging
import os
import uuid
from dataclasses import dataclass, field

from ..core.errors import Errors
from ..replication.messages import PartitionState
from ..topics import metadata_records as mr
from .authorizer import Acl
from .scram import Credential
from .scram import records as scram_records

NO_DIR = bytes(16)          # Kafka's unassigned log directory
# Tests set this to a directory (tests/conftest.py): a Publication that skips its comparison
# (nothing counted as changed) runs it anyway, and one that would have written records is a
# change never counted -- written there as a file and logged; the tests fail on such a file.
CHECK_ENV = "STORAGE_CHECK_METADATA_SKIPS"

log = logging.getLogger("storage.wire")


@dataclass
class BrokerEntry:
    broker_id: int
    broker_epoch: int
    incarnation: bytes
    host: str
    port: int
    fenced: bool = True
    in_controlled_shutdown: bool = False
    # Every listener's (name, host, port); host and port are the first's, the inter-broker one.
    endpoints: tuple[tuple[str, str, int], ...] = ()

    def address(self, listener: str | None = None) -> tuple[str, int]:
        """(host, port) on `listener` (None: the first, the inter-broker listener); ("", -1)
        if the broker has no such listener."""
        if listener is None or not self.endpoints:
            return self.host, self.port
        for name, host, port in self.endpoints:
            if name == listener:
                return host, port
        return "", -1


def partition_row(state: PartitionState, brokers: dict[int, BrokerEntry], listener: str | None,
                  version: int) -> dict:
    """One partition of a Metadata answer to a request that arrived on `listener`, as Kafka's
    KRaftMetadataCache.getPartitionMetadata: a leader without that listener is no leader there
    (-1, LISTENER_NOT_FOUND from v6, LEADER_NOT_AVAILABLE before, as for a leader not
    registered); offline_replicas are the replicas not registered, fenced or without the
    listener; v0 alone leaves such replicas out of replicas and ISR, and then says
    REPLICA_NOT_AVAILABLE."""
    def reachable(broker_id: int) -> bool:
        b = brokers.get(broker_id)
        return b is not None and not b.fenced and b.address(listener)[1] >= 0

    replicas, isr = list(state.replicas), list(state.isr)
    offline = [r for r in replicas if not reachable(r)]
    shown_replicas = [r for r in replicas if reachable(r)] if version == 0 else replicas
    shown_isr = [r for r in isr if reachable(r)] if version == 0 else isr
    leader, code = state.leader, Errors.NONE
    entry = brokers.get(leader)
    if entry is None:
        leader, code = -1, Errors.LEADER_NOT_AVAILABLE
    elif entry.address(listener)[1] < 0:
        leader, code = -1, Errors.LISTENER_NOT_FOUND if version >= 6 else Errors.LEADER_NOT_AVAILABLE
    elif len(shown_replicas) < len(replicas) or len(shown_isr) < len(isr):
        code = Errors.REPLICA_NOT_AVAILABLE
    return {"error_code": code, "partition_index": state.partition, "leader_id": leader,
            "leader_epoch": state.leader_epoch, "replica_nodes": shown_replicas, "isr_nodes": shown_isr,
            "offline_replicas": offline}


@dataclass
class MetadataImage:
    brokers: dict[int, BrokerEntry] = field(default_factory=dict)
    topic_ids: dict[str, int] = field(default_factory=dict)
    configs: dict[str, dict[str, str]] = field(default_factory=dict)
    # Dynamic broker configs: "" (the cluster default) or a broker id -> {name: value}.
    broker_configs: dict[str, dict[str, str]] = field(default_factory=dict)
    partitions: dict[tuple[str, int], PartitionState] = field(default_factory=dict)
    # The ACLs (AccessControlEntryRecord): the binding's 16-byte id -> authorizer.Acl.
    acls: dict[bytes, Acl] = field(default_factory=dict)
    # Users' SCRAM credentials: (user, mechanism type) -> scram.Credential.
    scram: dict[tuple[str, int], Credential] = field(default_factory=dict)

    def topic_name(self, topic_id: int) -> str | None:
        for name, tid in self.topic_ids.items():
            if tid == topic_id:
                return name
        return None

    def apply(self, api_key: int, f: dict) -> tuple:
        """Replay one record; returns what changed: ("broker", id), ("partition", key),
        ("topic", name), ("broker_config", resource), ("acl", id), ("scram", user) or ("removed", name, [keys]).  A
        ConfigRecord with a null value removes that config (Kafka's deletion)."""
        if api_key == 0:
            endpoint = f["endPoints"][0] if f["endPoints"] else {"host": "", "port": 0}
            self.brokers[f["brokerId"]] = BrokerEntry(
                f["brokerId"], f["brokerEpoch"], f["incarnationId"], endpoint["host"], endpoint["port"], f["fenced"],
                f["inControlledShutdown"], tuple((e["name"], e["host"], e["port"]) for e in f["endPoints"]))
            return ("broker", f["brokerId"])
        if api_key == 2:
            self.topic_ids[f["name"]] = int.from_bytes(f["topicId"], "big")
            self.configs.setdefault(f["name"], {})
            return ("topic", f["name"])
        if api_key == 4:
            broker = f["resourceType"] == mr.BROKER_RESOURCE
            held = (self.broker_configs if broker else self.configs).setdefault(f["resourceName"], {})
            if f["value"] is None:
                held.pop(f["name"], None)
            else:
                held[f["name"]] = f["value"]
            return ("broker_config" if broker else "topic", f["resourceName"])
        if api_key == 3:
            name = self.topic_name(int.from_bytes(f["topicId"], "big"))
            state = PartitionState(name, f["partitionId"], f["leader"], f["leaderEpoch"], f["partitionEpoch"],
                                   list(f["isr"]), list(f["replicas"]), f["leaderRecoveryState"],
                                   list(f["eligibleLeaderReplicas"] or []), list(f["lastKnownElr"] or []))
            self.partitions[(name, state.partition)] = state
            return ("partition", (name, state.partition))
        if api_key == 9:
            name = self.topic_name(int.from_bytes(f["topicId"], "big"))
            keys = [key for key in self.partitions if key[0] == name]
            for key in keys:
                del self.partitions[key]
            self.topic_ids.pop(name, None)
            self.configs.pop(name, None)
            return ("removed", name, keys)
        if api_key == 18:
            self.acls[f["id"]] = acl_of(f)
            return ("acl", f["id"])
        if api_key == 19:
            self.acls.pop(f["id"], None)
            return ("acl", f["id"])
        if api_key == 11:
            self.scram[(f["name"], f["mechanism"])] = Credential(bytes(f["salt"]), bytes(f["storedKey"]),
                                                                 bytes(f["serverKey"]), f["iterations"])
            return ("scram", f["name"])
        if api_key == 12:
            self.scram.pop((f["name"], f["mechanism"]), None)
            return ("scram", f["name"])
        raise mr.RecordFormatError(f"metadata record type {api_key} is not replayed")


def acl_of(f: dict) -> Acl:
    """The binding an AccessControlEntryRecord's fields carry."""
    return Acl(f["resourceType"], f["resourceName"], f["patternType"], f["principal"], f["host"], f["operation"],
               f["permissionType"])


def acl_fields(acl_id: bytes, acl: Acl) -> dict:
    """An AccessControlEntryRecord's fields."""
    return {"id": acl_id, "resourceType": acl.resource_type, "resourceName": acl.resource_name,
            "patternType": acl.pattern_type, "principal": acl.principal, "host": acl.host,
            "operation": acl.operation, "permissionType": acl.permission}


def _partition_fields(topic_id: int, s: PartitionState) -> dict:
    return {"partitionId": s.partition, "topicId": topic_id.to_bytes(16, "big"), "replicas": list(s.replicas),
            "isr": list(s.isr), "removingReplicas": [], "addingReplicas": [], "leader": s.leader,
            "leaderRecoveryState": s.leader_recovery_state, "leaderEpoch": s.leader_epoch,
            "partitionEpoch": s.partition_epoch, "directories": [NO_DIR] * len(s.replicas),
            "eligibleLeaderReplicas": list(s.elr) or None, "lastKnownElr": list(s.last_known_elr) or None}


def _config_records(resource_type: int, resource: str, want: dict, held: dict) -> list[tuple[int, dict]]:
    """ConfigRecords that bring `held` to `want`: a set value for each that differs, a null
    value for each config no longer set."""
    out = []
    for key in sorted(set(want) | set(held)):
        if held.get(key) != want.get(key):
            out.append((4, {"resourceType": resource_type, "resourceName": resource, "name": key,
                            "value": want.get(key)}))
    return out


def endpoint_list(value) -> list[tuple[str, str, int, int]]:
    """A broker's registered endpoints, [(name, host, port, protocol id)], from what the
    controller stored: that list, or the (host, port) of one PLAINTEXT listener stored before
    several listeners were served."""
    if not value:
        return []
    if len(value) == 2 and not isinstance(value[0], (list, tuple)):
        return [("PLAINTEXT", value[0], int(value[1]), 0)]
    return [(name, host, int(port), int(protocol)) for name, host, port, protocol in value]


def records_for(controller, image: MetadataImage, endpoints: dict[int, list],
                acls: dict[bytes, Acl] | None = None) -> list[bytes]:
    """The records that bring `image` to the controller's state (and applies them to it):
    full-state records of every broker, topic and partition that differ, removals last.
    `endpoints`: each broker's endpoint_list, the inter-broker listener first; with `acls` (the
    controller's, acl_control.AclControl), the ACLs added and removed."""
    out: list[tuple[int, dict]] = []
    for b, r in sorted(controller.brokers.items()):
        listeners = endpoint_list(endpoints.get(b)) or [("PLAINTEXT", "", 0, 0)]
        host, port = listeners[0][1:3]
        incarnation = uuid.UUID(hex=r.incarnation_id).bytes if len(r.incarnation_id) == 32 else bytes(16)
        want = BrokerEntry(b, r.broker_epoch, incarnation, host, port, r.fenced, r.in_controlled_shutdown,
                           tuple(e[:3] for e in listeners))
        if image.brokers.get(b) != want:
            out.append((0, {"brokerId": b, "incarnationId": incarnation, "brokerEpoch": r.broker_epoch,
                            "endPoints": [{"name": name, "host": h, "port": p, "securityProtocol": protocol}
                                          for name, h, p, protocol in listeners],
                            "features": [], "rack": None, "fenced": r.fenced,
                            "inControlledShutdown": r.in_controlled_shutdown}))
    for name, topic in sorted(controller.topics.items()):
        topic_id = int(topic["topic_id"], 16)
        if image.topic_ids.get(name) != topic_id:
            out.append((2, {"name": name, "topicId": topic_id.to_bytes(16, "big")}))
        out += _config_records(mr.TOPIC_RESOURCE, name, topic["configs"], image.configs.get(name, {}))
    for resource in sorted(set(controller.broker_configs) | set(image.broker_configs)):
        out += _config_records(mr.BROKER_RESOURCE, resource, controller.broker_configs.get(resource, {}),
                               image.broker_configs.get(resource, {}))
    for key, s in sorted(controller.partitions.items()):
        topic_id = int(controller.topics[key[0]]["topic_id"], 16) if key[0] in controller.topics else 0
        if topic_id and image.partitions.get(key) != s:
            out.append((3, _partition_fields(topic_id, s)))
    out += scram_records(controller, image.scram)
    for name in sorted(set(image.topic_ids) - set(controller.topics)):
        out.append((9, {"topicId": image.topic_ids[name].to_bytes(16, "big")}))
    if acls is not None:
        out += [(18, acl_fields(i, acls[i])) for i in sorted(set(acls) - set(image.acls))]
        out += [(19, {"id": i}) for i in sorted(set(image.acls) - set(acls))]
    values = []
    for api_key, fields in out:
        value = mr.encode(api_key, fields)
        image.apply(*mr.decode(value)[::2])
        values.append(value)
    return values


class Publication:
    """What a controller publishes, change-driven (Kafka writes metadata records when its state
    changes): `records(...)` is records_for over `image` when the controller's change counter
    (`Controller.changes`: every commit and stored document) or `extra` (what else the records
    are made of, e.g. a broker's endpoints) moved since the last call, else nothing -- an idle
    cluster compares nothing."""

    def __init__(self, image: MetadataImage):
        self.image = image
        self.seen = None

    def records(self, controller, endpoints: dict[int, list], acls: dict[bytes, Acl] | None,
                extra=()) -> list[bytes]:
        key = (controller.changes, extra)
        if key == self.seen:
            check = os.environ.get(CHECK_ENV)
            if not check:
                return []
            values = records_for(controller, self.image, endpoints, acls)
            if values:
                _missed(check, values)
            return values
        values = records_for(controller, self.image, endpoints, acls)
        self.seen = key
        return values


def _missed(directory: str, values: list[bytes]) -> None:
    """A change the counter did not count (the checking mode): said in `directory` and the log."""
    kinds = sorted({mr.decode(v)[0] for v in values})
    text = (f"pid {os.getpid()}: {len(values)} metadata records (types {kinds}) would not have been "
            f"published: a change of the controller's state did not bump Controller.changes")
    log.critical("%s", text)
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, f"missed-{os.getpid()}-{uuid.uuid4().hex[:8]}.txt"), "w") as f:
        f.write(text + "\n")
