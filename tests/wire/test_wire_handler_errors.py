"""A handler that raises is answered, not a dropped connection (issue 30, item 11): every served
API of the broker and the controller tables gets Kafka's error response (AbstractRequest.
getErrorResponse) with the exception's code, on the same connection, which stays open."""
from __future__ import annotations

import asyncio
import dataclasses
import logging
import struct

import pytest

pytest.importorskip("kio", reason="the wire front end needs kio")
from wire_frames import full_frame, served  # noqa: E402

from storage.core import errors  # noqa: E402
from storage.wire import codec  # noqa: E402
from storage.wire.server import FrameServer  # noqa: E402


def _error_codes(entity) -> list[int]:
    """Every error code in a response entity, at any depth."""
    found = []
    for f in dataclasses.fields(entity):
        value = getattr(entity, f.name)
        items = value if isinstance(value, tuple) else (value,)
        for item in items:
            if dataclasses.is_dataclass(item):
                found += _error_codes(item)
            elif f.name in ("error_code", "partition_error_code"):       # the latter: AddPartitionsToTxn v0-3
                found.append(int(item.value if hasattr(item, "value") else item))
    return found


def _raising_server(table: dict, exc: Exception) -> FrameServer:
    server = FrameServer(table)

    async def broken(header, request):
        raise exc
    server.handlers = {key: broken for key in table}
    return server


async def _exchange_on_one_connection(server: FrameServer, frames: list[bytes]) -> list[bytes]:
    port = await server.listen("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    answers = []
    try:
        for frame in frames:
            writer.write(struct.pack(">i", len(frame)) + frame)
            size = struct.unpack(">i", await asyncio.wait_for(reader.readexactly(4), 10))[0]
            answers.append(await asyncio.wait_for(reader.readexactly(size), 10))
    finally:
        writer.close()
        server.stop_listening()
    return answers


@pytest.mark.parametrize("table", [codec.SUPPORTED, codec.CONTROLLER_SUPPORTED], ids=["broker", "controller"])
def test_every_served_api_answers_a_raising_handler_on_the_same_connection(table, caplog):
    requests = served(table)
    server = _raising_server(table, RuntimeError("a handler bug"))
    with caplog.at_level(logging.ERROR, logger="storage.wire"):
        answers = asyncio.run(_exchange_on_one_connection(server, [full_frame(k, v) for k, v in requests]))
    assert len(answers) == len(requests)
    for (key, version), answer in zip(requests, answers):
        correlation_id, response = codec.decode_response(key, version, answer)
        assert correlation_id == 7
        codes = _error_codes(response)
        assert codes and set(codes) == {errors.Errors.UNKNOWN_SERVER_ERROR}, (codec.api_name(key), version, codes)
    logged = [r for r in caplog.records if "the handler raised" in r.getMessage()]
    assert len(logged) == len(requests)                     # once each, with its traceback
    assert all(r.exc_info and "a handler bug" in str(r.exc_info[1]) for r in logged)
    assert sum(server.handler_errors.values()) == len(requests)


def test_a_storage_errors_own_code_is_the_answer():
    server = _raising_server(codec.SUPPORTED, errors.OffsetOutOfRangeError("offset 9 of t-0 is beyond 3"))
    frames = [full_frame(2, 7), full_frame(0, 9)]
    answers = asyncio.run(_exchange_on_one_connection(server, frames))
    for (key, version), answer in zip([(2, 7), (0, 9)], answers):
        _, response = codec.decode_response(key, version, answer)
        assert set(_error_codes(response)) == {errors.Errors.OFFSET_OUT_OF_RANGE}
