"""GradSA's error type: bad configuration, a corrupt payload, a failed exchange, a bad checkpoint."""
from pimrt.errors import PimrtError


class GradSAError(PimrtError):
    """Raised by pimrt.gradsa and pimrt.train on bad input; the message names what was wrong."""
