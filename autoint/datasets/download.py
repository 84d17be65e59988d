"""Fetch public CTR data sets from their official sources, safely.

``download(name, to)`` fetches each file of a registered data set into ``to``,
verifies its checksum *before* anything is extracted, extracts archives with no
member allowed outside the target folder, and returns the folder holding the
data. ``autoint download NAME --to DIR`` is a thin wrapper over it.

Behaviour worth knowing:

* **Resumable.** A file is fetched into ``<file>.part``; a later call resumes
  it with an HTTP ``Range`` request when the server honours one, and starts over
  when it does not.
* **Verified.** A finished ``.part`` is checked against the registry's sha256
  (or the publisher's md5 where no sha256 is known) and only then renamed to its
  final name. A mismatch raises :class:`ChecksumError` naming the file, the
  expected and the actual digests, and moves the bad bytes to
  ``<file>.part-bad`` (kept for inspection, replaced by the next bad download,
  safe to delete) so that the next call starts from scratch. Where no checksum
  has been published the download is refused by default: the error prints the
  computed sha256 to compare against the source; ``verify=False`` (CLI:
  ``--no-verify``) accepts it, and the download is called unverified from then
  on. A file that does not match a known or given checksum is refused either way.
  A finished download is reused only for the same URLs and digests.
* **Safe extraction.** Every member of a zip or tar archive is checked before
  anything is written: absolute paths, ``..`` components, links of any kind
  (a data set's archive holds files and folders), devices, a member named as
  autoint's record of a finished download, and an archive of more than
  :data:`MAX_MEMBERS` members or expanding past :data:`MAX_EXPANSION` times
  its size are refused (:class:`UnsafeArchiveError`); a gzip stream is read
  to its end first, where its CRC is checked. Tar archives are then extracted
  with Python's ``filter="data"`` where the interpreter has it.
* **Idempotent.** A completed download leaves ``.autoint-download-<name>.json``
  in ``to``; while it and the expected files are there, a call returns at once.
  ``force=True`` downloads and extracts again.
* Data sets that need an account or accepting terms on a web page (full Criteo,
  Avazu) are listed with ``manual=True``: ``download`` raises
  :class:`ManualDownloadRequired` saying where to get them and how to pass the
  local file to ``autoint prepare CONFIG --raw PATH --out DIR``.

Only the standard library does the network work (``urllib``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import gzip
import hashlib
import http.client
import json
import re
import stat
import sys
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from tqdm import tqdm

from autoint.errors import InputError, disk_full, message_head
from autoint.files import write_json

__all__ = [
    "DATASETS",
    "ChecksumError",
    "DatasetSource",
    "DownloadError",
    "ManualDownloadRequired",
    "RemoteFile",
    "UnsafeArchiveError",
    "download",
    "extract_archive",
    "get_source",
]

ARCHIVE_KINDS = ("zip", "tar.gz", "tar")
STAMP_PREFIX = ".autoint-download-"  # then the data set's name and .json: a finished download's record
DEFAULT_TIMEOUT_S = 30.0
_CHUNK = 1 << 16
_USER_AGENT = "autoint-downloader/0.1 (+https://github.com; python-urllib)"


# --------------------------------------------------------------------------- errors
class DownloadError(InputError, RuntimeError):
    """A data set could not be fetched, verified or extracted; the message says which file and why."""


class ChecksumError(DownloadError):
    """A downloaded file does not match its published checksum, or no checksum is known."""


class UnsafeArchiveError(DownloadError):
    """An archive member would land outside the target folder (or is a link or device)."""


class _ExtractionDiskFull(DownloadError):
    """The disk filled while an archive was extracted: the archive itself is good, and kept."""


class ManualDownloadRequired(DownloadError):
    """The data set sits behind an account or a licence page; the message says where to get it."""


# --------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class RemoteFile:
    """One file to fetch.

    ``into`` is the sub-folder of the download folder where the file is saved
    and, for an archive, where it is extracted. ``checksum_source`` says where
    the published digest comes from.
    """

    url: str
    filename: str
    sha256: str | None = None
    md5: str | None = None
    archive: str | None = None  # "zip", "tar.gz", "tar" or None (a plain file)
    into: str = ""
    checksum_source: str = ""

    def __post_init__(self) -> None:
        if self.archive is not None and self.archive not in ARCHIVE_KINDS:
            raise ValueError(f"{self.filename}: archive must be one of {ARCHIVE_KINDS} or None, got {self.archive!r}")
        if self.sha256 is not None and not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise ValueError(f"{self.filename}: sha256 must be 64 lower-case hex digits, got {self.sha256!r}")
        if self.md5 is not None and not re.fullmatch(r"[0-9a-f]{32}", self.md5):
            raise ValueError(f"{self.filename}: md5 must be 32 lower-case hex digits, got {self.md5!r}")
        if "/" in self.filename or "\\" in self.filename or self.filename in ("", ".", ".."):
            raise ValueError(f"filename must be a bare file name, got {self.filename!r}")


@dataclass(frozen=True)
class DatasetSource:
    """A registered data set: where it comes from, its terms, what it unpacks to.

    ``folder`` (relative to the download folder) is what :func:`download`
    returns; ``expected`` lists files (relative to ``folder``) that must exist
    once everything is fetched and extracted. ``manual`` data sets have no
    ``files`` and carry ``instructions`` instead.
    """

    name: str
    description: str
    homepage: str
    licence: str
    files: tuple[RemoteFile, ...] = ()
    folder: str = ""
    expected: tuple[str, ...] = ()
    manual: bool = False
    instructions: str = ""
    aliases: tuple[str, ...] = field(default=())

    def __post_init__(self) -> None:
        if self.manual and not self.instructions:
            raise ValueError(f"data set {self.name!r}: manual data sets need instructions")
        if not self.manual and not self.files:
            raise ValueError(f"data set {self.name!r}: no files to download")

    # Single-file conveniences, for listings: the first (usually only) file.
    @property
    def url(self) -> str | None:
        return self.files[0].url if self.files else None

    @property
    def sha256(self) -> str | None:
        return self.files[0].sha256 if self.files else None

    @property
    def archive(self) -> str | None:
        return self.files[0].archive if self.files else None

    def describe(self) -> str:
        """A few lines for ``autoint download --list`` style output."""
        lines = [f"{self.name}: {self.description}", f"  homepage: {self.homepage}", f"  licence: {self.licence}"]
        if self.manual:
            lines.append("  manual download: " + self.instructions.replace("\n", "\n    "))
        for f in self.files:
            check = (
                f"sha256 {f.sha256}" if f.sha256 else f"md5 {f.md5}" if f.md5 else "no published checksum (--no-verify)"
            )
            lines.append(f"  {f.url} ({check})")
        return "\n".join(lines)


_ML_LICENCE = (
    "GroupLens MovieLens terms: research use; cite Harper & Konstan (2015), ACM TiiS 5(4); "
    "no redistribution or commercial use without permission (see the README in the archive)"
)
_CRITEO_LICENCE = "Criteo terms of use, CC BY-NC-SA 4.0: non-commercial research use, share alike"
_FRAPPE_LICENCE = (
    "Frappe terms (Baltrunas et al., 2015, arXiv:1505.03014): research use with acknowledgement; "
    "no redistribution, no de-anonymisation, no commercial use without permission"
)
_NFM_FRAPPE = "https://raw.githubusercontent.com/hexiangnan/neural_factorization_machine/master/data/frappe"

DATASETS: dict[str, DatasetSource] = {
    s.name: s
    for s in (
        DatasetSource(
            name="movielens-100k",
            aliases=("ml-100k",),
            description="MovieLens 100K: 100,000 ratings by 943 users on 1,682 movies, with user and movie attributes",
            homepage="https://grouplens.org/datasets/movielens/100k/",
            licence=_ML_LICENCE,
            files=(
                RemoteFile(
                    url="https://files.grouplens.org/datasets/movielens/ml-100k.zip",
                    filename="ml-100k.zip",
                    # sha256 (and the 4,924,029-byte size) from tensorflow/datasets,
                    # tensorflow_datasets/url_checksums/movielens.txt; md5 as published by
                    # GroupLens in ml-100k.zip.md5 (also quoted by many downloaders).
                    sha256="50d2a982c66986937beb9ffb3aa76efe955bf3d5c6b761f4e3a7cd717c6a3229",
                    md5="0e33842e24a9c977be4e0107933c0723",
                    archive="zip",
                    checksum_source="tensorflow/datasets url_checksums/movielens.txt; GroupLens ml-100k.zip.md5",
                ),
            ),
            folder="ml-100k",
            expected=("u.data", "u.user", "u.item", "u.genre", "u.occupation"),
        ),
        DatasetSource(
            name="movielens-1m",
            aliases=("ml-1m",),
            description="MovieLens 1M: 1,000,209 ratings by 6,040 users on 3,706 movies, with user and movie data",
            homepage="https://grouplens.org/datasets/movielens/1m/",
            licence=_ML_LICENCE,
            files=(
                RemoteFile(
                    url="https://files.grouplens.org/datasets/movielens/ml-1m.zip",
                    filename="ml-1m.zip",
                    # sha256 (5,917,549 bytes) from tensorflow/datasets
                    # url_checksums/movielens.txt, also pinned by tensorflow/examples and
                    # keras-rs; md5 as published by GroupLens in ml-1m.zip.md5.
                    sha256="a6898adb50b9ca05aa231689da44c217cb524e7ebd39d264c56e2832f2c54e20",
                    md5="c4d9eecfca2ab87c1945afe126590906",
                    archive="zip",
                    checksum_source="tensorflow/datasets url_checksums/movielens.txt; GroupLens ml-1m.zip.md5",
                ),
            ),
            folder="ml-1m",
            expected=("ratings.dat", "users.dat", "movies.dat"),
        ),
        DatasetSource(
            name="criteo-sample",
            aliases=("dac_sample", "criteo-dac-sample"),
            description=(
                "Criteo Display Advertising Challenge sample (dac_sample.txt): 100,000 rows in the raw "
                "Criteo format, label + 13 integer + 26 hashed categorical fields"
            ),
            homepage="https://ailab.criteo.com/ressources/",
            licence=_CRITEO_LICENCE,
            files=(
                RemoteFile(
                    # The URL Criteo Labs published in 2015 (quoted by Microsoft recommenders,
                    # Surprise, OpenEmbedding, Intel's workflows). No publisher checksum could
                    # be found for it, so the download is refused unless verify=False.
                    url="https://labs.criteo.com/wp-content/uploads/2015/04/dac_sample.tar.gz",
                    filename="dac_sample.tar.gz",
                    archive="tar.gz",
                    into="criteo-sample",
                    checksum_source="none published",
                ),
            ),
            folder="criteo-sample",
            expected=("dac_sample.txt",),
        ),
        DatasetSource(
            name="frappe",
            description=(
                "Frappe app-usage CTR log in the libFM split published with Neural Factorization Machines "
                "(He & Chua, SIGIR 2017): 288,609 rows, 10 fields, 2 sampled negatives per positive"
            ),
            homepage="https://www.baltrunas.info/context-aware",
            licence=_FRAPPE_LICENCE,
            files=(
                RemoteFile(
                    url=f"{_NFM_FRAPPE}/frappe.train.libfm",
                    filename="frappe.train.libfm",
                    into="frappe",
                    checksum_source="none published",
                ),
                RemoteFile(
                    url=f"{_NFM_FRAPPE}/frappe.validation.libfm",
                    filename="frappe.validation.libfm",
                    # Computed from a copy whose size (4,163,044 bytes) and content match the
                    # file in hexiangnan/neural_factorization_machine at commit fa207e0d.
                    sha256="fdf4be563a7dd9b15f7a6e8b32671e90e6e7a2a2bd3af4e10bf13c5ad7e76e9e",
                    into="frappe",
                    checksum_source="computed from a verified copy of the NFM repository file",
                ),
                RemoteFile(
                    url=f"{_NFM_FRAPPE}/frappe.test.libfm",
                    filename="frappe.test.libfm",
                    sha256="a2ebaef3a9af8e55f8bb0d08bc4923965e42e43760ebd7635ac2f8c5db99e097",
                    into="frappe",
                    checksum_source="computed from a copy of the NFM repository file",
                ),
            ),
            folder="frappe",
            expected=("frappe.train.libfm", "frappe.validation.libfm", "frappe.test.libfm"),
        ),
        DatasetSource(
            name="criteo-kaggle",
            aliases=("criteo",),
            description="Criteo Display Advertising Challenge (Kaggle 2014): 45,840,617 rows, about 11 GB",
            homepage="https://www.kaggle.com/c/criteo-display-ad-challenge",
            licence=_CRITEO_LICENCE,
            manual=True,
            instructions=(
                "Download it yourself after accepting its terms, either from Kaggle "
                "(https://www.kaggle.com/c/criteo-display-ad-challenge/data, needs an account) or from "
                "Criteo AI Lab (https://ailab.criteo.com/ressources/, the Kaggle Display Advertising "
                "Challenge dataset). Extract it, then pass the local file: "
                "autoint prepare configs/criteo.yaml --raw PATH/train.txt --out data/processed/criteo."
            ),
        ),
        DatasetSource(
            name="criteo-1tb",
            description="Criteo 1TB click logs: 24 days, about 4 billion rows",
            homepage="https://ailab.criteo.com/download-criteo-1tb-click-logs-dataset/",
            licence=_CRITEO_LICENCE,
            manual=True,
            instructions=(
                "Download the day_N files from Criteo AI Lab "
                "(https://ailab.criteo.com/download-criteo-1tb-click-logs-dataset/) after accepting its "
                "terms, then pass the days you want, gzip-compressed as they come: autoint prepare "
                "configs/criteo.yaml --raw 'PATH/day_*.gz' --out data/processed/criteo-1tb (for the usual "
                "protocol, days 0-22 train and day 23 test, set data.split.method: files)."
            ),
        ),
        DatasetSource(
            name="avazu",
            description="Avazu click-through rate prediction (Kaggle 2014): 40,428,967 rows, 24 columns",
            homepage="https://www.kaggle.com/c/avazu-ctr-prediction",
            licence="Kaggle competition rules: non-commercial research use, no redistribution",
            manual=True,
            instructions=(
                "Sign in to Kaggle, accept the competition rules and download train.gz from "
                "https://www.kaggle.com/c/avazu-ctr-prediction/data, then pass the local file: "
                "autoint prepare configs/avazu.yaml --raw PATH/train.gz --out data/processed/avazu (the "
                "shipped config reads Kaggle's columns, its YYMMDDHH hours included), then autoint train "
                "configs/avazu.yaml."
            ),
        ),
    )
}


def get_source(name: str) -> DatasetSource:
    """The registry entry for ``name`` or one of its aliases."""
    if name in DATASETS:
        return DATASETS[name]
    for source in DATASETS.values():
        if name in source.aliases:
            return source
    known = ", ".join(sorted(DATASETS))
    raise DownloadError(f"unknown data set {name!r}; known: {known}")


# --------------------------------------------------------------------------- download
def download(
    name: str,
    to: str | Path,
    progress: bool = True,
    *,
    url: str | None = None,
    sha256: str | None = None,
    force: bool = False,
    verify: bool = True,
    timeout: float = DEFAULT_TIMEOUT_S,
    bar: bool | None = None,
) -> Path:
    """Download, verify and extract data set ``name`` under ``to``; return the data folder.

    ``url`` replaces the registry's URL (a mirror) and ``sha256`` its checksum,
    for single-file data sets only. ``force`` fetches and extracts again even
    when a verified copy is present. ``verify=False`` accepts a file whose
    checksum is unknown (its sha256 is printed and recorded, and the file is
    called unverified from then on); a file that does not match a known or given
    checksum is refused either way. ``timeout`` bounds each network wait, in seconds. ``progress``: messages and a
    progress bar; ``bar``: the bar alone (None: as ``progress``; the command line draws it only on a terminal).
    A download that fails leaves none of the folders it made, where they are still empty.
    """
    root = Path(to).expanduser()
    source = get_source(name)
    wanted = [root, *(root / rf.into for rf in source.files), root / source.folder]
    chain = [q for w in wanted for q in (*reversed(w.parents), w)]
    made = [q for q in dict.fromkeys(chain) if not q.exists()]  # before: what this call would make
    try:
        return _download(name, root, progress, url=url, sha256=sha256, force=force, verify=verify, timeout=timeout,
                         bar=progress if bar is None else bar)
    except BaseException:  # no network, a bad digest, Ctrl-C: no empty folder left behind (a partial file stays)
        for folder in sorted(made, key=lambda q: len(q.parts), reverse=True):
            with contextlib.suppress(OSError):  # only an empty one goes
                folder.rmdir()
        raise


def _download(name: str, to: Path, progress: bool, *, url: str | None, sha256: str | None, force: bool,
              verify: bool, timeout: float, bar: bool) -> Path:
    """:func:`download`'s work, whose failure :func:`download` cleans up after."""
    source = get_source(name)
    if source.manual:
        raise ManualDownloadRequired(
            f"{source.name} cannot be downloaded automatically: {source.description}.\n"
            f"{source.instructions}\nHomepage: {source.homepage}\nTerms: {source.licence}"
        )
    files = source.files
    if url is not None or sha256 is not None:
        if len(files) != 1:
            raise DownloadError(f"{source.name} has {len(files)} files; a mirror's URL or digest (--url, "
                                "--sha256; url=, sha256= in Python) is for a data set of one file; for its files "
                                "without a published checksum, --no-verify (verify=False) accepts them and prints "
                                "their sha256")
        if sha256 is not None and not re.fullmatch(r"[0-9a-fA-F]{64}", sha256):
            raise DownloadError(f"sha256 override must be 64 hex digits, got {sha256!r}")
        f = files[0]
        files = (
            RemoteFile(
                url=url or f.url,
                filename=f.filename,
                sha256=sha256.lower() if sha256 else f.sha256,
                md5=None if sha256 else f.md5,
                archive=f.archive,
                into=f.into,
                checksum_source="given by the caller" if sha256 else f.checksum_source,
            ),
        )

    root = Path(to).expanduser()
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DownloadError(f"cannot create download folder {root}: {e}") from None
    folder = root / source.folder
    stamp = root / f"{STAMP_PREFIX}{source.name}.json"

    stamped = _read_stamp(stamp) if stamp.is_file() and not force else _Stamp()
    # A finished download is reused only for the same files: the same URLs, and digests that match those known
    # now (a --sha256 given now is checked against the recorded one, not ignored).
    same = all(stamped.urls.get(rf.filename, rf.url) == rf.url and rf.filename in stamped.sha256
               and (rf.sha256 is None or stamped.sha256[rf.filename] == rf.sha256) for rf in files)
    if not force and stamp.is_file() and same and _missing(folder, source.expected) == []:
        unverified = [rf.filename for rf in files if rf.filename in stamped.unverified]
        _say(progress, f"{source.name}: already downloaded in {folder}, " + (
            f"not verified ({', '.join(unverified)} had no published checksum; accepted with --no-verify)"
            if unverified else "verified"))
        return folder

    digests: dict[str, str] = {}
    unverified: list[str] = []
    for rf in files:
        target_dir = root / rf.into
        target_dir.mkdir(parents=True, exist_ok=True)
        final = target_dir / rf.filename
        # The file already there is not taken for these bytes (it is replaced only once new bytes are verified).
        trusted = not force
        if stamped.urls.get(rf.filename, rf.url) != rf.url:  # fetched from elsewhere before: not these bytes
            trusted = False
        elif rf.sha256 is None and rf.md5 is None and rf.filename in stamped.sha256:
            # The digest the user accepted earlier (--no-verify) vouches for the kept file from this URL.
            rf = dataclasses.replace(rf, sha256=stamped.sha256[rf.filename], checksum_source="accepted earlier")
            if rf.filename in stamped.unverified:
                unverified.append(rf.filename)
        elif rf.sha256 is None and rf.md5 is None and final.is_file():
            trusted = False  # kept from a run that never finished: nothing says where it came from
        digests[rf.filename] = _obtain(rf, final, progress=progress, force=force, trusted=trusted, verify=verify,
                                       timeout=timeout, bar=bar)
        if rf.sha256 is None and rf.md5 is None:
            unverified.append(rf.filename)
        if rf.archive is not None:
            _say(progress, f"{source.name}: extracting {final.name} into {target_dir}")
            try:
                # into the download folder itself (MovieLens' zips): only into the data set's own folder
                extract_archive(final, target_dir, kind=rf.archive, within=None if rf.into else source.folder or None)
            except DownloadError as e:
                if isinstance(e, (UnsafeArchiveError, _ExtractionDiskFull)):  # the bytes are not to blame
                    raise
                bad = final.with_name(final.name + ".part-bad")  # fetched again next time, not kept as good
                final.replace(bad)
                raise DownloadError(f"{e}; the file was moved to {bad}, and the next run fetches it again") from None

    missing = _missing(folder, source.expected)
    if missing:
        found = next((p for p in sorted(root.rglob(Path(missing[0]).name)) if p.is_file()), None)
        raise DownloadError(f"{source.name}: after download and extraction, {folder} lacks {', '.join(missing)}"
                            + (f" (the archive put {missing[0]} in {found.parent}: its layout is not the one "
                               "expected; a mirror's archive may hold another top folder)" if found else ""))
    write_json(stamp, {"name": source.name, "folder": source.folder, "sha256": digests,
                       "url": {rf.filename: rf.url for rf in files}, "unverified": sorted(set(unverified))})
    _say(progress, f"{source.name}: ready in {folder}" + (" (not verified: no published checksum)" if unverified
                                                           else ""))
    return folder


