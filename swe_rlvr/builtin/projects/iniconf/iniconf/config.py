"""The parsed configuration and its typed getters."""

from iniconf import values
from iniconf.interpolation import interpolate

DEFAULT_SECTION = "DEFAULT"
_MISSING = object()


class NoSectionError(KeyError):
    pass


class NoOptionError(KeyError):
    pass


class Config:
    def __init__(self, sections=None, defaults=None):
        self._sections = {name: dict(opts) for name, opts in (sections or {}).items()}
        self._defaults = dict(defaults or {})

    def sections(self):
        return list(self._sections)

    def defaults(self):
        return dict(self._defaults)

    def options(self, section):
        return list(dict.fromkeys([*self._require(section), *self._defaults]))

    def has_option(self, section, key):
        key = key.lower()
        return section in self._sections and (key in self._sections[section]
                                              or key in self._defaults)

    def set(self, section, key, value):
        target = self._defaults if section == DEFAULT_SECTION else self._sections.setdefault(section, {})
        target[key.lower()] = str(value)

    def get(self, section, key, default=_MISSING, raw=False):
        if section not in self._sections:
            if default is not _MISSING:
                return default
            raise NoSectionError(section)
        key = key.lower()
        if key in self._sections[section]:
            value = self._sections[section][key]
        elif key in self._defaults:
            value = self._defaults[key]
        elif default is not _MISSING:
            return default
        else:
            raise NoOptionError(f"{section}.{key}")
        return value if raw else interpolate(value, self, section)

    def getint(self, section, key, default=_MISSING):
        return self._typed(values.to_int, section, key, default)

    def getbool(self, section, key, default=_MISSING):
        return self._typed(values.to_bool, section, key, default)

    def getlist(self, section, key, default=_MISSING):
        return self._typed(values.to_list, section, key, default)

    def getsize(self, section, key, default=_MISSING):
        return self._typed(values.to_size, section, key, default)

    def getduration(self, section, key, default=_MISSING):
        return self._typed(values.to_seconds, section, key, default)

    def _typed(self, convert, section, key, default):
        value = self.get(section, key, default)
        if default is not _MISSING and value is default:
            return default
        return convert(value)

    def _require(self, section):
        if section not in self._sections:
            raise NoSectionError(section)
        return self._sections[section]
