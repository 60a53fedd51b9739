import os
import random

import pytest

from storage.core._native import lib


def crc(data: bytes) -> int:
    return lib.plog_crc32c(0, data, len(data))


def test_check_value():
    # docs/kafka-formats.md 1.8
    assert crc(b"123456789") == 0xE3069283


def _cpu_flags() -> set[str]:
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    return set()


def _detected_path() -> int:
    flags = _cpu_flags()
    if "sse4_2" not in flags:
        return 0
    return 2 if {"avx512f", "vpclmulqdq", "pclmulqdq"} <= flags else 1


PATHS = [pytest.param(path, id=name) for path, name in ((0, "portable"), (1, "sse42"), (2, "vpclmulqdq"))]


@pytest.fixture(params=PATHS)
def crc_path(request):
    """Run the test with the CRC capped at one path; a path the CPU lacks is skipped."""
    path = request.param
    if path > _detected_path():
        pytest.skip(f"this CPU has no {['portable', 'SSE4.2', 'VPCLMULQDQ + AVX-512'][path]} CRC path")
    lib.plog_crc32c_limit(path)
    try:
        assert lib.plog_crc32c_path() == path
        yield path
    finally:
        lib.plog_crc32c_limit(2)


# Lengths at every edge of every path: the byte prologue, the six-chain and three-chain blocks,
# and the folding kernel's 256-byte start, its 256-byte loop, its 64-byte and 16-byte tails.
LENGTHS = [0, 1, 7, 8, 9, 15, 16, 17, 255, 256, 257, 271, 272, 319, 320, 321, 335, 336, 511, 512, 513,
           767, 768, 769, 6 * 256 - 1, 6 * 256, 6 * 256 + 1, 16384 - 21,
           3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1, 6 * 8192 - 1, 6 * 8192, 6 * 8192 + 1,
           5 * 6 * 8192 + 6 * 256 + 17, 1 << 20]


def test_every_path_agrees_with_crc32c_package(crc_path):
    crc32c = pytest.importorskip("crc32c")
    data = os.urandom(max(LENGTHS) + 64)
    for length in LENGTHS:
        for offset in (0, 1, 3, 21):   # unaligned starts: the byte prologue, a batch's CRC at offset 21
            chunk = data[offset:offset + length]
            assert crc(chunk) == crc32c.crc32c(chunk), (length, offset)


def test_every_path_agrees_on_random_lengths(crc_path):
    crc32c = pytest.importorskip("crc32c")
    rng = random.Random(crc_path)
    data = os.urandom(70_000)
    for _ in range(300):
        offset = rng.randrange(64)
        chunk = data[offset:offset + rng.randrange(len(data) - 64)]
        assert crc(chunk) == crc32c.crc32c(chunk), (len(chunk), offset)


def test_running_crc_continues(crc_path):
    data = os.urandom(100_000)
    for cut in (0, 5, 255, 256, 33_333, 99_999):
        partial = lib.plog_crc32c(0, data[:cut], cut)
        assert lib.plog_crc32c(partial, data[cut:], len(data) - cut) == crc(data), cut


def test_fastest_path_is_selected():
    assert lib.plog_crc32c_path() == _detected_path()


def test_a_flipped_bit_changes_the_crc_on_every_path(crc_path):
    data = bytearray(os.urandom(4096))
    before = crc(bytes(data))
    for bit in (0, 8 * 255 + 3, 8 * 2048 + 7, 8 * 4095 + 7):
        data[bit // 8] ^= 1 << (bit % 8)
        assert crc(bytes(data)) != before, bit
        data[bit // 8] ^= 1 << (bit % 8)


def test_ieee_crc_for_legacy_messages():
    import zlib

    data = os.urandom(5000)
    assert lib.plog_crc32_ieee(0, data, len(data)) == zlib.crc32(data)