@dataclasses.dataclass
class _Stamp:
    """What a finished download recorded: each file's sha256, URL, and those accepted without a checksum."""

    sha256: dict[str, str] = dataclasses.field(default_factory=dict)
    urls: dict[str, str] = dataclasses.field(default_factory=dict)
    unverified: set[str] = dataclasses.field(default_factory=set)


def _read_stamp(stamp: Path) -> _Stamp:
    try:
        d = json.loads(stamp.read_text())
        digests, urls, unverified = d.get("sha256", {}), d.get("url", {}), d.get("unverified", [])
    except (OSError, ValueError, AttributeError):
        return _Stamp()
    return _Stamp({k: v for k, v in digests.items() if isinstance(v, str) and re.fullmatch(r"[0-9a-f]{64}", v)},
                  {k: v for k, v in urls.items() if isinstance(v, str)} if isinstance(urls, dict) else {},
                  {v for v in unverified if isinstance(v, str)} if isinstance(unverified, list) else set())


def _missing(folder: Path, expected: tuple[str, ...]) -> list[str]:
    return [e for e in expected if not (folder / e).is_file()]


def _say(progress: bool, msg: str) -> None:
    if progress:
        print(msg, file=sys.stderr)


def _obtain(rf: RemoteFile, final: Path, *, progress: bool, force: bool, trusted: bool, verify: bool,
            timeout: float, bar: bool) -> str:
    """Make ``final`` a complete, verified copy of ``rf``; return its sha256. ``force``: fetch it from the start
    (a ``.part`` is dropped); not ``trusted``: ``final``, if there, is not these bytes, and is fetched again (a
    ``.part`` resumes; the checksum decides). ``final`` is replaced only by verified bytes, so a fetch that fails
    (the server down) leaves it as it was."""
    part = final.with_name(final.name + ".part")
    if force:
        part.unlink(missing_ok=True)
    if trusted and final.is_file():
        # A final name is only ever given to verified bytes, but the registry may
        # have changed since: check again, and fetch anew on a mismatch.
        try:
            return _check(final, rf, verify=verify, progress=progress)
        except _ChecksumUnknown:
            raise  # nothing says these bytes are bad: keep them
        except ChecksumError:
            final.replace(final.with_name(final.name + ".part-bad"))
    for attempt in range(2):
        complete = _fetch(rf.url, part, bar=bar, timeout=timeout)
        try:
            digest = _check(part, rf, verify=verify, progress=progress)
        except ChecksumError as e:
            if isinstance(e, _ChecksumUnknown):
                raise  # the bytes are fine as far as we know: keep the .part for --no-verify
            if not complete and attempt == 0:
                # A stale .part the server said was already whole: start over once.
                part.unlink(missing_ok=True)
                continue
            bad = part.with_name(final.name + ".part-bad")
            part.replace(bad)
            raise ChecksumError(f"{e}; the downloaded bytes were moved to {bad}") from None
        part.replace(final)
        return digest
    raise AssertionError("unreachable")  # pragma: no cover


