"""MovieLens 100K and 1M as a CTR task, the AutoInt paper's way.

The raw path is the data set's folder:

* 100K: ``u.data`` (``user \\t item \\t rating \\t timestamp``), ``u.user``
  (``id|age|gender|occupation|zip``), ``u.item`` (``|``-separated, latin-1:
  id, title, release date, video date, URL, 19 genre flags) and ``u.genre``
  (genre names by flag position);
* 1M: ``ratings.dat``, ``users.dat``, ``movies.dat`` (``::``-separated,
  latin-1; genres joined by ``|``, the year in the title: ``Heat (1995)``).

Label: rating > 3 → 1, rating < 3 → 0; rating 3 is dropped and counted as
"dropped by design" (Song et al., 2019, Section 5.1). Fields: the user's
gender, age, occupation and zip code, the movie's genres (multi-valued) and
release year (categorical) and the rating's timestamp (numeric); user and
movie ids are added in front with ``data.include_ids``.
"""

from __future__ import annotations

import codecs
import logging
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from autoint.datasets.base import (
    DataError,
    RawReader,
    arrow_strings,
    canonical_frame,
    parse_numbers,
)
from autoint.datasets.text import iter_line_blocks, parse_block, split_block
from autoint.errors import few
from autoint.schema import CATEGORICAL, MULTI, NUMERIC, FieldSpec

log = logging.getLogger(__name__)

ID_FIELDS = (FieldSpec("user_id", CATEGORICAL), FieldSpec("movie_id", CATEGORICAL))
ATTRIBUTE_FIELDS = (
    FieldSpec("gender", CATEGORICAL),
    FieldSpec("age", CATEGORICAL),
    FieldSpec("occupation", CATEGORICAL),
    FieldSpec("zip_code", CATEGORICAL),
    FieldSpec("genres", MULTI),
    FieldSpec("release_year", CATEGORICAL),
    FieldSpec("timestamp", NUMERIC),
)
# u.genre's order, used when the file is absent.
GENRES_100K = (
    "unknown", "Action", "Adventure", "Animation", "Children's", "Comedy", "Crime", "Documentary", "Drama",
    "Fantasy", "Film-Noir", "Horror", "Musical", "Mystery", "Romance", "Sci-Fi", "Thriller", "War", "Western",
)  # fmt: skip
_YEAR_IN_TITLE = re.compile(r"\((\d{4})\)\s*$")
_RATING_COLUMNS = ["user", "movie", "rating", "timestamp"]
_LINE_END = re.compile(r"\r\n|\n|\r")  # as pandas' parser ends lines


def movielens_fields(include_ids: bool) -> tuple[FieldSpec, ...]:
    return (ID_FIELDS if include_ids else ()) + ATTRIBUTE_FIELDS


