import iniconf


def test_round_trip():
    text = "[DEFAULT]\nroot = /srv\n\n[server]\nport = 8080\ndata = ${root}/data\n"
    cfg = iniconf.parse(text)
    again = iniconf.parse(iniconf.dump(cfg))
    assert again.sections() == ["server"]
    assert again.get("server", "data") == "/srv/data"


def test_dump_omits_inherited_defaults():
    cfg = iniconf.parse("[DEFAULT]\nx = 1\n\n[a]\ny = 2\n")
    assert iniconf.dump(cfg) == "[DEFAULT]\nx = 1\n\n[a]\ny = 2\n"


def test_set_then_dump():
    cfg = iniconf.Config()
    cfg.set("a", "Key", 5)
    assert iniconf.dump(cfg) == "[a]\nkey = 5\n"