class _ChecksumUnknown(ChecksumError):
    pass


def _digests(path: Path) -> tuple[str, str]:
    sha, md5 = hashlib.sha256(), hashlib.md5()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            sha.update(block)
            md5.update(block)
    return sha.hexdigest(), md5.hexdigest()


def _check(path: Path, rf: RemoteFile, *, verify: bool, progress: bool) -> str:
    """Compare ``path`` with the published digest; return its sha256."""
    actual_sha, actual_md5 = _digests(path)
    if rf.sha256:
        algo, expected, actual = "sha256", rf.sha256, actual_sha
    elif rf.md5:  # weaker, but the only digest some publishers give
        algo, expected, actual = "md5", rf.md5, actual_md5
    else:
        if verify:
            raise _ChecksumUnknown(
                f"{rf.filename}: no published checksum is known for {rf.url}; its sha256 is {actual_sha}. "
                "Compare it with the publisher's if you can, then accept it with --no-verify "
                "(verify=False in Python). The file is kept as " + str(path)
            )
        _say(progress, f"{rf.filename}: not verified (no published checksum); sha256 {actual_sha}")
        return actual_sha
    if actual != expected:  # refused with or without --no-verify, which only accepts an unknown checksum
        raise ChecksumError(f"{rf.filename}: {algo} mismatch for {path} (from {rf.url}): expected {expected}, "
                            f"got {actual}")
    return actual_sha


