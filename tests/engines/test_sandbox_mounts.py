"""The folders bwrap creates for the sandbox's mount points (engines.sandbox.Sandbox._parent_dirs)."""

from __future__ import annotations

from pathlib import Path

from engines.sandbox import Sandbox


def test_mount_points_parents_are_made_outermost_first_outside_usr_and_tmp():
    mounts = [
        Path("/srv/data/runs/r1"),
        Path("/srv/data/homes/h1"),
        Path("/usr/lib/node_modules"),  # /usr is mounted whole, read-only
        Path("/tmp/x/y"),  # /tmp is the sandbox's own tmpfs
        Path("/opt/node"),
    ]
    assert Sandbox._parent_dirs(mounts) == ["/opt", "/srv", "/srv/data", "/tmp/x", "/srv/data/homes", "/srv/data/runs"]