class MovieLensReader(RawReader):
    """Reader for a MovieLens 100K or 1M folder (detected from the files present)."""

    format = "movielens"
    text_only = True
    default_numeric_transform = "standardize"  # the only numeric field is a unix timestamp

    def __init__(self, path: str | Path | Sequence[str | Path] | None, include_ids: bool = False) -> None:
        if isinstance(path, (list, tuple)) and len(path) == 1:  # data.raw: [folder]
            path = path[0]
        super().__init__(path)
        self.include_ids = include_ids

    @property
    def fields(self) -> tuple[FieldSpec, ...]:
        return movielens_fields(self.include_ids)

    # --- layout ------------------------------------------------------------------
    def variant(self) -> str:
        """``"100k"`` or ``"1m"``, from the files in the folder."""
        if self.path is None and self.raw:
            raise DataError(f"format 'movielens' reads one folder, the data set's; got {len(self.raw)}: "
                            f"{few(self.raw)}")
        if self.path is None:
            raise DataError("no MovieLens folder given: set data.raw or pass --raw")
        if not self.path.exists():
            glob = ", and expands no glob" if any(c in self.path.name for c in "*?[") else ""
            raise DataError(f"{self.path}: not found (format 'movielens' reads the data set's folder{glob})")
        if not self.path.is_dir():
            raise DataError(f"{self.path}: format 'movielens' expects the data set's folder "
                            "(u.data, u.user, u.item or ratings.dat, users.dat, movies.dat)")
        if (self.path / "u.data").exists():
            return "100k"
        if (self.path / "ratings.dat").exists():
            return "1m"
        raise DataError(f"{self.path}: neither u.data (MovieLens 100K) nor ratings.dat (MovieLens 1M) found")

    def files(self) -> list[Path]:
        """The files read (what a prepared folder's fingerprint holds): the ratings, then the side tables
        present; the folder's other files (README, u.info, the 100K's ready-made splits) are not read."""
        variant = self.variant()
        names = ("u.data", "u.user", "u.item", "u.genre") if variant == "100k" else \
            ("ratings.dat", "users.dat", "movies.dat")
        return [self.path / n for n in names if (self.path / n).is_file()]

    def row_files(self) -> list[Path]:
        return self.files()[:1]

    def _side_table(self, name: str, sep: str, names: list[str], why: str = "") -> pd.DataFrame:
        """``name``'s lines split at ``sep`` into ``names`` (text, empty as None), one row per id; a line with
        another field count is refused, naming it (``why``: what decides the count, for the message)."""
        path = self._require_file(self.path / name)
        # A UTF-8 byte-order mark is skipped, as Arrow skips it in the ratings file.
        lines = _LINE_END.split(path.read_bytes().removeprefix(codecs.BOM_UTF8).decode("latin-1"))
        rows, line_no = [], []
        for i, line in enumerate(lines, 1):
            if not line.strip():  # blank lines (the 100K's u.genre ends with one) are skipped, as pandas did
                continue
            fields = line.split(sep)
            if len(fields) != len(names):  # one '|' too many in a title moved every later column
                raise DataError(f"{path}: line {i}: {len(fields)} field{'s' * (len(fields) != 1)} separated by "
                                f"{sep!r}, expected {len(names)}{why or ' (' + ', '.join(names) + ')'}")
            rows.append([f if f else None for f in fields])
            line_no.append(i)
        df = pd.DataFrame(rows, columns=names, dtype=object)
        empty = df[names[0]].isna().to_numpy()
        if empty.any():
            raise DataError(f"{path}: line {line_no[int(np.flatnonzero(empty)[0])]}: empty id")
        ids = df[names[0]]
        twice = ids.duplicated(keep=False).to_numpy()
        if twice.any():  # which row's attributes a rating takes would be a guess (pandas: InvalidIndexError)
            first = ids.iloc[int(np.flatnonzero(twice)[0])]
            where = [line_no[int(i)] for i in np.flatnonzero(ids.to_numpy() == first)]
            others = ids[twice].nunique() - 1
            more = f"; {others:,} other ids too" if others else ""
            raise DataError(f"{path}: {names[0]} {first!r} is on more than one line (lines {few(where)}){more}; "
                            "give each once")
        return df

    @staticmethod
    def _users_file(variant: str) -> str:
        return "u.user" if variant == "100k" else "users.dat"

    @staticmethod
    def _movies_file(variant: str) -> str:
        return "u.item" if variant == "100k" else "movies.dat"

    def _users(self, variant: str) -> pd.DataFrame:
        if variant == "100k":
            return self._side_table("u.user", "|", ["id", "age", "gender", "occupation", "zip_code"])
        return self._side_table("users.dat", "::", ["id", "gender", "age", "occupation", "zip_code"])

    def _movies(self, variant: str) -> pd.DataFrame:
        """Movie id → genres (list) and release year (str or None)."""
        if variant == "100k":
            names, source = list(GENRES_100K), "the 19 of MovieLens 100K, u.genre being absent"
            if (self.path / "u.genre").exists():
                names, source = self._genre_names(), "as many as u.genre names"
            cols = ["id", "title", "release_date", "video_date", "url", *(f"g{i}" for i in range(len(names)))]
            m = self._side_table("u.item", "|", cols, f" (id, title, release date, video date, URL and "
                                                      f"{len(names)} genre flags: {source})")
            flags = m[[f"g{i}" for i in range(len(names))]].to_numpy() == "1"
            genres = [[names[j] for j in np.flatnonzero(row)] for row in flags]  # 1.7k movies: not a hot path
            year = [d[-4:] if isinstance(d, str) and d[-4:].isdigit() else None for d in m["release_date"]]
        else:
            m = self._side_table("movies.dat", "::", ["id", "title", "genres"])
            genres = [[x for x in g.split("|") if x] for g in m["genres"].fillna("")]  # empty pieces left out
            found = [_YEAR_IN_TITLE.search(t) if isinstance(t, str) else None for t in m["title"]]
            year = [f.group(1) if f else None for f in found]
        out = pd.DataFrame({"id": m["id"].astype(str)})
        out["genres"] = pd.Series(genres, dtype=object)
        out["release_year"] = pd.Series(year, dtype=object)
        return out

    def _genre_names(self) -> list[str]:
        """u.genre's names in the order of their flags, which must be 0, 1, ... (u.item's flag columns)."""
        g = self._side_table("u.genre", "|", ["name", "flag"])
        path, by_flag = self.path / "u.genre", {}
        for name, flag in zip(g["name"], g["flag"]):
            flag = None if flag is None else flag.strip()  # "1 " was read as 1
            whole = bool(flag) and flag.isascii() and flag.isdigit()
            if not whole or int(flag) in by_flag:
                what = "no flag" if not flag else f"flag {flag!r} given twice" if whole else \
                    f"flag {flag!r}, not a whole number"
                raise DataError(f"{path}: genre {name!r} has {what}; each genre takes one of the flags 0, 1, ...")
            by_flag[int(flag)] = name
        if not by_flag:
            raise DataError(f"{path}: names no genre; give one line per genre, name|flag, or leave the file out "
                            "for MovieLens 100K's 19")
        if sorted(by_flag) != list(range(len(by_flag))):
            missing = sorted(set(range(max(by_flag) + 1)) - set(by_flag))
            raise DataError(f"{path}: the flags run 0 to {max(by_flag)} without {few(missing)}; u.item's genre "
                            "columns are numbered 0, 1, ... with no gap")
        return [by_flag[i] for i in range(len(by_flag))]

    # --- streaming ---------------------------------------------------------------
    def chunks(self, chunk_size: int) -> Iterator[pd.DataFrame]:
        variant = self.variant()
        users, movies = self._users(variant), self._movies(variant)
        user_idx, movie_idx = pd.Index(users["id"].astype(str)), pd.Index(movies["id"])
        ratings = self._require_file(self.path / ("u.data" if variant == "100k" else "ratings.dat"))
        sep = b"\t" if variant == "100k" else b"::"
        absent = {"user": [0, None], "movie": [0, None]}  # ratings whose id the side table lacks, the first's line
        for first, block in iter_line_blocks(ratings, chunk_size):
            buf, line_no, n_block = split_block(block, first, sep, len(_RATING_COLUMNS), self.bad, encoding="latin-1")
            self.rows_seen += n_block
            if len(line_no) == 0:
                continue
            table = parse_block(buf, _RATING_COLUMNS, b"\t", encoding="latin-1")
            rating, bad_rating = parse_numbers(arrow_strings(table.column("rating")))
            ok = ~bad_rating & np.isin(rating, (1.0, 2.0, 3.0, 4.0, 5.0))
            if not ok.all():
                self.bad.add("bad_label", line_no[~ok], column="rating", expected="a rating 1 to 5",
                             got=table.column("rating")[int(np.flatnonzero(~ok)[0])].as_py())
            ts, bad_ts = parse_numbers(arrow_strings(table.column("timestamp")))
            if (bad_ts & ok).any():
                self.bad.add("non_numeric", line_no[bad_ts & ok], column="timestamp", expected="a number",
                             got=table.column("timestamp")[int(np.flatnonzero(bad_ts & ok)[0])].as_py())
            ok &= ~bad_ts
            three = ok & (rating == 3.0)
            self.bad.add_dropped("rating_3", int(three.sum()))
            keep = ok & ~three
            if not keep.any():
                continue
            self._count_file_rows(ratings, int(keep.sum()))
            uid = arrow_strings(table.column("user"))[keep]
            mid = arrow_strings(table.column("movie"))[keep]
            cols: dict[str, np.ndarray] = {}
            if self.include_ids:
                cols["user_id"], cols["movie_id"] = uid, mid
            u = user_idx.get_indexer(uid)
            for name in ("gender", "age", "occupation", "zip_code"):
                cols[name] = _take(users[name].to_numpy(dtype=object), u)
            mv = movie_idx.get_indexer(mid)
            for kind, idx, ids in (("user", u, uid), ("movie", mv, mid)):
                holes = np.flatnonzero(idx < 0)
                if len(holes):
                    absent[kind][0] += len(holes)
                    if absent[kind][1] is None:
                        absent[kind][1] = (int(line_no[keep][holes[0]]), ids[holes[0]])
            cols["genres"] = _take(movies["genres"].to_numpy(dtype=object), mv, missing=[])
            cols["release_year"] = _take(movies["release_year"].to_numpy(dtype=object), mv)
            cols["timestamp"] = ts[keep]
            cols = {f.name: cols[f.name] for f in self.fields}
            yield canonical_frame((rating[keep] > 3).astype(np.int8), cols, index=line_no[keep] - 1)
        side = {"user": (self._users_file(variant), "gender, age, occupation and zip code"),
                "movie": (self._movies_file(variant), "genres and release year")}
        for kind, (count, first_seen) in absent.items():
            if count:  # kept (a rating is a rating), but not silently: every one of them shares the missing id
                table, what = side[kind]
                log.warning("%s: %s ratings name a %s that %s lacks (the first on line %d, %s %r): their %s are "
                            "missing", ratings, f"{count:,}", kind, table, first_seen[0], kind, first_seen[1], what)


def _take(values: np.ndarray, idx: np.ndarray, missing: object = None) -> np.ndarray:
    """``values[idx]`` with ``missing`` where ``idx`` is -1 (an id absent from the side table)."""
    out = values[np.maximum(idx, 0)].astype(object)
    if (idx < 0).any():
        hole = np.flatnonzero(idx < 0)
        for i in hole:
            out[i] = [] if isinstance(missing, list) else missing
    return out
