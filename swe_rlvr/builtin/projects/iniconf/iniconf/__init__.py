"""iniconf: a small INI-style configuration parser."""

from iniconf.config import Config, NoOptionError, NoSectionError
from iniconf.errors import InterpolationError, ParseError
from iniconf.parser import load, parse
from iniconf.writer import dump

__all__ = ["Config", "NoOptionError", "NoSectionError", "InterpolationError", "ParseError",
           "load", "parse", "dump"]