class _SafeRedirects(urllib.request.HTTPRedirectHandler):
    """Redirects are followed to http(s) only, and never from https down to http: urllib's own handler followed
    one to ftp:// or to plain http, where a data set without a known checksum could be swapped in transit."""

    def redirect_request(self, req: Any, fp: Any, code: int, msg: str, headers: Any, newurl: str) -> Any:
        old, new = urllib.parse.urlsplit(req.full_url).scheme, urllib.parse.urlsplit(newurl).scheme
        if new not in ("http", "https") or (old == "https" and new != "https"):
            raise DownloadError(f"{req.full_url}: the server redirects to {newurl}, which is not https; refused "
                                "(download from that address with --url if you trust it)")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_SafeRedirects)


def _fetch(url: str, part: Path, *, bar: bool, timeout: float) -> bool:
    """Bring ``part`` to the server's full content, resuming when possible.

    Returns False when the server said the existing ``part`` was already
    complete (HTTP 416) without sending anything, True otherwise.
    """
    scheme = urllib.parse.urlsplit(url).scheme
    if scheme not in ("http", "https"):
        raise DownloadError(f"{url}: only http and https URLs are supported")
    offset = part.stat().st_size if part.is_file() else 0
    request = urllib.request.Request(_ascii_url(url), headers={"User-Agent": _USER_AGENT,
                                                               "Accept-Encoding": "identity"})
    if offset:
        request.add_header("Range", f"bytes={offset}-")
    try:
        response = _OPENER.open(request, timeout=timeout)  # the scheme was checked above, each redirect's below
    except urllib.error.HTTPError as e:
        if e.code == 416 and offset:
            return False  # nothing left to send: the .part is (believed) whole; the checksum decides
        raise DownloadError(f"{url}: HTTP {e.code} {e.reason}") from None
    except urllib.error.URLError as e:
        host = urllib.parse.urlsplit(url).netloc
        raise DownloadError(f"cannot reach {host} for {url}: {e.reason}") from None
    except (OSError, http.client.HTTPException) as e:
        raise DownloadError(f"{url}: {type(e).__name__}: {e}") from None

    with response:
        status = getattr(response, "status", 200)
        length = response.headers.get("Content-Length")
        remaining = int(length) if length and length.isdigit() else None
        if offset and status == 206:
            start, total = _content_range(url, response.headers.get("Content-Range", ""))
            if start not in (offset, 0):
                raise DownloadError(f"{url}: asked to resume at byte {offset}, the server answered from byte {start}; "
                                    "run again with --force (force=True in Python) to download it from the start")
            mode = "ab" if start else "wb"  # from byte 0: the whole file, as a 200 would send it
            offset = start
        else:
            # 200: the server ignored the Range header (or there was none): start over.
            offset, total, mode = 0, remaining, "wb"
        if total is None and remaining is not None:
            total = offset + remaining
        try:
            if part.is_symlink():  # its name is known in advance: a link planted under it is refused, not written
                raise OSError(errno.ELOOP, "a symbolic link, not a file this download made; remove it")
            out = part.open(mode)
        except OSError as e:  # the folder's trouble, not the network's: resuming would fail the same way
            full = disk_full(e)
            raise DownloadError(f"{part}: cannot be written ({message_head(full or e)}); "
                                + ("free some space and run again" if full is not None else
                                   "choose a folder you may write to (--to)")) from None
        meter = tqdm(
            total=total, initial=offset, unit="B", unit_scale=True, unit_divisor=1024,
            desc=part.name.removesuffix(".part"), disable=not bar, leave=False,
        )
        try:
            with out, meter:
                while True:
                    block = response.read(_CHUNK)
                    if not block:
                        break
                    out.write(block)
                    meter.update(len(block))
        except (OSError, http.client.HTTPException) as e:
            full = disk_full(e)  # not the network: resuming would fail the same way
            if full is not None:
                raise DownloadError(f"{part}: the disk is full ({message_head(full)}); free some space and run again "
                                    "to resume the download") from None
            raise DownloadError(
                f"{url}: transfer interrupted ({type(e).__name__}: {e}); run again to resume from {part}"
            ) from None
    size = part.stat().st_size
    if total is not None and size != total:
        raise DownloadError(f"{url}: got {size} of {total} bytes; run again to resume from {part}")
    return True


