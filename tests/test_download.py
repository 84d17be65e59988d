"""Downloads against a local HTTP server: checksums, resume, safe extraction, idempotence."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import re
import tarfile
import threading
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from autoint.datasets.download import (
    DATASETS,
    ChecksumError,
    DatasetSource,
    DownloadError,
    ManualDownloadRequired,
    RemoteFile,
    UnsafeArchiveError,
    download,
    extract_archive,
    get_source,
)


# --------------------------------------------------------------------------- local server
@dataclass
class Server:
    base: str
    files: dict[str, bytes]
    ranges: bool = True  # honour Range headers
    from_zero: bool = False  # answer a Range request with 206 and the whole file, from byte 0
    log: list[tuple[str, str | None]] = field(default_factory=list)  # (path, Range header)
    redirects: dict[str, str] = field(default_factory=dict)  # path -> the Location a 302 sends it to

    def url(self, name: str) -> str:
        return f"{self.base}/{name}"

    def put(self, name: str, data: bytes) -> str:
        self.files[f"/{name}"] = data
        return self.url(name)


@pytest.fixture()
def server() -> Iterator[Server]:
    state = Server(base="", files={})

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.log.append((self.path, self.headers.get("Range")))
            if self.path in state.redirects:
                self.send_response(302)
                self.send_header("Location", state.redirects[self.path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = state.files.get(self.path)
            if data is None:
                self.send_error(404, "not found")
                return
            rng = self.headers.get("Range")
            m = re.fullmatch(r"bytes=(\d+)-", rng or "")
            if state.ranges and m:
                start = 0 if state.from_zero else int(m.group(1))
                if start >= len(data):
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{len(data)}")
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
                body = data[start:]
            else:
                self.send_response(200)
                body = data
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:  # keep pytest output clean
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.base = f"http://127.0.0.1:{httpd.server_address[1]}"
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        httpd.shutdown()
        httpd.server_close()


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def make_zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, data in members.items():
            zf.writestr(zipfile.ZipInfo(name), data)
    return buf.getvalue()


def make_tar_gz(members: dict[str, bytes], links: dict[str, str] | None = None) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
        for name, target in (links or {}).items():
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = target
            tf.addfile(info)
    return buf.getvalue()


@pytest.fixture()
def register(monkeypatch: pytest.MonkeyPatch):
    """Add a throw-away data set to the registry for one test."""

    def _register(files: tuple[RemoteFile, ...], folder: str = "", expected: tuple[str, ...] = ()) -> str:
        source = DatasetSource(name="toy", description="toy", homepage="-", licence="-",
                               files=files, folder=folder, expected=expected)
        monkeypatch.setitem(DATASETS, "toy", source)
        return "toy"

    return _register


TABLE = b"label\tf1\n1\ta\n0\tb\n" * 500


# --------------------------------------------------------------------------- happy paths
def test_zip_download_verify_extract_and_skip(server: Server, register, tmp_path: Path) -> None:
    blob = make_zip({"toy/data.tsv": TABLE, "toy/README": b"hello"})
    url = server.put("toy.zip", blob)
    name = register((RemoteFile(url=url, filename="toy.zip", sha256=sha256(blob), archive="zip"),),
                    folder="toy", expected=("data.tsv", "README"))

    out = download(name, tmp_path, progress=False)
    assert out == tmp_path / "toy"
    assert (out / "data.tsv").read_bytes() == TABLE
    assert (tmp_path / "toy.zip").read_bytes() == blob
    assert not (tmp_path / "toy.zip.part").exists()

    # Idempotent: a second call touches no network.
    n = len(server.log)
    assert download(name, tmp_path, progress=False) == out
    assert len(server.log) == n
    # force fetches again.
    download(name, tmp_path, progress=False, force=True)
    assert len(server.log) == n + 1


def test_tar_gz_download_with_url_and_sha256_override(server: Server, tmp_path: Path) -> None:
    blob = make_tar_gz({"dac_sample.txt": TABLE})
    url = server.put("mirror/dac_sample.tar.gz", blob)
    out = download("criteo-sample", tmp_path, progress=False, url=url, sha256=sha256(blob))
    assert out == tmp_path / "criteo-sample"
    assert (out / "dac_sample.txt").read_bytes() == TABLE


def test_md5_only_entry_is_verified(server: Server, register, tmp_path: Path) -> None:
    url = server.put("plain.tsv", TABLE)
    bad = register((RemoteFile(url=url, filename="plain.tsv", md5="0" * 32),), expected=("plain.tsv",))
    with pytest.raises(ChecksumError, match="md5 mismatch"):
        download(bad, tmp_path, progress=False)
    good = register((RemoteFile(url=url, filename="plain.tsv", md5=hashlib.md5(TABLE).hexdigest()),),
                    expected=("plain.tsv",))
    assert (download(good, tmp_path, progress=False) / "plain.tsv").read_bytes() == TABLE


# --------------------------------------------------------------------------- checksums
def test_wrong_checksum_raises_and_extracts_nothing(server: Server, register, tmp_path: Path) -> None:
    blob = make_zip({"toy/data.tsv": TABLE})
    url = server.put("toy.zip", blob)
    name = register((RemoteFile(url=url, filename="toy.zip", sha256="a" * 64, archive="zip"),),
                    folder="toy", expected=("data.tsv",))
    with pytest.raises(ChecksumError) as err:
        download(name, tmp_path, progress=False)
    msg = str(err.value)
    assert "toy.zip" in msg and "a" * 64 in msg and sha256(blob) in msg
    assert not (tmp_path / "toy").exists()
    assert not (tmp_path / "toy.zip").exists()
    assert (tmp_path / "toy.zip.part-bad").read_bytes() == blob  # kept for inspection


def test_unknown_checksum_refused_unless_no_verify(server: Server, register, tmp_path: Path) -> None:
    url = server.put("plain.tsv", TABLE)
    name = register((RemoteFile(url=url, filename="plain.tsv"),), expected=("plain.tsv",))
    with pytest.raises(ChecksumError, match=sha256(TABLE)):
        download(name, tmp_path, progress=False)
    assert not (tmp_path / "plain.tsv").exists()
    n = len(server.log)
    out = download(name, tmp_path, progress=False, verify=False)
    assert (out / "plain.tsv").read_bytes() == TABLE
    # The complete .part was kept: the retry only asked for the bytes after it.
    assert server.log[n:] == [("/plain.tsv", f"bytes={len(TABLE)}-")]


def test_accepted_unverified_file_is_reused(server: Server, register, tmp_path: Path) -> None:
    blob = make_tar_gz({"data.tsv": TABLE})
    url = server.put("toy.tar.gz", blob)
    name = register((RemoteFile(url=url, filename="toy.tar.gz", archive="tar.gz"),), expected=("data.tsv",))
    download(name, tmp_path, progress=False, verify=False)
    (tmp_path / "data.tsv").unlink()
    n = len(server.log)
    # The sha256 accepted with verify=False vouches for the kept archive: no refusal, no network.
    assert (download(name, tmp_path, progress=False) / "data.tsv").read_bytes() == TABLE
    assert len(server.log) == n


# --------------------------------------------------------------------------- resume
def test_resume_with_range(server: Server, register, tmp_path: Path) -> None:
    url = server.put("plain.tsv", TABLE)
    name = register((RemoteFile(url=url, filename="plain.tsv", sha256=sha256(TABLE)),), expected=("plain.tsv",))
    half = len(TABLE) // 2
    (tmp_path / "plain.tsv.part").write_bytes(TABLE[:half])
    download(name, tmp_path, progress=False)
    assert server.log == [("/plain.tsv", f"bytes={half}-")]
    assert (tmp_path / "plain.tsv").read_bytes() == TABLE


def test_restart_when_server_ignores_range(server: Server, register, tmp_path: Path) -> None:
    server.ranges = False
    url = server.put("plain.tsv", TABLE)
    name = register((RemoteFile(url=url, filename="plain.tsv", sha256=sha256(TABLE)),), expected=("plain.tsv",))
    (tmp_path / "plain.tsv.part").write_bytes(b"garbage that must not survive")
    download(name, tmp_path, progress=False)
    assert (tmp_path / "plain.tsv").read_bytes() == TABLE


def test_stale_complete_part_is_refetched(server: Server, register, tmp_path: Path) -> None:
    url = server.put("plain.tsv", TABLE)
    name = register((RemoteFile(url=url, filename="plain.tsv", sha256=sha256(TABLE)),), expected=("plain.tsv",))
    (tmp_path / "plain.tsv.part").write_bytes(b"x" * len(TABLE))  # right size, wrong bytes -> 416, then restart
    download(name, tmp_path, progress=False)
    assert (tmp_path / "plain.tsv").read_bytes() == TABLE


# --------------------------------------------------------------------------- unsafe archives
@pytest.mark.parametrize("kind", ["zip", "tar.gz"])
@pytest.mark.parametrize("evil", ["../evil.txt", "/tmp/autoint-evil-abs.txt", "ok/../../evil.txt"])
def test_escaping_member_rejected(server: Server, register, tmp_path: Path, kind: str, evil: str) -> None:
    members = {"toy/good.txt": b"fine", evil: b"pwned"}
    blob = make_zip(members) if kind == "zip" else make_tar_gz(members)
    fname = f"toy.{kind}"
    url = server.put(fname, blob)
    target = tmp_path / "dl"
    name = register((RemoteFile(url=url, filename=fname, sha256=sha256(blob), archive=kind),),
                    folder="toy", expected=("good.txt",))
    with pytest.raises(UnsafeArchiveError, match=re.escape(evil)):
        download(name, target, progress=False)
    assert not (tmp_path / "evil.txt").exists()
    assert not Path("/tmp/autoint-evil-abs.txt").exists()
    assert not (target / "toy").exists()  # checked before anything was written


@pytest.mark.parametrize("link", ["../../outside", "/etc/passwd", "x/../../../outside"])
def test_tar_symlink_pointing_outside_rejected(tmp_path: Path, link: str) -> None:
    archive = tmp_path / "links.tar.gz"
    archive.write_bytes(make_tar_gz({"data/x.txt": b"x"}, links={"data/link": link}))
    with pytest.raises(UnsafeArchiveError, match="link"):
        extract_archive(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "data").exists()


def _tar(members: list[tuple[str, bytes | None, str | None, bytes]]) -> bytes:
    """(name, data, link target, tar type) in order: a file where data is given, else a link."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data, target, kind in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type, info.linkname = kind, target
                tf.addfile(info)
            else:
                info.size = len(data)
                tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.mark.parametrize("members", [
    # a link inside the target: a data set's archive holds none, so none is extracted
    [("data/x.txt", b"x", None, b""), ("data/link", None, "x.txt", tarfile.SYMTYPE)],
    # x -> ., then x/x/y -> .., then x/x/y/evil: each link alone stays inside, together they climb out
    [("x", None, ".", tarfile.SYMTYPE), ("x/x/y", None, "..", tarfile.SYMTYPE), ("x/x/y/evil.txt", b"pwned", None,
                                                                                  b"")],
    # a hard link to a symbolic link that, read from its own deep folder, stays inside: tarfile copied the
    # symbolic link to the hard link's place, where it reached /etc/passwd (a helper's hunt; CVE-2025-4330's kind)
    [("d/" * 16 + "s", None, "../" * 16 + "etc/passwd", tarfile.SYMTYPE),
     ("passwd_copy", None, "d/" * 16 + "s", tarfile.LNKTYPE)],
    # a link to a folder made by a file member, then a link through it
    [("f/x", b"x", None, b""), ("d1/d2/d3/b", None, "../../../f", tarfile.SYMTYPE),
     ("d1/d2/d3/a", None, "b/../../../../ESCAPED", tarfile.SYMTYPE)],
])
def test_links_of_every_kind_are_refused_before_anything_is_written(tmp_path: Path, members) -> None:
    """Links were checked one by one, and combinations escaped those checks; tarfile's data filter stopped some,
    after files were written, and is missing from Python 3.10.0-3.10.11 (helpers' hunts)."""
    archive = tmp_path / "links.tar.gz"
    archive.write_bytes(_tar(members))
    first = next(name for name, data, _, _ in members if data is None)
    with pytest.raises(UnsafeArchiveError, match=rf"member '{re.escape(first)}' is a (symbolic|hard) link .*links "
                                                 "are not extracted"):
        extract_archive(archive, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_no_verify_accepts_an_unknown_checksum_only_and_a_finished_download_is_rechecked(
        server: Server, register, tmp_path: Path, capsys) -> None:
    """--no-verify accepted a file that did not match its published checksum, and later runs called it verified;
    a --sha256 given over a finished download was ignored; a bad archive kept under --no-verify was reused for
    another URL (a helper's hunt)."""
    blob = make_zip({"data.tsv": TABLE})
    url = server.put("toy.zip", blob)
    name = register((RemoteFile(url=url, filename="toy.zip", sha256="a" * 64, archive="zip"),),
                    expected=("data.tsv",))
    with pytest.raises(ChecksumError, match="sha256 mismatch"):
        download(name, tmp_path / "a", progress=False, verify=False)
    assert not (tmp_path / "a" / "data.tsv").exists()

    name = register((RemoteFile(url=url, filename="toy.zip", archive="zip"),), expected=("data.tsv",))
    download(name, tmp_path / "b", progress=True, verify=False)
    assert "ready in" in capsys.readouterr().err
    download(name, tmp_path / "b", progress=True)
    said = capsys.readouterr().err
    assert "already downloaded" in said and "not verified" in said and "toy.zip had no published checksum" in said
    with pytest.raises(ChecksumError, match="sha256 mismatch"):  # a digest given now is checked, not ignored
        download(name, tmp_path / "b", progress=False, sha256="b" * 64)

    bad = server.put("bad.zip", blob[: len(blob) // 2])  # a cut-short archive from one URL, then a good one
    with pytest.raises(DownloadError, match=r"not a valid zip archive .*moved to .*toy\.zip\.part-bad, and the next "
                                            r"run fetches it again"):
        download(name, tmp_path / "c", progress=False, url=bad, verify=False)
    out = download(name, tmp_path / "c", progress=False, url=url, verify=False)
    assert (out / "data.tsv").read_bytes() == TABLE


def test_an_archive_of_another_layout_says_where_its_files_went(server: Server, register, tmp_path: Path) -> None:
    blob = make_zip({"top/toy/data.tsv": TABLE})  # a mirror's extra top folder
    url = server.put("toy.zip", blob)
    name = register((RemoteFile(url=url, filename="toy.zip", sha256=sha256(blob), archive="zip"),), folder="toy",
                    expected=("data.tsv",))
    with pytest.raises(UnsafeArchiveError, match=r"member 'top/toy/data\.tsv' is not in toy/, the data set's "
                                                 r"folder; .*a mirror's archive of another layout\?"):
        download(name, tmp_path, progress=False)
    assert not (tmp_path / "top").exists()  # refused before anything was written
    blob = make_tar_gz({"top/toy/data.tsv": TABLE})  # into a folder of its own: extracted, then said
    url = server.put("toy.tar.gz", blob)
    name = register((RemoteFile(url=url, filename="toy.tar.gz", sha256=sha256(blob), archive="tar.gz", into="toy"),),
                    folder="toy", expected=("data.tsv",))
    with pytest.raises(DownloadError, match=r"toy lacks data\.tsv \(the archive put data\.tsv in .*top/toy: its "
                                            r"layout is not the one expected"):
        download(name, tmp_path, progress=False)


def test_corrupt_archive_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.zip"
    bad.write_bytes(b"not a zip")
    with pytest.raises(DownloadError, match=r"bad\.zip"):
        extract_archive(bad, tmp_path / "out")


# --------------------------------------------------------------------------- errors and registry
def assert_runnable_prepare(text: str) -> None:
    """The suggested ``autoint prepare`` command names a config, the raw input and an output folder,
    and the command line accepts it as written."""
    import re
    import shlex

    from autoint.cli import build_parser

    found = re.search(r"autoint prepare (\S+) --raw ('[^']+'|\S+) --out (\S+?)[.,]?(?:\s|$)", text)
    assert found, text
    args = build_parser().parse_args(["prepare", *shlex.split(found.group(0).removeprefix("autoint prepare "))])
    assert args.config and args.raw and args.out


@pytest.mark.parametrize("name", ["criteo-kaggle", "criteo", "criteo-1tb", "avazu"])
def test_manual_datasets_explain_where_to_get_them(name: str, tmp_path: Path) -> None:
    with pytest.raises(ManualDownloadRequired) as err:
        download(name, tmp_path, progress=False)
    msg = str(err.value)
    assert "https://" in msg
    assert_runnable_prepare(msg)
    assert list(tmp_path.iterdir()) == []


def test_unknown_name_lists_known(tmp_path: Path) -> None:
    with pytest.raises(DownloadError, match="movielens-100k"):
        download("nope", tmp_path, progress=False)


def test_http_404_and_unreachable_host(server: Server, register, tmp_path: Path) -> None:
    name = register((RemoteFile(url=server.url("missing.zip"), filename="missing.zip", sha256="a" * 64),))
    with pytest.raises(DownloadError, match="HTTP 404"):
        download(name, tmp_path, progress=False)
    # Port 9 on localhost: nothing listens there, the connection is refused at once.
    name = register((RemoteFile(url="http://127.0.0.1:9/x.zip", filename="x.zip", sha256="a" * 64),))
    with pytest.raises(DownloadError, match=r"cannot reach 127\.0\.0\.1:9"):
        download(name, tmp_path, progress=False, timeout=5)
    # A failed download into folders it made leaves none of them, where still empty (a helper's hunt: empty
    # dl/criteo-sample/ folders after each try without a network); a folder that was there stays.
    with pytest.raises(DownloadError, match=r"cannot reach 127\.0\.0\.1:9"):
        download(name, tmp_path / "new" / "dl", progress=False, timeout=5)
    assert not (tmp_path / "new").exists() and tmp_path.is_dir()


def test_registry_is_well_formed() -> None:
    for key, source in DATASETS.items():
        assert key == source.name
        assert get_source(key) is source
        for alias in source.aliases:
            assert get_source(alias) is source
        assert source.describe().startswith(key)
        if source.manual:
            assert not source.files
            assert_runnable_prepare(source.instructions)
        for f in source.files:
            assert f.url.startswith("https://")
            assert f.checksum_source
    # The published digests found for the official archives.
    ml100k = get_source("ml-100k").files[0]
    assert ml100k.sha256 == "50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229"
    assert ml100k.md5 == "0e33842e24a9c977be4e0107933c0723"
    assert get_source("ml-1m").sha256 == "a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20"


def test_frappe_checksums_match_the_shared_copies(data_dir: Path) -> None:
    """The registry's Frappe digests are those of the real files (needs the shared data)."""
    frappe = {f.filename: f for f in get_source("frappe").files}
    for name in ("frappe.validation.libfm", "frappe.test.libfm"):
        digest = hashlib.sha256((data_dir / "frappe_partial" / name).read_bytes()).hexdigest()
        assert digest == frappe[name].sha256


def test_a_full_disk_is_named_as_such_not_as_the_network(server: Server, register, tmp_path: Path,
                                                          monkeypatch) -> None:
    import errno

    url = server.put("plain.tsv", TABLE)
    name = register((RemoteFile(url=url, filename="plain.tsv", sha256=sha256(TABLE)),), expected=("plain.tsv",))

    class Full(io.BytesIO):
        def write(self, data):
            raise OSError(errno.ENOSPC, "No space left on device")

    real = Path.open
    monkeypatch.setattr(Path, "open", lambda self, mode="r", *a, **k: Full() if self.name.endswith(".part")
                        else real(self, mode, *a, **k))
    with pytest.raises(DownloadError, match=r"plain\.tsv\.part: the disk is full \(\[Errno 28\] No space left on "
                                            r"device\); free some space and run again to resume"):
        download(name, tmp_path, progress=False)


def test_a_disk_that_fills_while_extracting_keeps_the_verified_archive(server: Server, register, tmp_path: Path,
                                                                       monkeypatch, capsys) -> None:
    """A helper's hunt: the disk filling during extraction moved the verified archive to .part-bad, to be fetched
    again; its bar went to a log file, which the README says gets none; a data set of several files told a
    --sha256 given for it of "url= and sha256= overrides"."""
    import errno
    import zipfile

    blob = make_zip({"data.tsv": TABLE})
    url = server.put("toy.zip", blob)
    name = register((RemoteFile(url=url, filename="toy.zip", sha256=sha256(blob), archive="zip"),),
                    expected=("data.tsv",))
    real = zipfile.ZipFile.extractall

    def full(self, *a, **k):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(zipfile.ZipFile, "extractall", full)
    with pytest.raises(DownloadError, match=r"the disk filled while extracting toy\.zip \(\[Errno 28\] No space left "
                                            r"on device\); free some space and run again \(the archive is kept"):
        download(name, tmp_path, progress=True, bar=False)  # the command line's off a terminal
    assert (tmp_path / "toy.zip").read_bytes() == blob and not (tmp_path / "toy.zip.part-bad").exists()
    said = capsys.readouterr().err
    assert "%|" not in said and "extracting toy.zip" in said  # the messages without the bar
    monkeypatch.setattr(zipfile.ZipFile, "extractall", real)
    requests = len(server.log)
    assert (download(name, tmp_path, progress=False) / "data.tsv").read_bytes() == TABLE
    assert len(server.log) == requests  # extracted from the kept archive, not fetched again
    from autoint.cli import main

    capsys.readouterr()
    assert main(["download", name, "--to", str(tmp_path / "cli")]) == 0  # to a log file: messages, no bar
    said = capsys.readouterr().err
    assert "%|" not in said and "ready in" in said
    download(name, tmp_path / "notebook", progress=True)  # a notebook's output is no terminal either: a bar
    assert "%|" in capsys.readouterr().err
    two = register((RemoteFile(url=url, filename="a.zip", archive="zip"), RemoteFile(url=url, filename="b.zip")),
                   expected=("data.tsv",))
    with pytest.raises(DownloadError, match=r"has 2 files; a mirror's URL or digest \(--url, --sha256; .*--no-verify"):
        download(two, tmp_path / "two", progress=False, sha256="a" * 64)


# --------------------------------------------------------------------------- a helper's hunt of download
def test_an_archive_may_not_hold_a_record_of_another_finished_download(server: Server, tmp_path: Path) -> None:
    """A mirror's MovieLens 100K zip held .autoint-download-movielens-1m.json and ml-1m/*: the next download of
    movielens-1m said 'already downloaded, verified' and read the planted files."""
    official = get_source("movielens-1m").files[0].url
    stamp = json.dumps({"sha256": {"ml-1m.zip": "0" * 64}, "url": {"ml-1m.zip": official}})
    blob = make_zip({"ml-100k/u.data": TABLE, ".autoint-download-movielens-1m.json": stamp.encode()})
    url = server.put("ml-100k.zip", blob)
    with pytest.raises(UnsafeArchiveError, match=r"'\.autoint-download-movielens-1m\.json' is named as autoint's "
                                                 "record of a finished download"):
        download("movielens-100k", tmp_path, progress=False, url=url, sha256=sha256(blob))
    assert not (tmp_path / ".autoint-download-movielens-1m.json").exists() and not (tmp_path / "ml-100k").exists()


def test_an_archive_that_expands_past_its_kind_or_holds_too_many_members_is_refused(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """A 204 KB zip expanded to 201 MB, and 100,000 members took 41 s, without a word (a zip bomb's shape)."""
    import autoint.datasets.download as dl

    monkeypatch.setattr(dl, "MAX_EXTRACTED_FLOOR", 1 << 16)
    bomb = tmp_path / "bomb.zip"
    with zipfile.ZipFile(bomb, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("zeros.bin", bytes(4 << 20))
    with pytest.raises(UnsafeArchiveError, match=r"bomb\.zip: its members hold 4,194,304 bytes, more than 100 times"):
        extract_archive(bomb, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []
    monkeypatch.setattr(dl, "MAX_MEMBERS", 3)
    many = tmp_path / "many.tar.gz"
    many.write_bytes(make_tar_gz({f"f{i}": b"x" for i in range(4)}))
    with pytest.raises(UnsafeArchiveError, match=r"many\.tar\.gz: 4 members, more than the 3"):
        extract_archive(many, tmp_path / "out")


def test_a_damaged_gzip_stream_is_refused_though_tar_never_reads_its_end(tmp_path: Path) -> None:
    """tar reads each member's declared size and stops: a gzip stream with a bad CRC was extracted as good (the
    only check of criteo-sample, which has no published checksum, taken with --no-verify)."""
    blob = bytearray(make_tar_gz({"dac_sample.txt": TABLE}))
    blob[-8] ^= 0xFF  # the CRC-32 of the gzip trailer
    archive = tmp_path / "damaged.tar.gz"
    archive.write_bytes(bytes(blob))
    with pytest.raises(DownloadError, match=r"damaged\.tar\.gz: not a valid tar\.gz archive \(its gzip stream is "
                                            r"damaged: CRC check failed"):
        extract_archive(archive, tmp_path / "out")
    assert list((tmp_path / "out").iterdir()) == []


def test_encrypted_zip_members_and_methods_zipfile_cannot_read_are_one_line(tmp_path: Path) -> None:
    """An encrypted member was RuntimeError's traceback, deflate64 NotImplementedError's."""
    plain = make_zip({"data.tsv": TABLE})
    encrypted = bytearray(plain)
    for signature, flags in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):  # the general-purpose bit flag, bit 0
        at = encrypted.index(signature) + flags
        encrypted[at] |= 0x01
    deflate64 = bytearray(plain)
    for signature, method in ((b"PK\x03\x04", 8), (b"PK\x01\x02", 10)):
        at = deflate64.index(signature) + method
        deflate64[at : at + 2] = (9).to_bytes(2, "little")
    for name, blob, said in (("enc.zip", encrypted, r"member 'data\.tsv' is encrypted"),
                             ("d64.zip", deflate64, r"member 'data\.tsv' is compressed with method 9, which "
                                                    r"Python's zipfile cannot read")):
        (tmp_path / name).write_bytes(bytes(blob))
        with pytest.raises(DownloadError, match=said):
            extract_archive(tmp_path / name, tmp_path / "out")


def test_a_url_beyond_ascii_is_percent_encoded(server: Server, register, tmp_path: Path) -> None:
    """A path with 'ö' was urllib's UnicodeEncodeError traceback."""
    server.files["/d%C3%B6s.tsv"] = TABLE
    name = register((RemoteFile(url=f"{server.base}/dös.tsv", filename="plain.tsv", sha256=sha256(TABLE)),),
                    expected=("plain.tsv",))
    assert (download(name, tmp_path, progress=False) / "plain.tsv").read_bytes() == TABLE
    assert server.log == [("/d%C3%B6s.tsv", None)]


def test_a_resume_answered_from_byte_zero_takes_the_whole_file(server: Server, register, tmp_path: Path) -> None:
    """A server that answers every Range with 206 from byte 0 failed every rerun the same way, naming no way out."""
    server.from_zero = True
    url = server.put("plain.tsv", TABLE)
    name = register((RemoteFile(url=url, filename="plain.tsv", sha256=sha256(TABLE)),), expected=("plain.tsv",))
    (tmp_path / "plain.tsv.part").write_bytes(TABLE[:100])
    assert (download(name, tmp_path, progress=False) / "plain.tsv").read_bytes() == TABLE


def test_force_keeps_the_verified_file_until_new_bytes_are_verified(server: Server, register, tmp_path: Path) -> None:
    """--force deleted the verified archive before reaching the server: a server down then lost it."""
    blob = make_zip({"toy/data.tsv": TABLE})
    url = server.put("toy.zip", blob)
    name = register((RemoteFile(url=url, filename="toy.zip", sha256=sha256(blob), archive="zip"),),
                    folder="toy", expected=("data.tsv",))
    download(name, tmp_path, progress=False)
    del server.files["/toy.zip"]
    with pytest.raises(DownloadError, match="HTTP 404"):
        download(name, tmp_path, progress=False, force=True)
    assert (tmp_path / "toy.zip").read_bytes() == blob


def test_a_folder_that_cannot_be_written_is_not_called_a_network_interruption(server: Server, register,
                                                                               tmp_path: Path, monkeypatch) -> None:
    """'transfer interrupted (PermissionError ...); run again to resume' where no run could help."""
    url = server.put("plain.tsv", TABLE)
    name = register((RemoteFile(url=url, filename="plain.tsv", sha256=sha256(TABLE)),), expected=("plain.tsv",))
    real_open = Path.open

    def refuse(self, mode="r", *args, **kwargs):
        if self.name.endswith(".part") and "b" in mode and ("w" in mode or "a" in mode):
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(Path, "open", refuse)
    with pytest.raises(DownloadError, match=r"plain\.tsv\.part: cannot be written \(\[Errno 13\] Permission denied.*"
                                            r"choose a folder you may write to \(--to\)"):
        download(name, tmp_path, progress=False)


def test_a_mirrors_archive_writes_only_into_its_own_data_sets_folder(server: Server, register, tmp_path: Path) -> None:
    """MovieLens' zips extract into the download folder itself: a mirror's zip could overwrite another data set's
    verified files there, whose record still said 'already downloaded, verified' (a reviewer's catch)."""
    toy = make_zip({"toy/data.tsv": TABLE})
    name = register((RemoteFile(url=server.put("toy.zip", toy), filename="toy.zip", sha256=sha256(toy),
                                archive="zip"),), folder="toy", expected=("data.tsv",))
    download(name, tmp_path, progress=False)
    blob = make_zip({"ml-100k/u.data": TABLE, "toy/data.tsv": b"PLANTED"})
    with pytest.raises(UnsafeArchiveError, match=r"member 'toy/data\.tsv' is not in ml-100k/"):
        download("movielens-100k", tmp_path, progress=False, url=server.put("ml.zip", blob), sha256=sha256(blob))
    assert (tmp_path / "toy" / "data.tsv").read_bytes() == TABLE
    with pytest.raises(UnsafeArchiveError, match=r"named as autoint's record"):  # in any case (macOS, Windows)
        bad = tmp_path / "case.zip"
        bad.write_bytes(make_zip({".AUTOINT-DOWNLOAD-toy.json": b"{}"}))
        extract_archive(bad, tmp_path / "out")


def test_a_part_resumes_when_the_url_changed_and_the_final_file_is_not_trusted(server: Server, register,
                                                                               tmp_path: Path) -> None:
    """A changed URL dropped the .part on every run (so a download from a mirror never resumed), and the
    --no-verify rerun of a file of unknown checksum fetched bytes anew whose sha256 the user never saw."""
    first = server.put("a/plain.tsv", TABLE)
    name = register((RemoteFile(url=first, filename="plain.tsv", sha256=sha256(TABLE)),), expected=("plain.tsv",))
    download(name, tmp_path, progress=False)
    other = server.put("b/plain.tsv", TABLE)
    name = register((RemoteFile(url=other, filename="plain.tsv", sha256=sha256(TABLE)),), expected=("plain.tsv",))
    (tmp_path / "plain.tsv.part").write_bytes(TABLE[:1000])
    n = len(server.log)
    assert (download(name, tmp_path, progress=False) / "plain.tsv").read_bytes() == TABLE
    assert server.log[n:] == [("/b/plain.tsv", "bytes=1000-")]


def test_a_damaged_deflate_stream_is_a_clear_error(tmp_path: Path) -> None:
    """zlib's 'invalid block type' escaped as a bare zlib.error traceback, and the archive was not set aside."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("d.tsv", TABLE)
    blob = bytearray(buf.getvalue())
    at = blob.index(b"PK\x03\x04") + 30 + len("d.tsv")  # the first bytes of the compressed data
    blob[at : at + 4] = b"\xff\xff\xff\xff"
    (tmp_path / "damaged.zip").write_bytes(bytes(blob))
    with pytest.raises(DownloadError, match=r"damaged\.zip: not a valid zip archive \(Error -3 while decompressing"):
        extract_archive(tmp_path / "damaged.zip", tmp_path / "out")


def test_a_redirect_off_http_and_a_link_planted_as_the_part_file_are_refused(server: Server, register,
                                                                              tmp_path: Path) -> None:
    """urllib followed a redirect to ftp:// (or from https down to http), and the resumable `.part`, a name known
    in advance, was opened through a symbolic link planted under it (a security review)."""
    data = make_zip({"a.txt": b"hello"})
    url = server.put("real.zip", data)
    server.redirects["/moved.zip"] = "ftp://127.0.0.1:9/real.zip"
    name = register((RemoteFile(url=server.url("moved.zip"), filename="moved.zip", sha256=sha256(data)),))
    with pytest.raises(DownloadError, match=r"redirects to ftp://127\.0\.0\.1:9/real\.zip, which is not https"):
        download(name, tmp_path / "a", progress=False)
    server.redirects["/moved.zip"] = url  # http to http: followed
    assert download(name, tmp_path / "b", progress=False).is_dir()
    victim = tmp_path / "victim.txt"
    victim.write_text("keep")
    (tmp_path / "c").mkdir()
    name = register((RemoteFile(url=url, filename="real.zip", sha256=sha256(data)),))
    (tmp_path / "c" / "real.zip.part").symlink_to(victim)
    with pytest.raises(DownloadError, match=r"real\.zip\.part: cannot be written"):
        download(name, tmp_path / "c", progress=False)
    assert victim.read_text() == "keep"
