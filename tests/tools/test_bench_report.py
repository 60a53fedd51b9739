"""benchmarks/report.py, which writes RESULTS.md from a pytest-benchmark JSON: a count a
benchmark did not record is left out of the text, never printed as "None"."""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("bench_report", Path(__file__).parents[2] / "benchmarks" / "report.py")
report = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(report)


def test_volume_text_names_only_what_was_recorded():
    whole = {"bytes": 256 * 2**20, "batches": 16492, "batch_bytes": 16384, "records_per_batch": 160}
    assert report.volume_text(whole, "bytes") == "256 MiB in 16492 batches of 16384 bytes (160 records of 100 bytes each)"
    assert report.volume_text({"bytes": 256 * 2**20, "batches": 16492}, "bytes") == "256 MiB in 16492 batches"
    assert report.volume_text({"bytes": 64 * 2**20}, "bytes") == "64 MiB"
    assert report.volume_text({"records": 100000}, "records") == "100000 records (100-byte values)"
    assert report.volume_text({"records": 10, "batches": 2, "records_per_batch": 5}, "records") == \
        "10 records (2 batches of 5, 100-byte values)"
    assert report.volume_text({}, "records") == "records (100-byte values)"
    for extra in ({"bytes": 2**20}, {"records": 3}, {}):
        assert "None" not in report.volume_text(extra, "bytes") + report.volume_text(extra, "records")
