"""The gfx950 emulation's build cache (emulated.py) keeps the last builds used, not every source tree ever
built; pure Python, no compiler needed."""
import os
import time

from sglang_smallm_plugin import emulated


def test_prune_keeps_the_last_used_builds_and_the_current_one(tmp_path):
    now = time.time()
    builds = [tmp_path / f"{i:016x}" for i in range(12)]
    for i, b in enumerate(builds):  # build i last used i hours ago
        b.mkdir()
        (b / "lib.so").write_bytes(b"x")
        os.utime(b, (now - 3600 * i, now - 3600 * i))
    other = tmp_path / "notes"  # not a build folder: never touched
    other.mkdir()
    current = builds[11]  # the oldest, loaded now: becomes the newest
    emulated._prune_builds(tmp_path, current, keep=4)
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([b.name for b in builds[:3]] + [current.name, "notes"])
    assert (current / "lib.so").exists()
    emulated._prune_builds(tmp_path, builds[0], keep=emulated.KEEP_BUILDS)  # fewer than keep: nothing removed
    assert sorted(p.name for p in tmp_path.iterdir()) == left
