"""The authority policy's rules by name, and what each knows when it sets a host task's
parameters (pimrt.runtime.authority computes them; pimrt.runtime.timing.time_step picks one).
Kept apart, with no imports, so the command line can list them without loading the runtime.

- "slack", the default, is profile-guided: each host task's slack in a list schedule of the
  task durations measured on an earlier step (the step under the per-layer rule, as a
  controller would profile the first steps of a training run);
- "slack-oracle" plans on each task's exact duration alone, which no controller knows
  before the step: the oracle's figure;
- "layer" is the per-layer rule from each host layer's traits (the default until 2026-12-04).
"""
AUTHORITY_RULES = ("slack", "slack-oracle", "layer")
DEFAULT_AUTHORITY_RULE = "slack"
AUTHORITY_RULE_TEXT = {
    "slack": "slack, profile-guided (task durations measured on an earlier step under the "
             "per-layer rule; of the two steps measured, the shorter's parameters kept)",
    "slack-oracle": "slack, oracle (each task's exact duration alone, known before the step)",
    "layer": "per layer (each host layer's requests over its compute)"}
