import os

# Hypothesis: deterministic, bounded runs in CI.
from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "ci", max_examples=40, deadline=None, derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=100, deadline=None)
# scripts/mutants.py: the ci examples, a failing one reported as found (no shrinking)
settings.register_profile("mutants", parent=settings.get_profile("ci"),
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
