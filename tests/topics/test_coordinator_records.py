"""The records of __consumer_offsets and __transaction_state (storage/topics/coordinator_records.py) and
kafka-dump-log's --offsets-decoder / --transaction-log-decoder.

The byte layouts are packed by hand here from Kafka's message specs (OffsetCommitKey/Value,
GroupMetadataKey/Value, ConsumerGroupMetadataKey/Value, TransactionLogKey/Value), not with the
module's own encoder; the consumer protocol's embedded subscription and assignment come from
kafka-python's encoder.  Kafka's DumpLogSegmentsTest.testOffsetsMessageParser is ported case by
case, with its expected strings."""
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.protocol.consumer import ConsumerProtocolAssignment, ConsumerProtocolSubscription

from storage import LogConfig, PartitionLog, Record
from storage.cli import main
from storage.topics.coordinator_records import (
    GROUP_METADATA_VALUE,
    OFFSET_COMMIT_KEY,
    OFFSET_COMMIT_VALUE,
    TRANSACTION_LOG_VALUE,
    RecordFormatError,
    decode,
    decode_offsets_record,
    decode_transaction_record,
    encode,
)


def i16(n): return struct.pack(">h", n)
def i32(n): return struct.pack(">i", n)
def i64(n): return struct.pack(">q", n)
def s16(text): return i16(-1) if text is None else i16(len(text.encode())) + text.encode()       # string, classic
def b32(raw): return i32(-1) if raw is None else i32(len(raw)) + raw                              # bytes, classic


def compact(text):          # compact string / bytes (length + 1 as an unsigned varint; 0 = null)
    if text is None:
        return b"\x00"
    raw = text.encode() if isinstance(text, str) else text
    assert len(raw) < 127
    return bytes([len(raw) + 1]) + raw


NO_TAGS = b"\x00"


def subscription_v3() -> bytes:
    tp = ConsumerProtocolSubscription.TopicPartition
    return ConsumerProtocolSubscription(version=3, topics=["foo"], user_data=None,
                                        owned_partitions=[tp(topic="foo", partitions=[0])], generation_id=0,
                                        rack_id="rack").encode(version=3)


def assignment_v0() -> bytes:
    tp = ConsumerProtocolAssignment.TopicPartition
    return ConsumerProtocolAssignment(version=0, assigned_partitions=[tp(topic="foo", partitions=[0])],
                                      user_data=None).encode(version=0)


def group_metadata_v4(subscription: bytes, assignment: bytes) -> bytes:
    member = (compact("member") + compact("instance") + compact("client") + compact("host") + i32(1000) +
              i32(100) + compact(subscription) + compact(assignment) + NO_TAGS)
    return (i16(4) + compact("consumer") + i32(10) + compact("range") + compact("member") + i64(-1) +
            b"\x02" + member + NO_TAGS)


# ---- DumpLogSegmentsTest.testOffsetsMessageParser, case by case ----
def test_the_key_is_mandatory():
    with pytest.raises(RecordFormatError, match=r"^Failed to decode message at offset 0 using offset topic "
                                                r"decoder \(message had a missing key\)$"):
        decode_offsets_record(None, None, 0)


def test_a_valid_key_and_value():
    key = i16(3) + s16("group")
    value = i16(0) + i32(10) + NO_TAGS
    assert decode_offsets_record(key, value, 0) == (
        '{"type":"3","data":{"groupId":"group"}}', '{"version":"0","data":{"epoch":10}}')


def test_the_consumer_embedded_protocol_is_parsed_if_possible():
    value = group_metadata_v4(subscription_v3(), assignment_v0())
    assert decode_offsets_record(i16(2) + s16("group"), value, 0) == (
        '{"type":"2","data":{"group":"group"}}',
        '{"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
        '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
        '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
        '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":{"topics":["foo"],'
        '"userData":null,"ownedPartitions":[{"topic":"foo","partitions":[0]}],'
        '"generationId":0,"rackId":"rack"},"assignment":{"assignedPartitions":'
        '[{"topic":"foo","partitions":[0]}],"userData":null}}]}}')


