"""tests/python/test_error_index.py — docs/guide.md's index of error messages
is what scripts/list_errors.py finds in the sources (so a new message cannot
go undocumented: regenerate with scripts/list_errors.py --update docs/guide.md)."""
import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_error_index_is_current():
    r = subprocess.run([sys.executable, os.path.join(REPO, "scripts", "list_errors.py"), "--check",
                        os.path.join(REPO, "docs", "guide.md")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
