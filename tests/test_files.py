"""The small files autoint writes: whole or not at all, and a damaged one named in one line."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autoint.errors import InputError
from autoint.files import read_json, write_json, write_text


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    target = tmp_path / "run.json"
    write_json(target, {"run_id": "a"})
    assert read_json(target) == {"run_id": "a"}

    def killed(src, dst):  # the process dies between writing the new text and putting it in place
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        write_json(target, {"run_id": "b"})
    assert read_json(target) == {"run_id": "a"}
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_write_text_replaces_and_keeps_utf8(tmp_path):
    target = tmp_path / "config.yaml"
    write_text(target, "a: 1\n")
    write_text(target, "name: café\n")
    assert target.read_text(encoding="utf-8") == "name: café\n"


@pytest.mark.parametrize("content", [b'{"tracking_uri": "sqlite:///m', b"", b"\xff\xfe{}", b"[1]"])
def test_a_damaged_json_file_is_an_input_error_naming_it(tmp_path, content):
    class RunFolderError(InputError):
        pass

    target = tmp_path / "metrics.json"
    target.write_bytes(content)
    with pytest.raises(RunFolderError, match=r"metrics\.json: (not valid JSON \(.*\)|expected a JSON object, "
                                             r"found list); start again"):
        read_json(target, RunFolderError, "; start again")


def test_permissions_are_those_of_a_plain_write(tmp_path):
    new, old = tmp_path / "new.json", tmp_path / "old.json"
    mask = os.umask(0o022)
    try:
        write_json(new, {})
        old.write_text("{}")
        old.chmod(0o640)
        write_json(old, {"a": 1})
    finally:
        os.umask(mask)
    assert new.stat().st_mode & 0o777 == 0o644  # a temporary file's 0600 would hide run.json from a team
    assert old.stat().st_mode & 0o777 == 0o640


def test_a_float_that_is_not_finite_is_written_as_json_null(tmp_path):
    """metrics.json of a test split of one class held a bare NaN (its AUC), which is not JSON: jq and strict
    parsers refused the whole file."""
    import json

    target = tmp_path / "metrics.json"
    write_json(target, {"test_auc": float("nan"), "runs": [1.5, float("inf")], "nested": {"x": -float("inf")}})

    def refuse(name):
        raise ValueError(name)

    assert json.loads(target.read_text(), parse_constant=refuse) == {"test_auc": None, "runs": [1.5, None],
                                                                     "nested": {"x": None}}


def test_numpys_floats_that_are_not_finite_are_null_too(tmp_path):
    """A float32 NaN (inspect's figures of a model gone NaN) reached json's default= hook and raised 'Out of range
    float values are not JSON compliant' (a reviewer's catch)."""
    import json

    import numpy as np

    target = tmp_path / "summary.json"
    write_json(target, {"a": np.float32("nan"), "b": np.float16("inf"), "c": np.float32(0.5), "n": 3},
               default=float)
    assert json.loads(target.read_text()) == {"a": None, "b": None, "c": 0.5, "n": 3}


def test_a_killed_processs_scratch_folder_is_swept_by_the_next_one_and_a_living_ones_is_not(tmp_path, monkeypatch):
    """`autoint serve` killed with SIGKILL left its copy of the model in /tmp, as every `predict runs:/…` left the
    model MLflow fetched (50 folders in a day of test runs here): a scratch folder is locked while its process
    lives, and one whose lock is free is removed when the next is made."""
    import signal
    import subprocess
    import sys
    import tempfile

    from autoint import files

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(files, "SCRATCH_GRACE_S", 0)
    child = subprocess.Popen([sys.executable, "-c", "import sys, time; from autoint.files import scratch_folder; "
                              "print(scratch_folder('serve'), flush=True); time.sleep(120)"],
                             env={**os.environ, "TMPDIR": str(tmp_path)}, stdout=subprocess.PIPE, text=True)
    try:
        theirs = Path(child.stdout.readline().strip())
        assert theirs.parent == tmp_path and theirs.name.startswith("autoint-serve-")
        (theirs / "model").mkdir()
        other = tmp_path / "autoint-notes"  # a file of that name is not a scratch folder
        other.write_text("kept")
        # Nor a user's folder of that prefix, or one of a scratch kind's name without the marker autoint makes
        # (an interim version removed any autoint-* folder a minute old: a security review's catch)
        users = [tmp_path / "autoint-my-experiments", tmp_path / "autoint-serve-mine", tmp_path / "autoint-inspect-x"]
        for folder in users:
            (folder / "results").mkdir(parents=True)
            (folder / "results" / "important.csv").write_text("1")
            os.utime(folder, (0, 0))
        mine = files.scratch_folder("model")
        assert theirs.is_dir() and other.is_file()  # its process lives
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
        assert files.sweep_scratch() == [theirs]
        assert not theirs.exists() and mine.is_dir() and other.is_file()
        assert all((folder / "results" / "important.csv").is_file() for folder in users)
        files.remove_scratch(mine / "inside")  # a path inside names its folder
        assert not mine.exists()
    finally:
        child.kill()
        child.wait()


def test_a_killed_processs_partial_output_is_removed_by_the_next_call_and_a_live_ones_is_not(tmp_path):
    """A helper's hunt: `autoint predict` killed (SIGKILL, the OOM killer) left its hidden `.NAME.PID.HEX.partial`
    beside the output for good. Each partial file is locked while its process lives; the next call for the same
    output removes those whose lock is free, once older than a minute, and no other file."""
    import signal
    import subprocess
    import sys
    import time

    from autoint.files import PARTIAL_GRACE_S, locked_partial

    target = tmp_path / "scores[1].csv"  # glob characters in the name are matched literally
    code = ("import sys, time; from pathlib import Path; from autoint.files import locked_partial; "
            "p, fd = locked_partial(Path(sys.argv[1])); print(p, flush=True); time.sleep(60)")
    holders = [subprocess.Popen([sys.executable, "-c", code, str(target)], stdout=subprocess.PIPE, text=True)
               for _ in range(2)]
    killed, live = (Path(h.stdout.readline().strip()) for h in holders)
    holders[0].send_signal(signal.SIGKILL)
    holders[0].wait()
    other = tmp_path / ".scores1.csv.1.ab.partial"  # another output's partial file
    other.write_text("x")
    link = tmp_path / ".scores[1].csv.2.cd.partial"  # a link is never followed nor removed
    link.symlink_to(other)
    old = time.time() - PARTIAL_GRACE_S - 5
    for path in (killed, live, other):
        os.utime(path, (old, old))
    try:
        partial, fd = locked_partial(target)
        os.close(fd)
        partial.unlink()
        assert not killed.exists() and live.exists() and other.exists() and link.is_symlink()
    finally:
        holders[1].kill()
        holders[1].wait()
    young = tmp_path / f".{target.name}.3.ef.partial"  # under a minute old: perhaps not locked yet
    young.write_text("x")
    partial, fd = locked_partial(target)
    os.close(fd)
    partial.unlink()
    assert young.exists() and not live.exists()  # live's process is gone now: its file is removed


def test_a_file_system_without_locks_writes_the_partial_file_unlocked(tmp_path, monkeypatch):
    """The review's catch: where flock is refused (some network file systems), predict stopped with an OSError
    traceback; the partial file is then written unlocked (and never swept, as nothing can tell its process lives)."""
    import errno
    import fcntl

    from autoint.files import locked_partial

    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    partial, fd = locked_partial(tmp_path / "scores.csv")
    assert fd is None and partial.is_file() and partial.name.startswith(".scores.csv.")


def test_a_file_system_without_locks_leaves_folders_unlocked_not_failed(tmp_path, monkeypatch):
    """A review's catch: folder_lock let an OSError of a refused flock (ENOLCK on some NFS mounts) out, so prepare
    and, since it takes one too, generating the synthetic log stopped there; the folder is then used unlocked."""
    import errno
    import fcntl

    from autoint.datasets.synthetic import ensure_generated
    from autoint.files import folder_lock

    def refuse(fd, op):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", refuse)
    with folder_lock(tmp_path, waiting="waiting"):
        (tmp_path / "inside").touch()
    log = ensure_generated({"n_rows": 500, "n_categorical": 3, "n_numeric": 1, "n_crosses": 1, "seed": 1},
                           tmp_path / "raw")
    assert (tmp_path / "inside").is_file() and log.is_file()


def test_this_processs_own_partial_files_are_not_swept_until_released(tmp_path):
    """The review's catch: where a lock does not tell threads of one process apart (NFS's may not), a thread's
    sweep could remove another thread's live partial file; it was first kept by process id, which a container
    repeats across runs. This process's own partial files are kept until released, and only those."""
    import time

    from autoint.files import PARTIAL_GRACE_S, locked_partial, release_partial, sweep_partials

    target = tmp_path / "scores.csv"
    partial, fd = locked_partial(target)
    os.close(fd)  # its lock gone, as a lock another thread's file gives no protection on such file systems
    old = time.time() - PARTIAL_GRACE_S - 5
    os.utime(partial, (old, old))
    assert sweep_partials(target) == [] and partial.exists()
    release_partial(partial, None)
    assert sweep_partials(target) == [partial] and not partial.exists()
