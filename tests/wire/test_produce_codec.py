"""produce_codec against kio, for every Produce version it takes on: the response laid out byte
for byte as kio's writer (codec.encode_response_kio) writes it, over generated bodies (record
errors, error messages, current_leader and node_endpoints from v10); the request read as kio
reads it (codec.parse_request_kio), the records a view of the frame; and a frame cut, flipped
or grown gets the same answer from codec.parse_request as from kio alone (the same request, or
a ProtocolError with the same reason)."""
from __future__ import annotations

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from storage.core.records import build_batch  # noqa: E402
from storage.wire import codec, produce_codec  # noqa: E402

RESPONSE_VERSIONS = range(produce_codec.FIRST_VERSION, produce_codec.LAST_RESPONSE_VERSION + 1)
REQUEST_VERSIONS = range(produce_codec.FIRST_VERSION, produce_codec.LAST_REQUEST_VERSION + 1)
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

int32 = st.integers(-2**31, 2**31 - 1)
int64 = st.integers(-2**63, 2**63 - 1)
text = st.text(max_size=20)
names = st.text(min_size=1, max_size=300)       # past 127 bytes: a two-byte varint length
record_error = st.fixed_dictionaries({"batch_index": int32}, optional={"batch_index_error_message": st.none() | text})
leader = st.fixed_dictionaries({"leader_id": st.sampled_from([-1, 0, 3]), "leader_epoch": st.sampled_from([-1, 0, 7])})
partition = st.fixed_dictionaries(
    {"index": int32, "error_code": st.integers(-1, 120), "base_offset": int64,
     "record_errors": st.lists(record_error, max_size=3)},
    optional={"log_start_offset": int64, "error_message": st.none() | text, "current_leader": leader,
              "log_append_time": st.sampled_from([-1, None, 0, 1_700_000_000_123])})
topic = st.fixed_dictionaries({"name": names, "partition_responses": st.lists(partition, max_size=4)})
endpoint = st.fixed_dictionaries({"node_id": int32, "host": names, "port": int32}, optional={"rack": st.none() | text})
response = st.fixed_dictionaries({"responses": st.lists(topic, max_size=3)},
                                 optional={"throttle_time": st.integers(0, 2**31 - 1),
                                           "node_endpoints": st.lists(endpoint, max_size=2)})


@pytest.mark.parametrize("version", RESPONSE_VERSIONS)
@SETTINGS
@given(body=response, correlation_id=int32)
def test_response_bytes_are_kios(version, body, correlation_id):
    expected = codec.encode_response_kio(0, version, correlation_id, body)
    assert produce_codec.encode_response(version, correlation_id, body) == expected
    assert codec.encode_response(0, version, correlation_id, body) == expected


@pytest.mark.parametrize("version", RESPONSE_VERSIONS)
def test_response_of_the_handler_and_the_error_path(version):
    """The bodies the broker sends: apis.produce's, and error_answers' (log_append_time -1)."""
    ok = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 0, "base_offset": 41, "log_start_offset": 0, "error_message": None,
         "record_errors": [{"batch_index": 2, "batch_index_error_message": "bad key"}]},
        {"index": 1, "error_code": 6, "base_offset": -1, "log_start_offset": -1, "record_errors": [],
         "error_message": "not the leader", "current_leader": {"leader_id": 2, "leader_epoch": 5}}]}],
        "node_endpoints": [{"node_id": 2, "host": "b2", "port": 9093, "rack": None}]}
    failed = {"responses": [{"name": "t", "partition_responses": [
        {"index": 0, "error_code": 1, "base_offset": -1, "log_append_time": -1, "log_start_offset": -1,
         "record_errors": []}]}]}
    for body in (ok, failed):
        assert produce_codec.encode_response(version, 9, body) == codec.encode_response_kio(0, version, 9, body)


records = st.none() | st.binary(max_size=300) | st.builds(
    lambda values: build_batch(values), st.lists(st.binary(max_size=40), min_size=1, max_size=5))
request_partition = st.fixed_dictionaries({"index": int32, "records": records})
request_topic = st.fixed_dictionaries({"name": names, "partition_data": st.lists(request_partition, max_size=3)})
request = st.fixed_dictionaries({"transactional_id": st.none() | text, "acks": st.sampled_from([-1, 0, 1, 2]),
                                 "timeout": st.integers(0, 2**31 - 1),
                                 "topic_data": st.lists(request_topic, max_size=3)})


