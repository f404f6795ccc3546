"""The one error type for bad configuration, so the CLI can print one line and exit 2."""


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type or out of range.

    The message always names the key, the value and what is allowed, in one line.
    """

    def __init__(self, key: str, value: object, allowed: str):
        key, allowed = " ".join(str(key).split()), " ".join(str(allowed).split())  # one line, always
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r}: {allowed}")


def require(ok: bool, key: str, value: object, allowed: str) -> None:
    """Raise ConfigError(key, value, allowed) unless ``ok``."""
    if not ok:
        raise ConfigError(key, value, allowed)
