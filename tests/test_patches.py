"""swe_rlvr.patches: hunk arithmetic worked by hand, and patches exactly as git writes them.

The git tests build a repository, stage every kind of change git can describe as text (an edit
under a function, a new, a deleted, an empty and a renamed file, a mode change, a file without its
final newline, names git quotes), read `git diff --cached -M` back, and check the paths and flags
against what was staged; reversing the diff must then take the tree back to the first commit.
"""

from __future__ import annotations

import subprocess

import pytest

from swe_rlvr.patches import header_paths, parse_hunks, parse_patch, patch_files, reverse_patch, unquote

SHELF = '''diff --git a/inv/stock.py b/inv/stock.py
index 3f2a1b0..9c4d2e1 100644
--- a/inv/stock.py
+++ b/inv/stock.py
@@ -4,4 +4,5 @@ class Shelf:
     def take(self, n):
-        if n > self.count:
-            raise ValueError(n)
+        if n > self.count or n < 0:
+            raise ValueError(f"cannot take {n}")
+        self.taken += n

@@ -20 +21 @@ def restock(shelf):
-    shelf.count = 10
+    shelf.count = shelf.capacity
'''


def test_hunks_count_lines_by_hand():
    (f,) = parse_patch(SHELF)
    first, second = f.hunks
    assert (f.path, f.new_file, f.deleted) == ("inv/stock.py", False, False)
    # Hunk 1: header -4,4 -> old lines 4..7; two removed, three added; git's heading kept.
    assert (first.path, first.old_start, first.old_len, first.header) == ("inv/stock.py", 4, 4,
                                                                           "class Shelf:")
    assert first.span() == (4, 7) and (len(first.removed), len(first.added)) == (2, 3)
    assert first.old == ["    def take(self, n):", "        if n > self.count:",
                         "            raise ValueError(n)", ""]
    assert first.new[1:4] == ["        if n > self.count or n < 0:",
                              '            raise ValueError(f"cannot take {n}")',
                              "        self.taken += n"]
    # It changes base lines 5 and 6 (line 4 is context); the added third line follows line 6,
    # which is already counted.
    assert first.changed_at == [5, 6]
    # Hunk 2: "-20" without a length means one line; the first hunk's extra line moves it to 21.
    assert (second.old_start, second.old_len, second.new_start, second.changed_at) == (20, 1, 21,
                                                                                     [20])
    assert parse_hunks(SHELF) == [first, second]


def test_an_insertion_sits_after_the_line_it_follows():
    patch = ("--- a/m.py\n+++ b/m.py\n@@ -3,2 +3,3 @@\n def f(x):\n+    x = abs(x)\n"
             "     return x\n")
    # Context line 3 (`def f`), then the insertion after it: it follows base line 3.
    (hunk,) = parse_hunks(patch)
    assert hunk.changed_at == [3]
    # git -U0 writes a pure insertion after line 5 as -5,0: it replaces lines 6..5 (none)
    (bare,) = parse_hunks("--- a/m.py\n+++ b/m.py\n@@ -5,0 +6 @@\n+x = 1\n")
    assert bare.span() == (6, 5)


def test_hunk_bodies_are_read_by_count_not_by_look():
    """A removed SQL comment `-- x` and an added `++ y` look like ---/+++ headers; the counts say
    they are body lines, and a blank context line without its space is still context."""
    (h,) = parse_hunks("--- a/q.sql\n+++ b/q.sql\n@@ -1,3 +1,3 @@\n--- x\n+++ y\n a\n\n")
    assert (h.removed, h.added, h.old, h.path) == (["-- x"], ["++ y"], ["-- x", "a", ""], "q.sql")


def test_a_truncated_hunk_is_refused_but_its_files_are_still_named():
    truncated = "diff --git a/f.py b/f.py\n--- a/f.py\n+++ b/f.py\n@@ -1,3 +1,3 @@\n a\n"
    with pytest.raises(ValueError, match="hunk ends early"):
        parse_patch(truncated)
    assert patch_files(truncated) == ("f.py",)              # from its headers, by look
    assert parse_patch("no diff here\n") == [] and patch_files("") == ()


def test_header_paths_undo_git_quoting():
    """GNU `patch` reads `"b/.gi\\164/evil"` as `.git/evil` and writes it there: the guard that
    refuses patches into `.git` must read it so too, also where a space splits the name."""
    assert ".git/evil" in header_paths('+++ "b/.gi\\164/evil"\n')
    assert ".git/my" in header_paths('diff --git "a/.gi\\164/my x" "b/.gi\\164/my x"\n')
    assert header_paths("Index: a/x.py\n*** a/y.py\t2020\n--- /dev/null\n") == ["x.py", "y.py"]
    assert unquote('"caf\\303\\251 \\"q\\"\\t.py"') == 'café "q"\t.py' and unquote("a b") == "a b"


# --------------------------------------------------------------------------- as git writes them


def git(repo, *args: str, stdin: str | None = None) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                          input=stdin, capture_output=True, text=True, check=True).stdout


@pytest.fixture()
def staged(tmp_path):
    """(repo, first commit, `git diff --cached -M` of every kind of change against it)."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    files = {"calc.py": "import math\n\n\ndef area(r):\n    x = 1\n    return 3 * r * r\n",
             "gone.txt": "bye\n", "old_name.py": "A = 1\nB = 2\nC = 3\nD = 4\n",
             "run.sh": "echo hi\n", "tail.txt": "no newline", "my file.txt": "space\n"}
    for name, text in files.items():
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "calc.py").write_text(files["calc.py"].replace("3 * r", "math.pi * r"))
    (repo / "gone.txt").unlink()
    (repo / "old_name.py").rename(repo / "new_name.py")
    (repo / "new_name.py").write_text("A = 1\nB = 2\nC = 3\nD = 5\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "tail.txt").write_text("still no newline")
    (repo / "my file.txt").write_text("space\nmore\n")
    (repo / "café.py").write_text("x = 1\n")
    (repo / "empty.txt").write_text("")
    git(repo, "add", "-A")
    return repo, base, git(repo, "diff", "--cached", "-M")


def test_git_diff_paths_and_flags(staged):
    _, _, diff = staged
    files = {f.path: f for f in parse_patch(diff)}
    assert set(files) == {"calc.py", "café.py", "empty.txt", "gone.txt", "my file.txt",
                          "new_name.py", "run.sh", "tail.txt"}
    assert files["café.py"].new_file and files["empty.txt"].new_file
    assert not files["empty.txt"].hunks                          # git writes no hunk for it
    assert files["gone.txt"].deleted and files["gone.txt"].hunks[0].removed == ["bye"]
    assert not files["run.sh"].hunks                             # a mode change only
    (edit,) = files["calc.py"].hunks
    assert edit.header == "import math" and edit.changed_at == [6]   # git's default funcname
    assert edit.removed == ["    return 3 * r * r"]
    assert files["tail.txt"].hunks[0].added == ["still no newline"]   # marker dropped
    assert files["new_name.py"].hunks[0].removed == ["D = 4"]
    assert patch_files(diff) == tuple(files)                     # in the order git wrote them


def test_reversed_git_diff_restores_the_base(staged):
    repo, base, diff = staged
    git(repo, "commit", "-qm", "change")
    assert reverse_patch(reverse_patch(diff)) == diff
    git(repo, "apply", "-", stdin=reverse_patch(diff))
    git(repo, "add", "-A")
    assert git(repo, "diff", "--cached", "--name-status", base) == ""