def _same(fast, slow) -> None:
    """produce_codec's (header, request) reads as kio's."""
    (fh, fr), (sh, sr) = fast, slow
    assert (fh.request_api_key, fh.request_api_version, fh.correlation_id, fh.client_id) == \
        (sh.request_api_key, sh.request_api_version, sh.correlation_id, sh.client_id)
    assert (fr.__version__, fr.transactional_id, fr.acks, fr.timeout) == \
        (type(sr).__version__, sr.transactional_id, sr.acks, codec.ms(sr.timeout))
    assert [(t.name, [(p.index, None if p.records is None else bytes(p.records)) for p in t.partition_data])
            for t in fr.topic_data] == \
        [(t.name, [(p.index, p.records) for p in t.partition_data]) for t in sr.topic_data]


@pytest.mark.parametrize("version", REQUEST_VERSIONS)
@SETTINGS
@given(body=request, correlation_id=int32, client_id=st.none() | text)
def test_request_read_as_kio_reads_it(version, body, correlation_id, client_id):
    frame = codec.encode_request(0, version, correlation_id, client_id, body)[4:]
    fast = produce_codec.read_request(frame)
    assert fast is not None
    _same(fast, codec.parse_request_kio(frame))
    for t in fast[1].topic_data:
        for p in t.partition_data:
            assert p.records is None or isinstance(p.records, memoryview) and p.records.obj is frame


def _answer(parse, frame):
    try:
        return "parsed", parse(frame)
    except codec.ProtocolError as exc:
        return "refused", str(exc)


@pytest.mark.parametrize("version", REQUEST_VERSIONS)
@SETTINGS
@given(body=request, cut=st.integers(0, 400), flips=st.lists(st.tuples(st.integers(0, 400), st.integers(0, 255)),
                                                             max_size=3), tail=st.binary(max_size=8))
def test_a_damaged_frame_is_answered_as_before(version, body, cut, flips, tail):
    """Cut, flipped or grown: codec.parse_request (the fast path first) answers what kio alone does."""
    frame = bytearray(codec.encode_request(0, version, 7, "c", body)[4:])
    for at, value in flips:
        if 8 <= at < len(frame):            # the API key and version stay (peek_api's choice)
            frame[at] = value
    frame = bytes(frame[:max(8, len(frame) - cut)] + tail)
    (kind, got), (kind_kio, want) = _answer(codec.parse_request, frame), _answer(codec.parse_request_kio, frame)
    assert kind == kind_kio
    if kind == "refused":
        assert got == want
    else:
        _same(got, want)


def _read_as_kio(frames):
    """Each of `frames` (all starting as the last shape remembered) read by codec.parse_request as
    kio reads it, or refused alike: yields (frame, the fast read or None when refused)."""
    for frame in frames:
        assert frame.startswith(produce_codec._RECENT[0].tail, 8)
        (kind, got), (kind_kio, want) = _answer(codec.parse_request, frame), _answer(codec.parse_request_kio, frame)
        assert kind == kind_kio, frame[-8:]
        if kind == "refused":
            assert got == want
            yield frame, None
        else:
            _same(got, want)
            yield frame, got


@pytest.mark.parametrize("version", REQUEST_VERSIONS)
def test_a_request_like_the_last_one_is_read_as_kio_reads_it(version):
    """A one-partition request is remembered (produce_codec._Known): the next frame with the
    same bytes up to its records -- another correlation id and records, or records cut short,
    or a tagged field, or bytes after it -- is read from there, and answered as kio answers it
    (fails without the read of the tail's lengths and tags: parsed where kio refuses)."""
    def frame_of(correlation_id, records):
        body = {"transactional_id": None, "acks": -1, "timeout": 1500,
                "topic_data": [{"name": "topic-ü", "partition_data": [{"index": 3, "records": records}]}]}
        return codec.encode_request(0, version, correlation_id, "producer-1", body)[4:]

    produce_codec._RECENT.clear()
    first = frame_of(1, build_batch([b"a"]))
    _same(produce_codec.read_request(first), codec.parse_request_kio(first))
    assert [known.index for known in produce_codec._RECENT] == [3]
    big = build_batch([b"v" * 300] * 60)           # a length of three varint bytes from v9
    frames = [frame_of(2, build_batch([b"b", b"c"])), frame_of(3, None), frame_of(4, b""), frame_of(5, big)]
    whole = frame_of(6, big)
    frames += [whole[:-5], whole[:-1], whole + b"tail", whole[:-1] + b"\1"]
    if version >= produce_codec.FLEXIBLE_FROM:
        frames += [whole[:-3] + b"\1\0\0", whole[:-2] + b"\1\0", whole[:-3]]
    for frame, got in _read_as_kio(frames):
        assert got is None or got[1].topic_data[0].partition_data[0].records is None or \
            got[1].topic_data[0].partition_data[0].records.obj is frame
    assert len(produce_codec._RECENT) == 1          # read from the remembered shape, nothing new learnt


