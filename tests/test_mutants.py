"""The yardsticks' mutants (scripts/mutants.py): every one must make tests/test_yardsticks.py
fail on a copy of the repository. Slow (about 4 minutes on 2 cores): pytest -m mutants."""
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.mutants
def test_every_yardstick_mutant_is_killed():
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "mutants.py")],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_every_mutant_applies_once_to_the_current_sources():
    """A mutant whose search text has moved would be reported STALE only when the slow run
    comes; here every search text occurs exactly once in its file."""
    sys.path.insert(0, str(ROOT / "scripts"))
    try:
        import mutants
    finally:
        sys.path.remove(str(ROOT / "scripts"))
    assert len({m.name for m in mutants.MUTANTS}) == len(mutants.MUTANTS)
    for m in mutants.MUTANTS:
        assert (ROOT / m.file).read_text().count(m.search) == 1, m.name
        assert (ROOT / m.file).read_text().count(m.replace) == 0, m.name