def _ascii_url(url: str) -> str:
    """A URL as HTTP sends it: a host name of other scripts in IDNA, other characters percent-encoded (urllib
    refused them with a UnicodeEncodeError traceback); an ASCII URL, and every ASCII part, as given."""
    if url.isascii():
        return url
    parts = urllib.parse.urlsplit(url)
    login, at, hostport = parts.netloc.rpartition("@")
    if not hostport.isascii():  # (an IPv6 address in brackets is ASCII)
        host, colon, port = hostport.partition(":")
        try:
            hostport = host.encode("idna").decode("ascii") + colon + port
        except UnicodeError:
            raise DownloadError(f"{url}: the host name {host!r} cannot be written in ASCII (IDNA)") from None
    keep = "/%:@!$&'()*+,;=~-._"
    netloc = urllib.parse.quote(login, safe=keep) + at + hostport
    return urllib.parse.urlunsplit((parts.scheme, netloc, urllib.parse.quote(parts.path, safe=keep),
                                    urllib.parse.quote(parts.query, safe=keep + "?"),
                                    urllib.parse.quote(parts.fragment, safe=keep + "?")))


def _content_range(url: str, value: str) -> tuple[int, int | None]:
    m = re.fullmatch(r"\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*", value)
    if not m:
        raise DownloadError(f"{url}: the server sent a malformed Content-Range header ({value!r}) to a request to "
                            "resume; run again with --force (force=True in Python) to download it from the start")
    total = None if m.group(3) == "*" else int(m.group(3))
    return int(m.group(1)), total