@pytest.mark.parametrize("version", REQUEST_VERSIONS)
def test_a_request_to_the_same_topic_is_read_as_kio_reads_it(version):
    """A one-topic request of several partitions is remembered through its topic's name
    (produce_codec._KnownTopic): the next frames to that topic -- other partitions, one or many,
    null or empty records, cut short, a tagged field, bytes after -- have their partitions walked
    and are answered as kio answers them."""
    def frame_of(correlation_id, parts):
        body = {"transactional_id": None, "acks": 1, "timeout": 1500,
                "topic_data": [{"name": "topic-ü", "partition_data": [{"index": i, "records": r} for i, r in parts]}]}
        return codec.encode_request(0, version, correlation_id, "producer-1", body)[4:]

    produce_codec._RECENT.clear()
    first = frame_of(1, [(0, build_batch([b"a"])), (5, build_batch([b"b"]))])
    _same(produce_codec.read_request(first), codec.parse_request_kio(first))
    assert [type(known).__name__ for known in produce_codec._RECENT] == ["_KnownTopic"]
    big = build_batch([b"v" * 300] * 60)
    frames = [frame_of(2, [(7, build_batch([b"c"]))]), frame_of(3, [(i, build_batch([b"d"] * i)) for i in range(1, 6)]),
              frame_of(4, [(1, None), (2, b"")]), frame_of(5, [(3, big), (3, big)]), frame_of(6, [])]
    whole = frame_of(7, [(0, big), (1, build_batch([b"e"]))])
    frames += [whole[:-5], whole[:-1], whole + b"tail", whole[:-1] + b"\1"]
    if version >= produce_codec.FLEXIBLE_FROM:
        frames += [whole[:-2] + b"\1\0", whole[:-3] + b"\1\0\0", whole[:-3]]
    list(_read_as_kio(frames))
    assert [type(known).__name__ for known in produce_codec._RECENT] == ["_KnownTopic"]    # nothing new learnt
    shape, parts = produce_codec.known_parts(frames[1])
    assert shape is produce_codec._RECENT[0] and [i for i, _ in parts] == [1, 2, 3, 4, 5]
    assert all(records.obj is frames[1] for _, records in parts)


@pytest.mark.parametrize("version", RESPONSE_VERSIONS)
def test_the_one_row_answer_is_kios(version):
    """The answer of one partition's row as apis.produce writes it (the bytes around the row laid
    out once per version and topic: produce_codec._layout) is kio's, for names of one- and
    two-byte lengths, any error code, offsets and log append time; other rows (a message, record errors, extra
    fields) take the general layout."""
    from storage.core.errors import Errors
    for name in ("t", "ü" * 70):
        for code, base, start, at in ((0, 41, 0, -1), (Errors.NOT_LEADER_OR_FOLLOWER, -1, -1, -1),
                                      (0, 2**62, 2**61, 1_795_000_000_000)):
            row = {"index": 7, "error_code": code, "base_offset": base, "log_start_offset": start,
                   "log_append_time": at, "record_errors": [], "error_message": None}
            for body in ({"responses": [{"name": name, "partition_responses": [row]}]},
                         {"responses": [{"name": name, "partition_responses": [{**row, "error_message": "no"}]}]},
                         {"responses": [{"name": name, "partition_responses": [row]}], "throttle_time": 5}):
                assert produce_codec.encode_response(version, 9, body) == codec.encode_response_kio(0, version, 9, body)
    assert ((version, "t") in produce_codec._LAYOUT) == (version >= 5)


@pytest.mark.parametrize("version", [v for v in RESPONSE_VERSIONS if v >= 5])
@SETTINGS
@given(name=names, rows=st.lists(st.tuples(int32, st.integers(0, 2**62), st.integers(0, 2**62),
                                          st.one_of(st.just(-1), st.integers(0, 2**43))), min_size=1, max_size=70),
       correlation_id=int32)
def test_the_answer_of_several_rows_is_kios(version, name, rows, correlation_id):
    """The express path's answer of one topic's partitions without errors (encode_rows: the
    layout of encode_row, a row per partition, 1 to 70 of them: a count of one or two varint
    bytes from v9; a LogAppendTime topic's log append time, or -1) is kio's."""
    body = {"responses": [{"name": name, "partition_responses": [
        {"index": i, "error_code": 0, "base_offset": base, "log_start_offset": start, "log_append_time": at,
         "record_errors": [], "error_message": None} for i, base, start, at in rows]}]}
    assert produce_codec.encode_rows(version, correlation_id, name, rows) == \
        codec.encode_response_kio(0, version, correlation_id, body)


