"""Unsigned varints (protobuf's base-128 form: seven bits a byte, least significant first, the
high bit set on every byte but the last), as Kafka's flexible versions write lengths, counts and
tags (ByteUtils.writeUnsignedVarint).  The one writer the codecs share."""
from __future__ import annotations


def put_uvarint(out: bytearray, n: int) -> None:
    """Append `n` (>= 0) to `out`."""
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def uvarint(n: int) -> bytes:
    """`n` (>= 0) as its bytes."""
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    put_uvarint(out, n)
    return bytes(out)
