"""formats.lock, what the refusal of a held place says and what a refused command leaves:
the message names the kind of place, its path and the holder as its sidecar recorded it
(its start as recorded, the program it runs, or that it has not written its details yet);
a file's lock lies beside it; the clean-up of a refused command's new directory counts
every lock file and the caller's bookkeeping as nothing written, never waits on a lock
another process holds, and lets the block's own error through whatever it cannot remove.
A wrong place or time in the message, a lock file read as work, a callback asked about
nothing, a clean-up that waits or replaces the error are the bugs mutmut plants here
(scripts/mutmut/run.py)."""

import json
import os
import sys
import time

import pytest

from resgrad.formats.lock import (
    LOCK_NAME,
    Locked,
    hold_lock,
    lock_dir,
    lock_path_for,
    new_dir_or_nothing,
)


def _refusal(place, **kw):
    """The message of taking ``place``'s lock while this process holds it."""
    with lock_dir(place, **kw):
        with pytest.raises(Locked) as e:
            with lock_dir(place, **kw):
                pass
    return str(e.value)


def test_the_refusal_names_the_kind_of_place_and_its_path(tmp_path):
    assert _refusal(tmp_path).startswith(f"run directory {str(tmp_path)!r} is in use")
    got = _refusal(tmp_path, what="study directory")
    assert got.startswith(f"study directory {str(tmp_path)!r} is in use")


def test_a_files_lock_lies_beside_it_so_two_files_of_one_name_do_not_share_one(tmp_path):
    a, b = tmp_path / "a" / "out.csv", tmp_path / "b" / "out.csv"
    assert lock_path_for(a, directory=False) == str(tmp_path / "a" / ".out.csv.lock")
    assert lock_path_for(b, directory=False) != lock_path_for(a, directory=False)
    assert lock_path_for(tmp_path / "a", directory=True) == str(tmp_path / "a" / LOCK_NAME)


def test_the_holders_start_is_the_one_its_sidecar_recorded(tmp_path):
    path = str(tmp_path / LOCK_NAME)
    started = 1_000_000_000.0  # 2001, in the local zone as the message writes it
    with hold_lock(path, "x"):
        info = {"pid": 4321, "host": "node7", "started": started, "command": "resgrad train"}
        with open(path + ".info", "w", encoding="utf-8") as f:
            json.dump(info, f)
        with pytest.raises(Locked) as e:
            with hold_lock(path, "x"):
                pass
    when = time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started))
    assert when.startswith("2001-09-")
    assert f"pid 4321 on node7, started {when} (resgrad train)" in str(e.value)


@pytest.mark.parametrize(
    "sidecar",
    [
        None,  # the holder has taken the lock and not yet written its details
        '{"pid": 1, "host": "h", "sta',  # torn while written
        '{"pid": 1, "host": "h", "command": "c"}',  # a field missing
        '{"pid": 1, "host": "h", "started": "noon", "command": "c"}',  # a field of a bad type
    ],
)
def test_a_holder_without_readable_details_is_said_to_be_unknown_not_made_up(tmp_path, sidecar):
    path = str(tmp_path / LOCK_NAME)
    with hold_lock(path, "x"):
        os.unlink(path + ".info")
        if sidecar is not None:
            with open(path + ".info", "w", encoding="utf-8") as f:
                f.write(sidecar)
        with pytest.raises(Locked) as e:
            with hold_lock(path, "x"):
                pass
    msg = str(e.value)
    assert "another resgrad run: a process that has not yet written its details; wait" in msg
    assert "pid" not in msg and "started" not in msg


@pytest.mark.parametrize(
    "argv, command",
    [
        (["/opt/bin/mytool", "run", "a"], "mytool run a"),  # another program holds it
        (["/x/resgrad/__main__.py", "train"], "resgrad train"),  # python -m resgrad
        ([""], "python"),  # an interactive interpreter: no script
        (["", "a"], "python a"),
        ([], "python"),  # an embedded one: no argv at all
    ],
)
def test_the_sidecar_names_the_program_as_the_user_started_it(tmp_path, monkeypatch, argv, command):
    monkeypatch.setattr(sys, "argv", argv)
    path = str(tmp_path / LOCK_NAME)
    with hold_lock(path, "x"):
        with open(path + ".info", encoding="utf-8") as f:
            assert json.load(f)["command"] == command


def _refused(new, write, disposable=None):
    """Run a block in ``new_dir_or_nothing(new)`` that writes with ``write`` and fails."""
    with pytest.raises(ValueError, match="refused"):
        with new_dir_or_nothing(new, disposable):
            write(new)
            raise ValueError("refused")


def test_lock_files_of_any_name_and_a_killed_holders_details_are_not_work(tmp_path):
    def write(new):
        os.makedirs(new / "sub")
        (new / "grid.lock").write_text("")  # a lock file of another tool, not hidden
        (new / "sub" / "out.csv.lock").write_text("x")  # one that holds a byte
        # what a holder killed with SIGKILL leaves: the lock and its details
        (new / LOCK_NAME).write_text("")
        info = {"pid": 1, "host": "h", "started": 0.0, "command": "resgrad train"}
        (new / (LOCK_NAME + ".info")).write_text(json.dumps(info))

    _refused(tmp_path / "run", write)
    assert not (tmp_path / "run").exists()


def test_the_callers_bookkeeping_is_judged_file_by_file(tmp_path):
    asked = []

    def disposable(path):
        asked.append(os.path.relpath(path, tmp_path))
        return os.path.basename(path) == "cells.partial.jsonl" and os.path.getsize(path) == 0

    def write(new, result=""):
        os.makedirs(new / "cells")
        (new / "cells" / "cells.partial.jsonl").write_text(result)

    _refused(tmp_path / "run", write, disposable)
    assert not (tmp_path / "run").exists()
    assert asked == [os.path.join("run", "cells", "cells.partial.jsonl")]
    _refused(tmp_path / "run", lambda new: write(new, "{}\n"), disposable)  # a result: kept
    assert (tmp_path / "run" / "cells" / "cells.partial.jsonl").read_text() == "{}\n"


def test_the_clean_up_does_not_wait_for_a_lock_another_holds(tmp_path):
    new = tmp_path / "run"
    with pytest.raises(ValueError):
        with new_dir_or_nothing(new):
            held = lock_dir(new)  # another holder inside its run, for the whole clean-up
            held.__enter__()
            start = time.perf_counter()
            raise ValueError("refused")
    took = time.perf_counter() - start
    held.__exit__(None, None, None)
    assert sorted(os.listdir(new)) == [LOCK_NAME]  # left as it was, the holder's info gone
    assert took < 0.5  # "at once": a refused command is not held up by a busy directory


@pytest.mark.parametrize("call", ["unlink", "rmdir"])
def test_the_blocks_error_is_the_one_raised_whatever_the_clean_up_cannot_remove(
    tmp_path, monkeypatch, call
):
    def refuse(path, *a, **kw):
        raise PermissionError(13, "Permission denied", path)

    def write(new):
        (new / ".cells.partial.jsonl").write_text("")
        monkeypatch.setattr(os, call, refuse)  # a read-only mount, another owner's files

    _refused(tmp_path / "run", write)
    monkeypatch.undo()
    assert (tmp_path / "run").is_dir()  # what could not go stays; nothing else happened