def test_the_consumer_embedded_protocol_is_not_parsed_if_malformed():
    value = group_metadata_v4(b"Subscription", b"Assignment")
    assert decode_offsets_record(i16(2) + s16("group"), value, 0)[1] == (
        '{"version":"4","data":{"protocolType":"consumer","generation":10,"protocol":"range",'
        '"leader":"member","currentStateTimestamp":-1,"members":[{"memberId":"member",'
        '"groupInstanceId":"instance","clientId":"client","clientHost":"host",'
        '"rebalanceTimeout":1000,"sessionTimeout":100,"subscription":"U3Vic2NyaXB0aW9u",'
        '"assignment":"QXNzaWdubWVudA=="}]}}')


def test_a_valid_key_with_a_tombstone():
    assert decode_offsets_record(i16(3) + s16("group"), None, 0) == (
        '{"type":"3","data":{"groupId":"group"}}', "<DELETE>")


def test_an_unknown_record_type_is_reported():
    assert decode_offsets_record(i16(32767) + s16("group"), i16(0) + i32(10) + NO_TAGS, 0) == (
        "Unknown record type 32767 at offset 0, skipping.", None)


def test_any_parsing_error_is_swallowed_and_reported():
    # A value whose one tagged field claims 2^29-1 bytes (Kafka's own failing case has that size).
    value = i16(0) + i32(10) + b"\x01" + b"\x00" + b"\xff\xff\xff\xff\x01" + b"\x00"
    assert decode_offsets_record(i16(3) + s16("group"), value, 0) == (
        "Error at offset 0, skipping. Could not read record with version 0 from value's buffer due to: "
        "Error reading byte array of 536870911 byte(s): only 1 byte(s) available.", None)
    assert decode_offsets_record(i16(3), None, 7)[0].startswith(
        "Error at offset 7, skipping. Could not read record with version 3 from key's buffer due to: ")
    assert decode_offsets_record(b"\x00", None, 7) == (
        "Error at offset 7, skipping. Could not read version from key's buffer.", None)


# ---- the classic records byte for byte, both ways ----
def test_offset_commit_records_at_every_version():
    key = i16(1) + s16("g") + s16("t") + i32(3)
    assert decode(OFFSET_COMMIT_KEY, key[2:], 1) == {"group": "g", "topic": "t", "partition": 3}
    assert encode(OFFSET_COMMIT_KEY, {"group": "g", "topic": "t", "partition": 3}, 1) == key
    values = {
        0: i16(0) + i64(42) + s16("m") + i64(1000),
        1: i16(1) + i64(42) + s16("m") + i64(1000) + i64(2000),
        3: i16(3) + i64(42) + i32(5) + s16("m") + i64(1000),
        4: i16(4) + i64(42) + i32(5) + compact("m") + i64(1000) + NO_TAGS,
    }
    commit = {"offset": 42, "leaderEpoch": 5, "metadata": "m", "commitTimestamp": 1000, "expireTimestamp": 2000}
    texts = {
        0: '{"offset":42,"metadata":"m","commitTimestamp":1000}',
        1: '{"offset":42,"metadata":"m","commitTimestamp":1000,"expireTimestamp":2000}',
        3: '{"offset":42,"leaderEpoch":5,"metadata":"m","commitTimestamp":1000}',
        4: '{"offset":42,"leaderEpoch":5,"metadata":"m","commitTimestamp":1000}',
    }
    for version, raw in values.items():
        assert encode(OFFSET_COMMIT_VALUE, commit, version) == raw
        assert decode_offsets_record(key, raw, 9) == (
            '{"type":"1","data":{"group":"g","topic":"t","partition":3}}',
            f'{{"version":"{version}","data":{texts[version]}}}')


