"""A Fetch answer's records under the copy budget are copied once into its bytes (fetch_answer:
joined with the bytes around them), not added to the frame's bytearray and copied again by
bytes(): the encode's peak memory is about one answer, not two (tracemalloc)."""
from __future__ import annotations

import tracemalloc

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")

from storage.wire import codec, fetch_answer  # noqa: E402

SIZE = 96 * 1024            # under the copy budget: copied into the answer's bytes


def _body(records) -> dict:
    return {"error_code": 0, "session_id": 0, "responses": [{"topic": "t", "topic_id": 5, "partitions": [{
        "partition_index": 0, "error_code": 0, "high_watermark": 10, "last_stable_offset": 10,
        "log_start_offset": 0, "diverging_epoch": {"epoch": -1, "end_offset": -1}, "aborted_transactions": None,
        "preferred_read_replica": -1, "records": records}]}]}


@pytest.mark.parametrize("version", [4, 12, 16])
def test_records_are_copied_once(version):
    records = memoryview(bytes(range(256)) * (SIZE // 256))
    body = _body(records)
    fetch_answer.encode(1, version, 3, body)             # warm
    tracemalloc.start()
    try:
        answer = fetch_answer.encode(1, version, 3, body)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert type(answer) is bytes
    assert answer == codec.encode_response(1, version, 3, {**body, "responses": [
        {**body["responses"][0], "partitions": [{**body["responses"][0]["partitions"][0], "records": bytes(records)}]}]})
    assert peak < 1.25 * SIZE, f"peak {peak} bytes encoding {SIZE} bytes of records (two copies: ~{2 * SIZE})"


def test_an_answer_with_a_piece_of_its_own_keeps_the_copied_records_in_its_bytes():
    """Records copied and records of their own in one answer: the pieces are the bytes (the
    copied records inside them) and the piece between, as before."""
    small, big = memoryview(b"s" * SIZE), memoryview(b"b" * fetch_answer.OWN_PIECE_BYTES)
    body = _body(small)
    body["responses"][0]["partitions"].append({**body["responses"][0]["partitions"][0], "partition_index": 1,
                                               "records": big})
    answer = fetch_answer.encode(1, 16, 3, body)
    assert type(answer) is fetch_answer.Pieces
    assert [type(p) for p in answer.parts] == [bytearray, memoryview, bytearray] and answer.parts[1] is big
    assert bytes(small) in bytes(answer.parts[0])
