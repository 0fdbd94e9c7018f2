"""A zip's central directory is counted before ``zipfile`` reads it (``ingest.zipdir``): refused from the end
record's count and size alone (zip64 too), then header by header when the record lies, so that a directory of
millions of entries costs nothing to refuse; honest archives, zip64 ones included, still pass. A tar, which has
no directory, is counted header by header before ``tarfile`` reads it (it keeps every member it has read)."""

from __future__ import annotations

import io
import tarfile
import zipfile

import pytest

from ascendscope.ingest import archive, zipdir
from ascendscope.ingest.archive_errors import ArchiveError
from ascendscope.sample_data.hostile import many_entries_zip, sparse_directory_zip
from tests.archives import zip_folder
from tests.samples import PYTORCH_TEXT


@pytest.fixture()
def no_zipfile(monkeypatch):
    """``zipfile.ZipFile`` fails if it is opened: what is refused must be refused before it reads the directory."""

    def opened(*args, **kwargs):
        raise AssertionError("zipfile read the directory")

    monkeypatch.setattr(archive.zipfile, "ZipFile", opened)


def test_millions_of_entries_are_refused_from_the_end_record(tmp_path, no_zipfile):
    """4,000,000 entries claimed over a 224 MB directory that is a hole: the end record alone refuses it (zipfile
    would read the 224 MB into memory and build an entry per header first)."""
    path = sparse_directory_zip(tmp_path / "many.zip", 4_000_000, 224_000_000)
    with pytest.raises(ArchiveError, match="lists 4000000 entries: more than 100000 members") as err:
        archive.unpack(path, tmp_path / "out")
    assert err.value.kind == "too_large" and not (tmp_path / "out").exists()


def test_a_directory_larger_than_its_members_can_need_is_refused(tmp_path, no_zipfile):
    path = sparse_directory_zip(tmp_path / "fat.zip", 10, 300_000_000)
    with pytest.raises(ArchiveError, match="central directory of 300 MB") as err:
        archive.unpack(path, tmp_path / "out", archive.Limits(max_members=100_000))
    assert err.value.kind == "too_large"
    small = sparse_directory_zip(tmp_path / "small.zip", 10, 1 << 20)  # allowed: a bad directory, said so
    with pytest.raises(ArchiveError, match="bad central directory") as err:
        archive.unpack(small, tmp_path / "out")
    assert err.value.kind == "corrupt"


def test_a_record_that_lies_about_the_count_is_caught_header_by_header(tmp_path, no_zipfile):
    path = many_entries_zip(tmp_path / "liar.zip", 300_000, listed=5)
    with pytest.raises(ArchiveError, match="more than 1000 members") as err:
        archive.unpack(path, tmp_path / "out", archive.Limits(max_members=1000))
    assert err.value.kind == "too_large"


def test_folders_count_apart_from_files(tmp_path):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for i in range(30):
            zf.writestr(f"d{i}/", b"")
        for i in range(10):
            zf.writestr(f"d0/f{i}.txt", b"abc")
    (tmp_path / "f.zip").write_bytes(buf.getvalue())
    found = zipdir.check(tmp_path / "f.zip", 30)
    assert (found.listed, found.files, found.folders, found.declared_bytes) == (40, 10, 30, 30)
    with pytest.raises(ArchiveError, match="more than 20 folders"):
        zipdir.check(tmp_path / "f.zip", 20)


def test_zip64_records_and_sizes_are_read(tmp_path):
    """zipfile writes zip64 end records past 65,535 entries and zip64 sizes when asked: both read as zipfile reads
    them, and a real sample zipped this way still unpacks."""
    path = tmp_path / "z64.zip"
    with zipfile.ZipFile(path, "w") as zf:
        for i in range(70_000):
            zf.writestr(f"e/{i}", b"")
        with zf.open("big.bin", "w", force_zip64=True) as out:
            out.write(bytes(5000))
    found = zipdir.check(path, 100_000)
    assert (found.listed, found.files, found.declared_bytes) == (70_001, 70_001, 5000)
    sample = tmp_path / "level1.zip"
    sample.write_bytes(zip_folder(PYTORCH_TEXT / "level1"))
    done = archive.unpack(sample, tmp_path / "out")
    assert done.members == zipdir.check(sample, 100_000).files > 0


def test_data_before_the_zip_shifts_the_directory_as_zipfile_reads_it(tmp_path):
    data = zip_folder(PYTORCH_TEXT / "level1")
    (tmp_path / "prefixed.zip").write_bytes(b"#!/bin/sh\nexit 0\n" + data)
    assert zipdir.check(tmp_path / "prefixed.zip", 100_000).files == len(zipfile.ZipFile(io.BytesIO(data)).infolist())


def test_a_tar_is_counted_before_tarfile_reads_it(tmp_path, monkeypatch):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for i in range(5000):
            tf.addfile(tarfile.TarInfo(f"job/f{i}.txt"), io.BytesIO(b""))
    (tmp_path / "many.tar.gz").write_bytes(buf.getvalue())

    def opened(*args, **kwargs):
        raise AssertionError("tarfile read the archive")

    monkeypatch.setattr(archive.tarfile, "open", opened)
    with pytest.raises(ArchiveError, match="more than 1000 members") as err:
        archive.unpack(tmp_path / "many.tar.gz", tmp_path / "out", archive.Limits(max_members=1000))
    assert err.value.kind == "too_large"