# --------------------------------------------------------------------------- extraction
#: Most an archive may expand to, as a multiple of its own size (text compresses 3-10 times; a zip bomb 1000):
#: past it, and past :data:`MAX_EXTRACTED_FLOOR`, an archive is refused before anything is written.
MAX_EXPANSION = 100
MAX_EXTRACTED_FLOOR = 1 << 30
MAX_MEMBERS = 10_000  # the registered archives hold at most a few dozen
_ZIP_METHODS = {zipfile.ZIP_STORED: "stored", zipfile.ZIP_DEFLATED: "deflate", zipfile.ZIP_BZIP2: "bzip2",
                zipfile.ZIP_LZMA: "lzma"}  # what Python's zipfile reads


def extract_archive(archive: str | Path, target: str | Path, kind: str | None = None,
                    within: str | None = None) -> Path:
    """Extract ``archive`` into ``target`` after checking that no member escapes it.

    ``kind`` is ``"zip"``, ``"tar.gz"`` or ``"tar"``; guessed from the name when
    None. Every member is checked before anything is written, so a refused
    archive leaves ``target`` untouched: a data set's archive holds files and
    folders only, so a link of any kind is refused (a hard link to a symbolic
    link, or a link through a link, escaped checks made link by link), as are
    devices, a name autoint gives its own records (``.autoint-download-*``),
    more than :data:`MAX_MEMBERS` members, contents past :data:`MAX_EXPANSION`
    times the archive's size, encrypted zip members and compression methods
    Python cannot read. A gzip stream is read to its end first, so a damaged
    one (whose CRC tar never reaches) is refused too. ``within``: the one top
    folder every member must be in (an archive extracted where other data
    sets' folders are may not write into them).
    """
    archive, target = Path(archive), Path(target)
    kind = kind or _guess_kind(archive)
    if kind not in ARCHIVE_KINDS:
        raise DownloadError(f"{archive}: unknown archive kind {kind!r} (known: {', '.join(ARCHIVE_KINDS)})")
    target.mkdir(parents=True, exist_ok=True)
    root = target.resolve()
    try:
        if kind == "zip":
            with zipfile.ZipFile(archive) as zf:
                infos = zf.infolist()
                for info in infos:
                    _check_member(archive, info.filename, root, within)
                    if stat.S_ISLNK(info.external_attr >> 16):
                        raise UnsafeArchiveError(f"{archive}: member {info.filename!r} is a symbolic link; links "
                                                 "are not extracted")
                    if info.flag_bits & 0x1:
                        raise DownloadError(f"{archive}: member {info.filename!r} is encrypted; a data set's "
                                            "archive is not, so this is not the file expected")
                    if info.compress_type not in _ZIP_METHODS:
                        raise DownloadError(f"{archive}: member {info.filename!r} is compressed with method "
                                            f"{info.compress_type}, which Python's zipfile cannot read (it reads "
                                            f"{', '.join(_ZIP_METHODS.values())}); extract it with another tool")
                _check_size(archive, len(infos), sum(i.file_size for i in infos))
                zf.extractall(root)
        else:
            if kind == "tar.gz":
                _read_whole_gzip(archive)
            with tarfile.open(archive, "r:gz" if kind == "tar.gz" else "r:") as tf:
                members = tf.getmembers()
                for m in members:
                    _check_tar_member(archive, m, root, within)
                _check_size(archive, len(members), sum(m.size for m in members if m.isfile()))
                if hasattr(tarfile, "data_filter"):
                    tf.extractall(root, members=members, filter="data")
                else:  # pragma: no cover - Python without PEP 706: no member is a link, device or outside root
                    tf.extractall(root, members=members)
    except (zipfile.BadZipFile, tarfile.TarError, EOFError, zlib.error, OSError) as e:
        if isinstance(e, getattr(tarfile, "FilterError", ())):
            raise UnsafeArchiveError(f"{archive}: {e}") from None
        full = disk_full(e)
        if full is not None:
            raise _ExtractionDiskFull(f"{target}: the disk filled while extracting {archive.name} "
                                      f"({message_head(full)}); free some space and run again (the archive is "
                                      "kept, and extracted again)") from None
        if isinstance(e, OSError) and not isinstance(e, (zipfile.BadZipFile, gzip.BadGzipFile)):
            raise  # the target folder's own trouble (permissions), which the command line names
        raise DownloadError(f"{archive}: not a valid {kind} archive ({e})") from None
    return target


