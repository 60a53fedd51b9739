"""Kafka's KRaft metadata records, the ones this project's controller writes to its metadata log
(`__cluster_metadata-0`) and brokers replay: RegisterBrokerRecord, TopicRecord,
PartitionRecord, ConfigRecord, RemoveTopicRecord, UserScramCredentialRecord,
RemoveUserScramCredentialRecord, AccessControlEntryRecord and RemoveAccessControlEntryRecord (the
metadata module's message specs; the ACL records are types 18 and 19 there).

A record has no key; its value is Kafka's frame (MetadataRecordSerde): an unsigned varint
frame version (1), an unsigned varint API key (the record type), an unsigned varint version,
then the message in the flexible encoding (every version of these records is flexible).  The
encoding is coordinator_records' schema-driven one.  The controller writes every change as
the full state of what changed (a RegisterBrokerRecord per broker change, a PartitionRecord per
partition change), so a broker replaying the log needs no change records.
"""
from __future__ import annotations

from ..core.varint import uvarint
from .coordinator_records import Field, RecordFormatError, Struct, _read_struct, _Reader, _write_struct

FRAME_VERSION = 1
_ENDPOINT = Struct("BrokerEndpoint", (Field("name", "string"), Field("host", "string"), Field("port", "uint16"),
                                      Field("securityProtocol", "int16")))
_FEATURE = Struct("BrokerFeature", (Field("name", "string"), Field("minSupportedVersion", "int16"),
                                    Field("maxSupportedVersion", "int16")))

REGISTER_BROKER = Struct("RegisterBrokerRecord", (
    Field("brokerId", "int32"),
    Field("isMigratingZkBroker", "bool", (2, 3), default=False),
    Field("incarnationId", "uuid"),
    Field("brokerEpoch", "int64"),
    Field("endPoints", "[]BrokerEndpoint"),
    Field("features", "[]BrokerFeature"),
    Field("rack", "string", nullable=(0, 3)),
    Field("fenced", "bool", default=True),
    Field("inControlledShutdown", "bool", (1, 3), default=False),
    Field("logDirs", "[]uuid", (3, 3), tag=0, default=[]),
), flexible_from=0, versions=(0, 3))
TOPIC = Struct("TopicRecord", (Field("name", "string"), Field("topicId", "uuid")), flexible_from=0, versions=(0, 0))
PARTITION = Struct("PartitionRecord", (
    Field("partitionId", "int32", default=-1),
    Field("topicId", "uuid"),
    Field("replicas", "[]int32"),
    Field("isr", "[]int32"),
    Field("removingReplicas", "[]int32"),
    Field("addingReplicas", "[]int32"),
    Field("leader", "int32", default=-1),
    Field("leaderRecoveryState", "int8", tag=0, default=0),
    Field("leaderEpoch", "int32", default=-1),
    Field("partitionEpoch", "int32", default=-1),
    Field("directories", "[]uuid", (1, 2)),
    Field("eligibleLeaderReplicas", "[]int32", (2, 2), nullable=(2, 2), tag=1),
    Field("lastKnownElr", "[]int32", (2, 2), nullable=(2, 2), tag=2),
), flexible_from=0, versions=(0, 2))
CONFIG = Struct("ConfigRecord", (Field("resourceType", "int8"), Field("resourceName", "string"),
                                 Field("name", "string"), Field("value", "string", nullable=(0, 0))),
                flexible_from=0, versions=(0, 0))
REMOVE_TOPIC = Struct("RemoveTopicRecord", (Field("topicId", "uuid"),), flexible_from=0, versions=(0, 0))
ACL = Struct("AccessControlEntryRecord", (
    Field("id", "uuid"), Field("resourceType", "int8"), Field("resourceName", "string"),
    Field("patternType", "int8"), Field("principal", "string"), Field("host", "string"),
    Field("operation", "int8"), Field("permissionType", "int8"),
), flexible_from=0, versions=(0, 0))
REMOVE_ACL = Struct("RemoveAccessControlEntryRecord", (Field("id", "uuid"),), flexible_from=0, versions=(0, 0))


# A user's SCRAM credential for one mechanism (1 SCRAM-SHA-256, 2 SCRAM-SHA-512) and its removal.
USER_SCRAM_CREDENTIAL = Struct("UserScramCredentialRecord", (
    Field("name", "string"), Field("mechanism", "int8"), Field("salt", "bytes"), Field("storedKey", "bytes"),
    Field("serverKey", "bytes"), Field("iterations", "int32")), flexible_from=0, versions=(0, 0))
REMOVE_USER_SCRAM_CREDENTIAL = Struct("RemoveUserScramCredentialRecord", (
    Field("name", "string"), Field("mechanism", "int8")), flexible_from=0, versions=(0, 0))

# API key -> (schema, the version written)
RECORDS = {0: (REGISTER_BROKER, 1), 2: (TOPIC, 0), 3: (PARTITION, 2), 4: (CONFIG, 0), 9: (REMOVE_TOPIC, 0),
           11: (USER_SCRAM_CREDENTIAL, 0), 12: (REMOVE_USER_SCRAM_CREDENTIAL, 0), 18: (ACL, 0), 19: (REMOVE_ACL, 0)}
NAMES = {0: "RegisterBrokerRecord", 2: "TopicRecord", 3: "PartitionRecord", 4: "ConfigRecord",
         9: "RemoveTopicRecord", 11: "UserScramCredentialRecord", 12: "RemoveUserScramCredentialRecord",
         18: "AccessControlEntryRecord", 19: "RemoveAccessControlEntryRecord"}
TOPIC_RESOURCE = 2          # ConfigResource.Type.TOPIC
BROKER_RESOURCE = 4         # ConfigResource.Type.BROKER
_ELEMENTS = {"BrokerEndpoint": _ENDPOINT, "BrokerFeature": _FEATURE}


def _register_elements() -> None:
    from . import coordinator_records as cr
    for name, spec in _ELEMENTS.items():
        cr._ELEMENT_TYPES.setdefault(name, spec)


_register_elements()


def encode(api_key: int, fields: dict) -> bytes:
    """A record value: the frame, then `fields` (camelCase names) at the version written."""
    spec, version = RECORDS[api_key]
    return (uvarint(FRAME_VERSION) + uvarint(api_key) + uvarint(version)
            + _write_struct(spec, fields, version, True))


def decode(value: bytes) -> tuple[int, int, dict]:
    """(API key, version, fields) of a record value; RecordFormatError names what is wrong."""
    r = _Reader(value)
    frame = r.uvarint()
    if frame != FRAME_VERSION:
        raise RecordFormatError(f"metadata record frame version {frame}, expected {FRAME_VERSION}")
    api_key, version = r.uvarint(), r.uvarint()
    if api_key not in RECORDS:
        raise RecordFormatError(f"metadata record type {api_key} is not one this engine reads")
    spec = RECORDS[api_key][0]
    if not spec.versions[0] <= version <= spec.versions[1]:
        raise RecordFormatError(f"{spec.name} has no version {version}")
    fields = _read_struct(r, spec, version, True)
    if r.pos != len(r.data):
        raise RecordFormatError(f"{spec.name} v{version}: {len(r.data) - r.pos} bytes after the record")
    return api_key, version, fields
