"""`reverse_patch` on hand-written diffs: new files and deletions, the order of removals and
additions, no-newline markers, renames and mode changes, hunk lines read by count, and the patches
it refuses.

Reversing every real SWE-bench Lite patch twice is checked in test_loaders, beside the Lite
records it needs.
"""

from __future__ import annotations

import pytest

from swe_rlvr.patches import reverse_patch

# --------------------------------------------------------------------------- reverse_patch


def test_reverse_new_file_becomes_deletion():
    new = "\n".join(["diff --git a/notes.txt b/notes.txt", "new file mode 100644",
                     "index 0000000..3b18e51", "--- /dev/null", "+++ b/notes.txt",
                     "@@ -0,0 +1,2 @@", "+hello", "+world", ""])
    gone = "\n".join(["diff --git a/notes.txt b/notes.txt", "deleted file mode 100644",
                      "index 3b18e51..0000000", "--- a/notes.txt", "+++ /dev/null",
                      "@@ -1,2 +0,0 @@", "-hello", "-world", ""])
    assert reverse_patch(new) == gone
    assert reverse_patch(gone) == new


def test_reverse_puts_removals_first_in_each_changed_run():
    # -a +b -c +d  reversed swaps signs (+a -b +c -d) then orders removals first: -b -d +a +c
    diff = "\n".join(["--- a/f", "+++ b/f", "@@ -1,3 +1,3 @@", "-a", "+b", "-c", "+d", " e"])
    assert reverse_patch(diff) == "\n".join(
        ["--- a/f", "+++ b/f", "@@ -1,3 +1,3 @@", "-b", "-d", "+a", "+c", " e"])


def test_reverse_keeps_no_newline_markers_with_their_line():
    diff = "\n".join(["--- a/f", "+++ b/f", "@@ -1 +1 @@", "-old", "\\ No newline at end of file",
                      "+new", "\\ No newline at end of file", ""])
    assert reverse_patch(diff) == "\n".join(
        ["--- a/f", "+++ b/f", "@@ -1 +1 @@", "-new", "\\ No newline at end of file",
         "+old", "\\ No newline at end of file", ""])


def test_reverse_rename_and_mode_change():
    diff = "\n".join(["diff --git a/a.py b/b.py", "old mode 100644", "new mode 100755",
                      "similarity index 100%", "rename from a.py", "rename to b.py", ""])
    assert reverse_patch(diff) == "\n".join(
        ["diff --git a/b.py b/a.py", "old mode 100755", "new mode 100644",
         "similarity index 100%", "rename from b.py", "rename to a.py", ""])


def test_reverse_reads_hunk_lines_by_count_not_by_look():
    """A removed SQL comment '-- x' looks like a '--- ' header; the hunk counts say otherwise."""
    # body: removed "-- x", added "++ y"; reversed: removed "++ y", added "-- x"
    diff = "\n".join(["--- a/q.sql", "+++ b/q.sql", "@@ -1 +1 @@", "--- x", "+++ y", ""])
    assert reverse_patch(diff) == "\n".join(
        ["--- a/q.sql", "+++ b/q.sql", "@@ -1 +1 @@", "-++ y", "+-- x", ""])


def test_reverse_refuses_binary_patches():
    with pytest.raises(ValueError, match="binary"):
        reverse_patch("diff --git a/x.png b/x.png\nGIT binary patch\nliteral 4\n")


def test_reverse_refuses_a_truncated_hunk():
    with pytest.raises(ValueError, match="hunk ends early"):
        reverse_patch("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n")