def _read_whole_gzip(archive: Path) -> None:
    """Read a gzip stream to its end, where its CRC and length are checked (tar stops at its last member)."""
    try:
        with gzip.open(archive, "rb") as fh:
            while fh.read(_CHUNK * 16):
                pass
    except (OSError, EOFError, zlib.error) as e:
        raise DownloadError(f"{archive}: not a valid tar.gz archive (its gzip stream is damaged: "
                            f"{message_head(e)})") from None


def _check_size(archive: Path, members: int, extracted: int) -> None:
    if members > MAX_MEMBERS:
        raise UnsafeArchiveError(f"{archive}: {members:,} members, more than the {MAX_MEMBERS:,} a data set's archive "
                                 "is allowed; not extracted")
    cap = max(MAX_EXPANSION * archive.stat().st_size, MAX_EXTRACTED_FLOOR)
    if extracted > cap:
        raise UnsafeArchiveError(f"{archive}: its members hold {extracted:,} bytes, more than {MAX_EXPANSION} times "
                                 f"the archive's size (and more than {MAX_EXTRACTED_FLOOR >> 30} GiB): not what a "
                                 "data set compresses to; not extracted")


def _guess_kind(archive: Path) -> str:
    name = archive.name.lower()
    if name.endswith(".zip"):
        return "zip"
    if name.endswith((".tar.gz", ".tgz")):
        return "tar.gz"
    if name.endswith(".tar"):
        return "tar"
    raise DownloadError(f"{archive}: cannot tell the archive kind from its name; pass kind=")


