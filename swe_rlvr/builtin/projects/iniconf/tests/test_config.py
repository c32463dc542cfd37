import pytest

import iniconf

TEXT = """
[DEFAULT]
root = /srv
retries = 3

[server]
host = example.org
port = 8080 ; the public port
data = ${root}/data
url = http://${host}:${port}/

[client]
server = ${server:url}
retries = 5
"""


@pytest.fixture
def cfg():
    return iniconf.parse(TEXT)


def test_sections_exclude_default(cfg):
    assert cfg.sections() == ["server", "client"]


def test_get_and_getint(cfg):
    assert cfg.get("server", "host") == "example.org"
    assert cfg.getint("server", "port") == 8080


def test_defaults_are_fallbacks(cfg):
    assert cfg.getint("server", "retries") == 3
    assert cfg.getint("client", "retries") == 5


def test_interpolation_same_and_other_section(cfg):
    assert cfg.get("server", "data") == "/srv/data"
    assert cfg.get("client", "server") == "http://example.org:8080/"


def test_raw_get_skips_interpolation(cfg):
    assert cfg.get("server", "data", raw=True) == "${root}/data"


def test_missing_option_uses_default(cfg):
    assert cfg.get("server", "nope", default="x") == "x"
    assert cfg.getint("server", "nope", default=7) == 7


def test_missing_option_raises(cfg):
    with pytest.raises(iniconf.NoOptionError):
        cfg.get("server", "nope")


def test_missing_reference_raises():
    cfg = iniconf.parse("[a]\nx = ${y}\n")
    with pytest.raises(iniconf.InterpolationError):
        cfg.get("a", "x")


def test_entry_before_section_raises():
    with pytest.raises(iniconf.ParseError) as info:
        iniconf.parse("x = 1\n")
    assert info.value.lineno == 1
