"""The records of Kafka's internal topics: `__consumer_offsets` (the group coordinator's offset
commits and group metadata) and `__transaction_state` (the transaction coordinator's metadata).

A record's key and value each start with an int16: the key's is the record type (0 and 1 an
offset commit, 2 a classic group's metadata, 3-8 the KIP-848 consumer-group records; the
transaction log has one key type, 0), the value's the version of the value's schema.  The rest
is Kafka's message encoding of that schema at that version: big-endian fixed-width integers;
before a schema's first flexible version, strings with an int16 length, bytes and arrays with
an int32 count (-1 = null); from it on, "compact" lengths (unsigned varint of n + 1, 0 = null)
and a tagged-field section closing every struct.  A null value is a tombstone.

`decode_offsets_record` and `decode_transaction_record` give kafka-dump-log's
`--offsets-decoder` and `--transaction-log-decoder` text; `encode`/`decode` are the codec
underneath, which the tests (and a future group coordinator) use to write these records.
The schemas follow Kafka 3.9/4.0 (group-coordinator and transaction-coordinator message specs).
"""
from __future__ import annotations

import base64
import json
import struct
from dataclasses import dataclass

from ..core.varint import uvarint

ANY = 0x7FFF        # "N+": every version from N on


@dataclass(frozen=True)
class Field:
    name: str                   # camelCase, as Kafka's JSON converters print it
    type: object                # "int8" .. "int64", "string", "bytes", "uuid", "[]<type>", or a Struct
    versions: tuple[int, int] = (0, ANY)
    nullable: tuple[int, int] | None = None
    tag: int | None = None      # a tagged field (flexible versions only)
    default: object = None

    def present(self, version: int) -> bool:
        return self.versions[0] <= version <= self.versions[1]

    def may_be_null(self, version: int) -> bool:
        return self.nullable is not None and self.nullable[0] <= version <= self.nullable[1]


@dataclass(frozen=True)
class Struct:
    name: str
    fields: tuple[Field, ...]
    flexible_from: int = ANY + 1     # the first flexible version ("none" when above every version)
    versions: tuple[int, int] = (0, ANY)


class RecordFormatError(ValueError):
    """The bytes do not hold the schema at that version."""


_FIXED = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h"), "int32": struct.Struct(">i"),
          "int64": struct.Struct(">q"), "uint16": struct.Struct(">H"), "bool": struct.Struct(">?")}
_DEFAULTS = {"int8": 0, "int16": 0, "int32": 0, "int64": 0, "uint16": 0, "bool": False, "uuid": bytes(16)}


def _default(field: Field, version: int):
    if field.default is not None or field.may_be_null(version):
        return field.default
    if isinstance(field.type, Struct) or field.type.startswith("[]"):
        return []
    return _DEFAULTS.get(field.type, b"" if field.type == "bytes" else "")


# ---- reading ----
class _Reader:
    def __init__(self, data: bytes):
        self.data = memoryview(data)
        self.pos = 0

    def take(self, n: int, what: str = "field") -> memoryview:
        left = len(self.data) - self.pos
        if n < 0 or n > left:
            raise RecordFormatError(f"Error reading {what} of {n} byte(s): only {left} byte(s) available.")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def fixed(self, kind: str):
        codec = _FIXED[kind]
        return codec.unpack(self.take(codec.size, kind))[0]

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.take(1, "varint")[0]
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError("Varint is too long, the most significant bit in the 5th byte is set.")

    def length(self, flexible: bool, wide: bool) -> int:
        """A length or count; -1 for null."""
        if flexible:
            return self.uvarint() - 1
        return self.fixed("int32" if wide else "int16")


def _read_value(r: _Reader, kind, version: int, flexible: bool, nullable: bool):
    if isinstance(kind, Struct):
        return _read_struct(r, kind, version, flexible)
    if kind in _FIXED:
        return r.fixed(kind)
    if kind == "uuid":
        return bytes(r.take(16, "uuid"))
    if kind in ("string", "bytes"):
        n = r.length(flexible, wide=kind == "bytes")
        if n < 0:
            if not nullable:
                raise RecordFormatError(f"non-nullable {kind} field was serialized as null")
            return None
        raw = bytes(r.take(n, "byte array" if kind == "bytes" else "string"))
        if kind == "bytes":
            return raw
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise RecordFormatError(f"string is not UTF-8: {e}") from None
    if kind.startswith("[]"):
        n = r.length(flexible, wide=True)
        if n < 0:
            if not nullable:
                raise RecordFormatError("non-nullable array field was serialized as null")
            return None
        if n > len(r.data) - r.pos:
            raise RecordFormatError(f"Tried to allocate a collection of size {n}, but there are only "
                                    f"{len(r.data) - r.pos} bytes remaining.")
        element = _ELEMENT_TYPES.get(kind[2:], kind[2:])
        return [_read_value(r, element, version, flexible, False) for _ in range(n)]
    raise AssertionError(f"unknown type {kind!r}")