@pytest.mark.parametrize("frame_hex", [
    "0000000900000001ffff010000000103e800",           # v9 with a tagged field in the header: kio's
    "00000003000000010000ffff0001000003e8ffffffff",   # v3 with a null topics array: refused
    "000000030000000100007fff",                       # a client id longer than the frame
])
def test_frames_it_leaves_to_kio(frame_hex):
    frame = bytes.fromhex(frame_hex)
    assert produce_codec.read_request(frame) is None
    assert _answer(codec.parse_request, frame) == _answer(codec.parse_request_kio, frame)


def test_the_broker_answers_a_fast_read_request_as_a_kio_read_one(tmp_path):
    """Through ClientApis.produce on two embedded nodes: a request of three partitions over two
    topics (one refused: an internal topic) and acks 1, -1 and 0 gets the same answer from the
    produce_codec request as from kio's, with the same offsets; acks=0 answers nothing, and its
    errors close the connection (later.Close, with the same rows)."""
    import asyncio

    from storage.wire.later import Close, Later
    from storage.wire.node import Node
    from storage.wire.server import BrokerServer

    loop = asyncio.new_event_loop()
    batch = build_batch([b"a", b"b", b"c"])
    answers = {}
    for name, parse in (("kio", codec.parse_request_kio), ("fast", codec.parse_request)):
        node = Node(tmp_path / name, offsets_partitions=1, background=False)
        server = BrokerServer(node, initial_rebalance_delay_ms=0)
        try:
            loop.run_until_complete(node.create_topic("a", 2, 1))
            loop.run_until_complete(node.create_topic("b", 1, 1))
            got = []
            for acks in (1, -1, 0, 1):
                frame = codec.encode_request(0, 9, 5, "c", {"transactional_id": None, "acks": acks, "timeout": 1000,
                                                            "topic_data": [
                    {"name": "a", "partition_data": [{"index": 0, "records": batch}, {"index": 1, "records": batch}]},
                    {"name": "__consumer_offsets", "partition_data": [{"index": 0, "records": batch}]},
                    {"name": "b", "partition_data": [{"index": 0, "records": None}]}]})[4:]
                body = loop.run_until_complete(server.apis.produce(*parse(frame)))
                if isinstance(body, Later):         # acks=-1: the answer still to come
                    body = loop.run_until_complete(body.rest)
                got.append(body)
            answers[name] = got
        finally:
            loop.run_until_complete(node.shutdown())
    assert answers["fast"] == answers["kio"]
    first, second, closed, fourth = answers["fast"]
    assert type(closed) is Close        # acks=0 with errors (the internal topic, null records): no answer, a close
    assert closed.body["responses"][1:] == fourth["responses"][1:]      # the same refusals as acks=1
    assert [[p["base_offset"] for p in t["partition_responses"]] for t in fourth["responses"]] == [[9, 9], [-1], [-1]]
    assert fourth["responses"][1]["partition_responses"][0]["error_code"] == 17      # INVALID_TOPIC_EXCEPTION
    loop.close()


def test_an_acks_all_produce_covered_at_once_is_answered_without_a_wait(tmp_path):
    """acks=-1 to a partition of one replica: the append moves the high watermark past the batch
    in the same call, so ClientApis.produce answers without yielding to the event loop (its
    coroutine ends at the first step; it waited one loop turn in asyncio.gather before)."""
    import asyncio

    from storage.wire.node import Node
    from storage.wire.server import BrokerServer

    loop = asyncio.new_event_loop()
    node = Node(tmp_path / "n", offsets_partitions=1, background=False)
    server = BrokerServer(node, initial_rebalance_delay_ms=0)
    try:
        loop.run_until_complete(node.create_topic("a", 1, 1))
        frame = codec.encode_request(0, 9, 5, "c", {"transactional_id": None, "acks": -1, "timeout": 1000, "topic_data": [
            {"name": "a", "partition_data": [{"index": 0, "records": build_batch([b"x"])}]}]})[4:]

        async def first_step():
            step = server.apis.produce(*codec.parse_request(frame))
            with pytest.raises(StopIteration) as done:
                step.send(None)
            return done.value.value

        answer = loop.run_until_complete(first_step())
        row = answer["responses"][0]["partition_responses"][0]
        assert (row["error_code"], row["base_offset"]) == (0, 0)
    finally:
        loop.run_until_complete(node.shutdown())
        loop.close()
