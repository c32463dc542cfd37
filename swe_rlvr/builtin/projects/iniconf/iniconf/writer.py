"""Serialise a Config back to INI text that `parse` reads back unchanged."""

from iniconf.config import DEFAULT_SECTION


def dump(config):
    blocks = []
    if config.defaults():
        blocks.append(_block(DEFAULT_SECTION, config.defaults()))
    for name in config.sections():
        own = {k: config.get(name, k, raw=True) for k in config.options(name)
               if k not in config.defaults() or config.get(name, k, raw=True) != config.defaults()[k]}
        blocks.append(_block(name, own))
    return "\n".join(blocks)


def _block(name, options):
    lines = [f"[{name}]"]
    lines += [f"{key} = {_format(value)}" for key, value in options.items()]
    return "\n".join(lines) + "\n"


def _format(value):
    """Continuation lines are indented so the parser joins them back."""
    return value.replace("\n", "\n    ")