def _read_struct(r: _Reader, spec: Struct, version: int, flexible: bool) -> dict:
    """A struct's fields; nested structs share the message's flexibility."""
    out = {}
    tagged = {}
    for f in spec.fields:
        if not f.present(version) or (f.tag is not None and not flexible):
            out[f.name] = _default(f, version)
        elif f.tag is not None:
            tagged[f.tag] = f
            out[f.name] = _default(f, version)
        else:
            out[f.name] = _read_value(r, f.type, version, flexible, f.may_be_null(version))
    if flexible:
        for _ in range(r.uvarint()):
            tag, size = r.uvarint(), r.uvarint()
            body = r.take(size, "byte array")
            if tag in tagged:
                f = tagged[tag]
                sub = _Reader(bytes(body))
                out[f.name] = _read_value(sub, f.type, version, True, f.may_be_null(version))
    return out


def decode(spec: Struct, data: bytes, version: int) -> dict:
    """The fields of one message (everything after its int16 type/version prefix)."""
    if not spec.versions[0] <= version <= spec.versions[1]:
        raise RecordFormatError(f"{spec.name} has no version {version}")
    return _read_struct(_Reader(data), spec, version, version >= spec.flexible_from)


# ---- writing ----
def _length(n: int, flexible: bool, wide: bool) -> bytes:
    if flexible:
        return uvarint(n + 1)
    return _FIXED["int32" if wide else "int16"].pack(n)


def _write_value(kind, value, version: int, flexible: bool) -> bytes:
    if isinstance(kind, Struct):
        return _write_struct(kind, value, version, flexible)
    if kind in _FIXED:
        return _FIXED[kind].pack(value)
    if kind == "uuid":
        return bytes(value)
    if kind in ("string", "bytes"):
        if value is None:
            return _length(-1, flexible, wide=kind == "bytes")
        raw = value.encode("utf-8") if kind == "string" else bytes(value)
        return _length(len(raw), flexible, wide=kind == "bytes") + raw
    if kind.startswith("[]"):
        if value is None:
            return _length(-1, flexible, wide=True)
        element = _ELEMENT_TYPES.get(kind[2:], kind[2:])
        return _length(len(value), flexible, wide=True) + b"".join(
            _write_value(element, v, version, flexible) for v in value)
    raise AssertionError(f"unknown type {kind!r}")


def _write_struct(spec: Struct, obj: dict, version: int, flexible: bool) -> bytes:
    parts, tagged = [], []
    for f in spec.fields:
        if not f.present(version) or (f.tag is not None and not flexible):
            continue
        value = obj.get(f.name, _default(f, version))
        if f.tag is not None:
            if value != _default(f, version):
                body = _write_value(f.type, value, version, True)
                tagged.append(uvarint(f.tag) + uvarint(len(body)) + body)
        else:
            parts.append(_write_value(f.type, value, version, flexible))
    if flexible:
        parts.append(uvarint(len(tagged)) + b"".join(tagged))
    return b"".join(parts)


def encode(spec: Struct, obj: dict, version: int) -> bytes:
    """The int16 `version` then `obj` (camelCase keys; missing fields take their defaults)."""
    return _FIXED["int16"].pack(version) + _write_struct(spec, obj, version, version >= spec.flexible_from)