def test_group_metadata_with_a_kafka_python_subscription_v0():
    subscription = ConsumerProtocolSubscription(version=0, topics=["a", "b"], user_data=b"x").encode(version=0)
    member = s16("m1") + s16("c") + s16("/127.0.0.1") + i32(300000) + i32(45000) + b32(subscription) + b32(b"")
    value = i16(1) + s16("consumer") + i32(2) + s16("range") + s16("m1") + i32(1) + member
    _key, payload = decode_offsets_record(i16(2) + s16("grp"), value, 0)
    assert payload == (
        '{"version":"1","data":{"protocolType":"consumer","generation":2,"protocol":"range","leader":"m1",'
        '"members":[{"memberId":"m1","clientId":"c","clientHost":"/127.0.0.1","rebalanceTimeout":300000,'
        '"sessionTimeout":45000,"subscription":{"topics":["a","b"],"userData":"eA=="},"assignment":""}]}}')
    # An empty group (no protocol chosen yet): nullable strings print null.
    empty = i16(3) + s16("consumer") + i32(0) + s16(None) + s16(None) + i64(77) + i32(0)
    assert decode_offsets_record(i16(2) + s16("grp"), empty, 0)[1] == (
        '{"version":"3","data":{"protocolType":"consumer","generation":0,"protocol":null,"leader":null,'
        '"currentStateTimestamp":77,"members":[]}}')
    assert decode(GROUP_METADATA_VALUE, empty[2:], 3)["members"] == []


@given(st.fixed_dictionaries({
    "offset": st.integers(-1, 2**63 - 1), "leaderEpoch": st.integers(-1, 2**31 - 1),
    "metadata": st.text(max_size=40), "commitTimestamp": st.integers(-1, 2**63 - 1),
    "expireTimestamp": st.integers(-1, 2**63 - 1)}), st.sampled_from([0, 1, 2, 3, 4]))
def test_offset_commit_values_round_trip(commit, version):
    raw = encode(OFFSET_COMMIT_VALUE, commit, version)
    back = decode(OFFSET_COMMIT_VALUE, raw[2:], version)
    assert back["offset"] == commit["offset"] and back["metadata"] == commit["metadata"]
    assert back["leaderEpoch"] == (commit["leaderEpoch"] if version >= 3 else -1)
    assert back["expireTimestamp"] == (commit["expireTimestamp"] if version == 1 else -1)


# ---- __transaction_state ----
def txn_value_v0(state: int, partitions) -> bytes:
    body = i32(len(partitions)) + b"".join(s16(t) + i32(len(ps)) + b"".join(map(i32, ps)) for t, ps in partitions)
    return i16(0) + i64(1000) + i16(3) + i32(60000) + bytes([state]) + body + i64(1700) + i64(1600)


def test_the_transaction_log_decoder_prints_kafkas_text():
    key = i16(0) + s16("txn-1")
    text = decode_transaction_record(key, txn_value_v0(1, [("t", [0, 1]), ("u", [2])]))
    assert text == ("transaction_metadata::transactionalId=txn-1",
                    "producerId:1000,producerEpoch:3,state=Ongoing,partitions=[t-0,t-1,u-2],"
                    "txnLastUpdateTimestamp=1700,txnTimeoutMs=60000")
    # An Empty transaction lists no partitions, whatever the record holds.
    assert "state=Empty,partitions=[]," in decode_transaction_record(key, txn_value_v0(0, [("t", [0])]))[1]
    assert decode_transaction_record(key, None) == ("transaction_metadata::transactionalId=txn-1", "<DELETE>")
    assert decode_transaction_record(i16(5) + s16("x"), b"") == ("unknown::version=5", None)
    with pytest.raises(RecordFormatError, match="Unknown version 9 from the transaction log message value"):
        decode_transaction_record(key, i16(9))


