"""Sub-commands of `pimrt`, one module each (see pimrt/cli.py)."""