# ---- Kafka's JSON rendering (its generated JsonConverter classes) ----
def _uuid_text(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _json_value(kind, value, version: int):
    if value is None:
        return None
    if isinstance(kind, Struct):
        return to_json(kind, value, version)
    if kind == "bytes":
        return base64.b64encode(value).decode()
    if kind == "uuid":
        return _uuid_text(value)
    if isinstance(kind, str) and kind.startswith("[]"):
        element = _ELEMENT_TYPES.get(kind[2:], kind[2:])
        return [_json_value(element, v, version) for v in value]
    return value


def to_json(spec: Struct, obj: dict, version: int) -> dict:
    """Fields present at `version`, in schema order; a tagged field only when not its default."""
    out = {}
    for f in spec.fields:
        if not f.present(version):
            continue
        value = obj.get(f.name, _default(f, version))
        if f.tag is not None and value == _default(f, version):
            continue
        out[f.name] = _json_value(f.type, value, version)
    return out


def json_text(doc) -> str:
    """Jackson's compact form (no spaces, non-ASCII kept)."""
    return json.dumps(doc, separators=(",", ":"), ensure_ascii=False)


# ---- the schemas ----
def _v(text: str) -> tuple[int, int]:
    """Kafka's version ranges: "3", "0-2", "1+"."""
    if text.endswith("+"):
        return int(text[:-1]), ANY
    lo, _, hi = text.partition("-")
    return int(lo), int(hi or lo)


_TOPIC_PARTITIONS = Struct("TopicPartition", (Field("topic", "string"), Field("partitions", "[]int32")))
_TOPIC_ID_PARTITIONS = Struct("TopicPartitions", (Field("topicId", "uuid"), Field("partitions", "[]int32")))
_ELEMENT_TYPES: dict[str, Struct] = {}

OFFSET_COMMIT_KEY = Struct("OffsetCommitKey", (
    Field("group", "string"), Field("topic", "string"), Field("partition", "int32")), versions=_v("0-1"))
OFFSET_COMMIT_VALUE = Struct("OffsetCommitValue", (
    Field("offset", "int64"),
    Field("leaderEpoch", "int32", _v("3+"), default=-1),
    Field("metadata", "string"),
    Field("commitTimestamp", "int64"),
    Field("expireTimestamp", "int64", _v("1"), default=-1),
), flexible_from=4, versions=_v("0-4"))
GROUP_METADATA_KEY = Struct("GroupMetadataKey", (Field("group", "string"),), versions=_v("2"))
_MEMBER_METADATA = Struct("MemberMetadata", (
    Field("memberId", "string"),
    Field("groupInstanceId", "string", _v("3+"), nullable=_v("3+")),
    Field("clientId", "string"),
    Field("clientHost", "string"),
    Field("rebalanceTimeout", "int32", _v("1+"), default=-1),
    Field("sessionTimeout", "int32"),
    Field("subscription", "bytes"),
    Field("assignment", "bytes"),
))
GROUP_METADATA_VALUE = Struct("GroupMetadataValue", (
    Field("protocolType", "string"),
    Field("generation", "int32"),
    Field("protocol", "string", nullable=_v("0+")),
    Field("leader", "string", nullable=_v("0+")),
    Field("currentStateTimestamp", "int64", _v("2+"), default=-1),
    Field("members", "[]MemberMetadata"),
), flexible_from=4, versions=_v("0-4"))
_ELEMENT_TYPES["MemberMetadata"] = _MEMBER_METADATA


def _key(name: str, record_type: int, *fields: str) -> Struct:
    """The KIP-848 keys: string fields present only at the record type's own version."""
    return Struct(name, tuple(Field(f, "string", (record_type, record_type)) for f in fields),
                  versions=(record_type, record_type))


def _flexible(name: str, *fields: Field) -> Struct:
    return Struct(name, fields, flexible_from=0, versions=(0, 0))


_PARTITION_METADATA = Struct("PartitionMetadata", (Field("partition", "int32"), Field("racks", "[]string")))
_TOPIC_METADATA = Struct("TopicMetadata", (
    Field("topicId", "uuid"), Field("topicName", "string"), Field("numPartitions", "int32"),
    Field("partitionMetadata", "[]PartitionMetadata")))
_CLASSIC_PROTOCOL = Struct("ClassicProtocol", (Field("name", "string"), Field("metadata", "bytes")))
_CLASSIC_MEMBER = Struct("ClassicMemberMetadata", (
    Field("sessionTimeoutMs", "int32"), Field("supportedProtocols", "[]ClassicProtocol")))
_ELEMENT_TYPES.update(TopicPartition=_TOPIC_PARTITIONS, TopicPartitions=_TOPIC_ID_PARTITIONS,
                      PartitionMetadata=_PARTITION_METADATA, TopicMetadata=_TOPIC_METADATA,
                      ClassicProtocol=_CLASSIC_PROTOCOL)

# record type -> (key schema, value schema)
OFFSETS_TOPIC_RECORDS: dict[int, tuple[Struct, Struct]] = {
    0: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    1: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    2: (GROUP_METADATA_KEY, GROUP_METADATA_VALUE),
    3: (_key("ConsumerGroupMetadataKey", 3, "groupId"),
        _flexible("ConsumerGroupMetadataValue", Field("epoch", "int32"))),
    4: (_key("ConsumerGroupPartitionMetadataKey", 4, "groupId"),
        _flexible("ConsumerGroupPartitionMetadataValue", Field("topics", "[]TopicMetadata"))),
    5: (_key("ConsumerGroupMemberMetadataKey", 5, "groupId", "memberId"),
        _flexible("ConsumerGroupMemberMetadataValue",
                  Field("instanceId", "string", nullable=_v("0+")),
                  Field("rackId", "string", nullable=_v("0+")),
                  Field("clientId", "string"),
                  Field("clientHost", "string"),
                  Field("subscribedTopicNames", "[]string"),
                  Field("subscribedTopicRegex", "string", nullable=_v("0+")),
                  Field("rebalanceTimeoutMs", "int32", default=-1),
                  Field("serverAssignor", "string", nullable=_v("0+")),
                  Field("classicMemberMetadata", _CLASSIC_MEMBER, nullable=_v("0+"), tag=0))),
    6: (_key("ConsumerGroupTargetAssignmentMetadataKey", 6, "groupId"),
        _flexible("ConsumerGroupTargetAssignmentMetadataValue", Field("assignmentEpoch", "int32"))),
    7: (_key("ConsumerGroupTargetAssignmentMemberKey", 7, "groupId", "memberId"),
        _flexible("ConsumerGroupTargetAssignmentMemberValue", Field("topicPartitions", "[]TopicPartitions"))),
    8: (_key("ConsumerGroupCurrentMemberAssignmentKey", 8, "groupId", "memberId"),
        _flexible("ConsumerGroupCurrentMemberAssignmentValue",
                  Field("memberEpoch", "int32"), Field("previousMemberEpoch", "int32"), Field("state", "int8"),
                  Field("assignedPartitions", "[]TopicPartitions"),
                  Field("partitionsPendingRevocation", "[]TopicPartitions"))),
}

# The consumer protocol's embedded subscription and assignment (kafka-clients' ConsumerProtocol),
# carried as bytes in a classic group's member metadata.
CONSUMER_SUBSCRIPTION = Struct("ConsumerProtocolSubscription", (
    Field("topics", "[]string"),
    Field("userData", "bytes", nullable=_v("0+")),
    Field("ownedPartitions", "[]TopicPartition", _v("1+")),
    Field("generationId", "int32", _v("2+"), default=-1),
    Field("rackId", "string", _v("3+"), nullable=_v("3+")),
), versions=_v("0-3"))
CONSUMER_ASSIGNMENT = Struct("ConsumerProtocolAssignment", (
    Field("assignedPartitions", "[]TopicPartition"),
    Field("userData", "bytes", nullable=_v("0+")),
), versions=_v("0-3"))

TRANSACTION_LOG_KEY = Struct("TransactionLogKey", (Field("transactionalId", "string"),), versions=_v("0"))
_TXN_PARTITIONS = Struct("PartitionsSchema", (Field("topic", "string"), Field("partitionIds", "[]int32")))
_ELEMENT_TYPES["PartitionsSchema"] = _TXN_PARTITIONS
TRANSACTION_LOG_VALUE = Struct("TransactionLogValue", (
    Field("producerId", "int64"),
    Field("previousProducerId", "int64", _v("1+"), tag=0, default=-1),
    Field("nextProducerId", "int64", _v("1+"), tag=1, default=-1),
    Field("producerEpoch", "int16"),
    Field("transactionTimeoutMs", "int32"),
    Field("transactionStatus", "int8"),
    Field("transactionPartitions", "[]PartitionsSchema", nullable=_v("0+")),
    Field("transactionLastUpdateTimestampMs", "int64"),
    Field("transactionStartTimestampMs", "int64"),
    Field("clientTransactionVersion", "int16", _v("1+"), tag=2, default=0),
), flexible_from=1, versions=_v("0-1"))
TRANSACTION_STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort",
                      "Dead", "PrepareEpochFence")


