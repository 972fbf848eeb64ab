"""Errors pimrt reports to its users. Each names what was wrong and where."""


class PimrtError(Exception):
    """Base of every error pimrt raises on bad input; the CLI prints it without a traceback."""


class ConfigError(PimrtError):
    """A memory part, host part or run configuration that is missing, malformed or impossible."""


class TraceError(PimrtError):
    """A trace that cannot be read: names the file, the line (or record) and the field."""


class SimulationError(PimrtError):
    """The simulator refused a request or reached an impossible state (reported by the C code)."""
