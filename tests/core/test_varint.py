"""The one unsigned-varint writer the codecs share: the bytes Kafka's
ByteUtils.writeUnsignedVarint writes (ByteUtilsTest.testUnsignedVarintSerde's vectors), and
what the request readers read back."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from storage.core.varint import put_uvarint, uvarint
from storage.wire.bounds import _uvarint as read_uvarint  # noqa: PLC2701 -- the reader under test's peer

# ByteUtilsTest.testUnsignedVarintSerde's cases: an int32 written as unsigned (so -1 is 2**32 - 1).
CASES = [(0, "00"), (-1, "ffffffff0f"), (1, "01"), (63, "3f"), (-64, "c0ffffff0f"), (64, "40"),
         (8191, "ff3f"), (-8192, "80c0ffff0f"), (8192, "8040"), (-8193, "ffbfffff0f"),
         (1048575, "ffff3f"), (1048576, "808040"), (2**31 - 1, "ffffffff07"), (-2**31, "8080808008")]
VECTORS = [(value & 0xFFFFFFFF, bytes.fromhex(hexed)) for value, hexed in CASES]


@pytest.mark.parametrize(("value", "expected"), VECTORS)
def test_known_bytes(value, expected):
    out = bytearray(b"head")
    put_uvarint(out, value)
    assert uvarint(value) == expected and out == b"head" + expected


@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_read_back(value):
    data = uvarint(value)
    assert read_uvarint(memoryview(data), 0, len(data), "n") == (value, len(data))
