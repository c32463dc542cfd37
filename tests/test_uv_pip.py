"""infra/uv_pip.py: uv installs under pip's configuration (what infra/setup.sh runs on a fresh .venv).

The install itself runs on every CI run (`make test` sets up a fresh clone); these tests pin the
translation of pip's settings, by hand, and that the script reads pip's real configuration.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "infra" / "uv_pip.py"

_spec = importlib.util.spec_from_file_location("uv_pip", SCRIPT)
assert _spec and _spec.loader
uv_pip = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(uv_pip)


def test_pip_settings_merge_scopes_split_lists_and_drop_repeats():
    lines = ["global.cert='/etc/ssl/ca.pem'",
             "global.extra-index-url='file:///a/simple file:///b/simple'",
             "global.find-links='/opt/wheels'",
             ":env:.find-links='/opt/wheels /more/wheels'",
             "install.no-index='false'",
             "not a setting"]
    assert uv_pip.pip_settings(lines) == {
        "cert": ["/etc/ssl/ca.pem"],
        "extra-index-url": ["file:///a/simple", "file:///b/simple"],
        "find-links": ["/opt/wheels", "/more/wheels"],
        "no-index": ["false"]}


def test_uv_flags_carry_what_chooses_the_files_and_pick_versions_as_pip_does():
    settings = {"index-url": ["https://first", "https://mirror"], "extra-index-url": ["file:///a"],
                "find-links": ["/w1", "/w2"], "constraint": ["/c.txt"], "trusted-host": ["mirror"],
                "no-index": ["true"], "cert": ["/ca.pem"], "timeout": ["180"]}
    assert uv_pip.uv_flags(settings) == [
        "--index-strategy", "unsafe-best-match", "--compile-bytecode",
        "--index-url", "https://mirror",
        "--extra-index-url", "file:///a", "--find-links", "/w1", "--find-links", "/w2",
        "--constraint", "/c.txt", "--allow-insecure-host", "mirror", "--no-index"]
    assert "--no-index" not in uv_pip.uv_flags({"no-index": ["off"]})


def test_the_script_reads_pips_real_configuration(tmp_path):
    conf = tmp_path / "pip.conf"
    conf.write_text("[global]\nfind-links = /from/the/file\nconstraint = /pins.txt\n")
    env = {**os.environ, "PIP_CONFIG_FILE": str(conf), "PIP_EXTRA_INDEX_URL": "file:///from/env"}
    out = subprocess.run([sys.executable, str(SCRIPT), "--print-args", "-q", "demo==1"], env=env,
                         capture_output=True, text=True, check=True).stdout.split()
    assert out[:5] == [str(Path(sys.executable).with_name("uv")), "pip", "install", "--python",
                       sys.executable]
    for flag, value in [("--find-links", "/from/the/file"), ("--constraint", "/pins.txt"),
                        ("--extra-index-url", "file:///from/env")]:
        assert value in out and out[out.index(value) - 1] == flag
    assert out[-2:] == ["-q", "demo==1"]
