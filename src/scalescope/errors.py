"""Errors that the command-line layer turns into one clear line and a non-zero exit."""


class ScalescopeError(Exception):
    """Base class: a user-facing problem whose message is complete on one line."""


class ConfigError(ScalescopeError):
    """A config file, an override or a cluster profile is wrong; nothing was started."""


class TopologyError(ScalescopeError):
    """The allocation or the machine does not match what the config asks for."""
