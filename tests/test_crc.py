import os

import pytest

from storage._native import lib


def crc(data: bytes) -> int:
    return lib.plog_crc32c(0, data, len(data))


def test_check_value():
    # kafka-reference 1.8
    assert crc(b"123456789") == 0xE3069283


@pytest.mark.parametrize("length", [0, 1, 7, 8, 9, 255, 256, 767, 768, 769, 6 * 256 - 1, 6 * 256, 6 * 256 + 1,
                                    3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1, 6 * 8192 - 1, 6 * 8192, 6 * 8192 + 1,
                                    5 * 6 * 8192 + 6 * 256 + 17, 1 << 20])
def test_hardware_and_portable_paths_agree_with_crc32c_package(length):
    crc32c = pytest.importorskip("crc32c")
    data = os.urandom(length)
    for offset in (0, 1, 3):   # unaligned starts exercise the byte-wise prologue
        chunk = data[offset:]
        expected = crc32c.crc32c(chunk)
        assert crc(chunk) == expected
        lib.plog_crc32c_force_portable(1)
        try:
            assert crc(chunk) == expected
        finally:
            lib.plog_crc32c_force_portable(0)


def test_running_crc_continues():
    data = os.urandom(100_000)
    partial = lib.plog_crc32c(0, data[:33_333], 33_333)
    assert lib.plog_crc32c(partial, data[33_333:], len(data) - 33_333) == crc(data)


def test_hardware_path_is_selected_on_sse42_machines():
    with open("/proc/cpuinfo") as f:
        has_sse42 = "sse4_2" in f.read()
    assert lib.plog_crc32c_hardware() == (1 if has_sse42 else 0)


def test_ieee_crc_for_legacy_messages():
    import zlib

    data = os.urandom(5000)
    assert lib.plog_crc32_ieee(0, data, len(data)) == zlib.crc32(data)
