"""The progress line the job_progress action prints while a download runs."""
from ansible_collections.kimi.deploy.plugins.action.job_progress import human_seconds, progress_line


def test_progress_line_from_a_download_document():
    line = progress_line({"state": "downloading", "bytes_done": 297_500_000_000, "bytes_total": 595_000_000_000,
                          "rate_bytes_per_s": 1.2e9, "eta_s": 248, "files_done": 30, "files_total": 72})
    assert line == "downloading 297.5 GB / 595.0 GB (50.0%), 1.2 GB/s, ETA 4m08s, files 30/72"


def test_progress_line_before_the_file_exists_and_without_a_rate():
    assert progress_line(None) == "starting"
    assert "ETA ?" in progress_line({"state": "listing", "bytes_total": 0})


def test_human_seconds():
    assert [human_seconds(s) for s in (None, 5, 65, 3725)] == ["?", "5s", "1m05s", "1h02m"]
