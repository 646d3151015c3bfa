"""_files: a file lands whole or not at all, and the one byte formatter."""
import os

import pytest

from ansible_collections.kimi.deploy.plugins.module_utils import _files


def test_atomic_write_leaves_no_temporary_file(tmp_path):
    _files.atomic_write(str(tmp_path / "refs"), b"x" * 40, mode=0o640)
    assert os.listdir(str(tmp_path)) == ["refs"]
    assert oct(os.stat(str(tmp_path / "refs")).st_mode & 0o777) == "0o640"
    _files.atomic_write(str(tmp_path / "refs"), "text, as UTF-8: \u00e9", sync_folder=True)
    assert (tmp_path / "refs").read_bytes() == "text, as UTF-8: \u00e9".encode("utf-8")


def test_a_write_that_fails_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "archive.tar.zst"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError):
        with _files.atomic_output(str(target)) as out:
            out.write(b"half of the new")
            assert len(os.listdir(str(tmp_path))) == 2  # the temporary file, beside the old one
            raise RuntimeError("the stream broke")
    assert target.read_bytes() == b"old"
    assert os.listdir(str(tmp_path)) == ["archive.tar.zst"]


def test_a_named_prefix_names_the_temporary_file(tmp_path):
    seen = []
    with _files.atomic_output(str(tmp_path / "MANIFEST.json"), prefix=".MANIFEST.json.tmp-") as out:
        seen.extend(os.listdir(str(tmp_path)))
        out.write(b"{}")
    assert len(seen) == 1 and seen[0].startswith(".MANIFEST.json.tmp-")
    assert os.listdir(str(tmp_path)) == ["MANIFEST.json"]


def test_human_size_is_the_one_decimal_formatter():
    assert [_files.human_size(n) for n in (0, 999, 1000, 1.5e9, 595e9, 12e15, None)] == [
        "0.0 B", "999.0 B", "1.0 KB", "1.5 GB", "595.0 GB", "12000.0 TB", "0.0 B"]