def _prefix(data: bytes, what: str) -> int:
    if len(data) < 2:
        raise RecordFormatError(f"Could not read version from {what}'s buffer.")
    return _FIXED["int16"].unpack_from(data)[0]


# ---- kafka-dump-log's decoders ----
def _embedded(spec: Struct, raw: bytes):
    """A consumer-protocol blob as JSON, or None when it does not parse (the bytes are kept)."""
    try:
        version = _prefix(raw, "embedded")
        return to_json(spec, decode(spec, raw[2:], version), version)
    except (RecordFormatError, struct.error):
        return None


def _group_metadata_json(value: dict, version: int) -> dict:
    doc = to_json(GROUP_METADATA_VALUE, value, version)
    if doc.get("protocolType") == "consumer":
        for member, raw in zip(doc["members"], value["members"]):
            for name, spec in (("subscription", CONSUMER_SUBSCRIPTION), ("assignment", CONSUMER_ASSIGNMENT)):
                parsed = _embedded(spec, raw[name])
                if parsed is not None:
                    member[name] = parsed
    return doc


def decode_offsets_record(key: bytes | None, value: bytes | None, offset: int) -> tuple[str | None, str | None]:
    """(key text, payload text) of one `__consumer_offsets` record, as `--offsets-decoder` prints
    them; a record Kafka cannot read is reported in the key text and has no payload."""
    if key is None:
        raise RecordFormatError(f"Failed to decode message at offset {offset} using offset topic decoder "
                                "(message had a missing key)")
    try:
        record_type = _prefix(key, "key")
        if record_type not in OFFSETS_TOPIC_RECORDS:
            return f"Unknown record type {record_type} at offset {offset}, skipping.", None
        key_spec, value_spec = OFFSETS_TOPIC_RECORDS[record_type]
        stage, version = "key", record_type
        key_doc = to_json(key_spec, decode(key_spec, key[2:], record_type), record_type)
        key_text = json_text({"type": str(record_type), "data": key_doc})
        if value is None:
            return key_text, "<DELETE>"
        stage, version = "value", _prefix(value, "value")
        fields = decode(value_spec, value[2:], version)
        data = (_group_metadata_json(fields, version) if value_spec is GROUP_METADATA_VALUE
                else to_json(value_spec, fields, version))
        return key_text, json_text({"version": str(version), "data": data})
    except RecordFormatError as e:
        if "version from" in str(e):
            return f"Error at offset {offset}, skipping. {e}", None
        return (f"Error at offset {offset}, skipping. Could not read record with version {version} from "
                f"{stage}'s buffer due to: {e}", None)


