"""The one error type for bad configuration, so the CLI can print one line and exit 2."""


class ConfigError(ValueError):
    """A configuration value is unknown, of the wrong type or out of range.

    The message always names the key, the value and what is allowed, in one line.
    """

    def __init__(self, key: str, value: object, allowed: str):
        key, allowed = " ".join(str(key).split()), " ".join(str(allowed).split())  # one line, always
        self.key, self.value, self.allowed = key, value, allowed
        super().__init__(f"{key}={value!r}: {allowed}")

    def __reduce__(self):
        # args holds the formatted message, not the constructor's arguments: rebuild from the fields so
        # the error survives pickling (a check failing inside a Ray task keeps its one line)
        return type(self), (self.key, self.value, self.allowed), self.__dict__ or None


def require(ok: bool, key: str, value: object, allowed: str) -> None:
    """Raise ConfigError(key, value, allowed) unless ``ok``."""
    if not ok:
        raise ConfigError(key, value, allowed)