def test_the_flexible_transaction_value_and_its_tagged_fields():
    partitions = b"\x02" + compact("t") + b"\x02" + i32(4) + NO_TAGS          # one topic, one partition
    tags = b"\x02" + b"\x00\x08" + i64(999) + b"\x02\x02" + i16(2)           # previousProducerId, clientTxnVersion
    raw = i16(1) + i64(1000) + i16(0) + i32(900) + b"\x04" + partitions + i64(5) + i64(4) + tags
    fields = decode(TRANSACTION_LOG_VALUE, raw[2:], 1)
    assert (fields["previousProducerId"], fields["nextProducerId"], fields["clientTransactionVersion"]) == (999, -1, 2)
    assert encode(TRANSACTION_LOG_VALUE, fields, 1) == raw
    assert decode_transaction_record(i16(0) + s16("a"), raw)[1] == (
        "producerId:1000,producerEpoch:0,state=CompleteCommit,partitions=[t-4],txnLastUpdateTimestamp=5,"
        "txnTimeoutMs=900")


# ---- the command line ----
def _dump(capsys, path, *flags):
    code = main(["dump-log", *flags, "--files", str(path)])
    out, err = capsys.readouterr()
    return code, out, err


def test_dump_log_offsets_decoder_on_a_consumer_offsets_segment(tmp_path, capsys):
    log = PartitionLog.open(tmp_path / "__consumer_offsets-0", LogConfig())
    key = i16(1) + s16("g") + s16("t") + i32(0)
    log.append_as_leader([Record(key=key, value=i16(3) + i64(42) + i32(0) + s16("") + i64(1000), timestamp=5),
                        Record(key=key, value=None, timestamp=6),
                        Record(key=None, value=b"?", timestamp=7)], leader_epoch=0)
    log.close()
    segment = tmp_path / "__consumer_offsets-0" / "00000000000000000000.log"
    code, out, err = _dump(capsys, segment, "--offsets-decoder")
    lines = out.splitlines()
    assert lines[3] == ('| offset: 0 CreateTime: 5 keySize: 12 valueSize: 24 sequence: -1 headerKeys: [] '
                        'key: {"type":"1","data":{"group":"g","topic":"t","partition":0}} '
                        'payload: {"version":"3","data":{"offset":42,"leaderEpoch":0,"metadata":"",'
                        '"commitTimestamp":1000}}')
    assert lines[4].endswith('key: {"type":"1","data":{"group":"g","topic":"t","partition":0}} payload: <DELETE>')
    assert lines[5].endswith("headerKeys: []")           # the keyless record: no key, no payload ...
    assert code == 1 and "offset 2: Failed to decode message at offset 2" in err and str(segment) in err
    main(["dump-log", "--offsets-decoder", "--json", "--files", str(segment)])
    records = __import__("json").loads(capsys.readouterr().out)["files"][0]["batches"][0]["records"]
    assert records[0]["payload"] == {"version": "3", "data": {"offset": 42, "leaderEpoch": 0, "metadata": "",
                                                              "commitTimestamp": 1000}}


def test_dump_log_transaction_log_decoder(tmp_path, capsys):
    log = PartitionLog.open(tmp_path / "__transaction_state-0", LogConfig())
    log.append_as_leader([Record(key=i16(0) + s16("tx"), value=txn_value_v0(2, [("t", [0])]), timestamp=1)],
                       leader_epoch=0)
    log.close()
    code, out, _ = _dump(capsys, tmp_path / "__transaction_state-0" / "00000000000000000000.log",
                         "--transaction-log-decoder", "--skip-record-metadata")
    assert code == 0
    assert out.splitlines()[-1] == ("| key: transaction_metadata::transactionalId=tx payload: producerId:1000,"
                                    "producerEpoch:3,state=PrepareCommit,partitions=[t-0],"
                                    "txnLastUpdateTimestamp=1700,txnTimeoutMs=60000")
    assert main(["dump-log", "--offsets-decoder", "--transaction-log-decoder", "--files", "x.log"]) == 2