def decode_transaction_record(key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
    """(key text, payload text) of one `__transaction_state` record, as
    `--transaction-log-decoder` prints them.  Raises RecordFormatError where Kafka's tool fails."""
    if key is None:
        raise RecordFormatError("a transaction log record needs a key")
    version = _prefix(key, "key")
    if version != 0:
        return f"unknown::version={version}", None
    transactional_id = decode(TRANSACTION_LOG_KEY, key[2:], 0)["transactionalId"]
    key_text = f"transaction_metadata::transactionalId={transactional_id}"
    if value is None:
        return key_text, "<DELETE>"
    version = _prefix(value, "value")
    if not TRANSACTION_LOG_VALUE.versions[0] <= version <= TRANSACTION_LOG_VALUE.versions[1]:
        raise RecordFormatError(f"Unknown version {version} from the transaction log message value")
    v = decode(TRANSACTION_LOG_VALUE, value[2:], version)
    status = v["transactionStatus"]
    if not 0 <= status < len(TRANSACTION_STATES):
        raise RecordFormatError(f"Unknown transaction state id {status} from the transaction status message")
    state = TRANSACTION_STATES[status]
    partitions = []
    if state != "Empty":
        for topic in v["transactionPartitions"] or ():
            partitions.extend(f"{topic['topic']}-{p}" for p in topic["partitionIds"])
    return key_text, (f"producerId:{v['producerId']},producerEpoch:{v['producerEpoch']},state={state},"
                      f"partitions=[{','.join(partitions)}],"
                      f"txnLastUpdateTimestamp={v['transactionLastUpdateTimestampMs']},"
                      f"txnTimeoutMs={v['transactionTimeoutMs']}")
