"""devtools/lines_per_room.py: every production file is in exactly one room or named as outside them, so that a new
file (a variant's new layer) cannot go uncounted; and the line count skips blanks and comments alone."""

import fnmatch
import subprocess
from pathlib import Path

from helpers import load_devtool

REPO = Path(__file__).resolve().parents[1]


def _tool():
    return load_devtool("lines_per_room")


def test_every_production_file_is_in_one_room():
    tool = _tool()
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, check=True, capture_output=True, text=True).stdout.split()
    production = [f for f in tracked if any(fnmatch.fnmatch(f, p) for p in tool.PRODUCTION)]
    assert production
    for f in production:
        rooms = [n for n, pats in tool.ROOMS.items() if any(fnmatch.fnmatch(f, p) for p in pats)]
        outside = any(fnmatch.fnmatch(f, p) for p in tool.OUTSIDE)
        assert len(rooms) + outside == 1, (f, rooms, outside)


def test_code_lines_skip_blanks_and_comments():
    tool = _tool()
    assert tool.code_lines('x = 1\n\n    # a comment\n"""doc"""\n', "a.py") == 2
    assert tool.code_lines("int a;\n  // a comment\n\n# define X 1\n", "a.cpp") == 2