def _check_member(archive: Path, name: str, root: Path, within: str | None = None) -> Path:
    """Refuse absolute names, drive letters, ``..`` parts and anything resolving outside ``root``."""
    posix = name.replace("\\", "/")
    if not posix or posix.startswith("/") or re.match(r"^[A-Za-z]:", posix):
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an absolute path")
    if ".." in PurePosixPath(posix).parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r} climbs out of the target folder ('..')")
    if any(part.casefold().startswith(STAMP_PREFIX) for part in PurePosixPath(posix).parts):  # any case: macOS
        raise UnsafeArchiveError(f"{archive}: member {name!r} is named as autoint's record of a finished download "
                                 "(which would vouch for files it never verified); not extracted")
    if within is not None and PurePosixPath(posix).parts[:1] != (within,):
        raise UnsafeArchiveError(f"{archive}: member {name!r} is not in {within}/, the data set's folder; it would be "
                                 f"written beside it in {root}, where other data sets' folders are (a mirror's "
                                 "archive of another layout?); not extracted")
    dest = (root / posix).resolve()
    if dest != root and not dest.is_relative_to(root):
        raise UnsafeArchiveError(f"{archive}: member {name!r} would be written outside {root}")
    return dest


def _check_tar_member(archive: Path, m: tarfile.TarInfo, root: Path, within: str | None = None) -> None:
    _check_member(archive, m.name, root, within)
    if m.isdev() or m.isfifo():
        raise UnsafeArchiveError(f"{archive}: member {m.name!r} is a device or pipe")
    if m.issym() or m.islnk():
        raise UnsafeArchiveError(f"{archive}: member {m.name!r} is a {'symbolic' if m.issym() else 'hard'} link "
                                 f"(to {m.linkname!r}); links are not extracted")
