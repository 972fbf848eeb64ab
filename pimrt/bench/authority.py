"""The authority policy's parameter rules (by slack: profile-guided, the default, and the
oracle's; per layer) against fixed parameters and against an exhaustive search over a grid,
on small training steps, side by side in one run."""
from __future__ import annotations

import itertools
import json
import pathlib

HELP = ("authority parameters: the slack (profile-guided and oracle) and per-layer rules vs "
        "fixed defaults vs an "
        "exhaustive grid search (epoch cap x host high watermark) on small CNN training steps")


def add_arguments(p) -> None:
    p.add_argument("--models", default="resnet_cifar_20,resnet18",
                   help="zoo models (32x32 inputs)")
    p.add_argument("--batch", type=int, default=4, help="batch size")
    p.add_argument("--groups", type=int, default=1)  # timing.DEFAULT_GROUPS
    p.add_argument("--caps", default="100,400,1600,4000")
    p.add_argument("--hwms", default="1,4,16,32,64,128")
    p.add_argument("--json", type=pathlib.Path, default=None)


def run(args) -> int:
    from pimrt.graph import capture
    from pimrt import zoo
    from pimrt.runtime.timing import time_step

    caps = [int(c) for c in args.caps.split(",")]
    hwms = [int(h) for h in args.hwms.split(",")]
    rows = []
    print(f"{'model':<18}{'serial':>12}{'fixed':>12}{'layer rule':>12}{'slack rule':>12}"
          f"{'oracle':>12}{'grid best':>12}{'(cap, hwm)':>14}{'slack/best':>11}"
          f"{'grid runs':>10}")
    for m in args.models.split(","):
        g = capture(zoo.build(m, input_size=32, device="meta"), (args.batch, 3, 32, 32))
        serial = time_step(g, "serial").makespan
        fixed = time_step(g, "authority", args.groups, rule=False).makespan
        layer = time_step(g, "authority", args.groups, rule=True,
                          authority_rule="layer").makespan
        rule = time_step(g, "authority", args.groups, rule=True,
                         authority_rule="slack").makespan
        oracle = time_step(g, "authority", args.groups, rule=True,
                           authority_rule="slack-oracle").makespan
        grid = {}
        for cap, hwm in itertools.product(caps, hwms):
            grid[(cap, hwm)] = time_step(g, "authority", args.groups, rule=False,
                                         options={"epoch_cap": cap, "host_high_watermark": hwm,
                                                  "min_epoch": 0}).makespan
        best = min(grid, key=grid.get)
        row = {"model": m, "batch": args.batch, "serial": serial, "fixed": fixed, "rule": rule,
               "layer_rule": layer, "speedup_layer_rule": serial / layer,
               "slack_oracle": oracle, "speedup_slack_oracle": serial / oracle,
               "grid_best": grid[best], "grid_best_params": list(best),
               "grid": {f"{c},{h}": v for (c, h), v in grid.items()},
               "speedup_rule": serial / rule, "speedup_fixed": serial / fixed,
               "speedup_grid_best": serial / grid[best]}
        rows.append(row)
        print(f"{m:<18}{serial:>12,}{fixed:>12,}{layer:>12,}{rule:>12,}{oracle:>12,}"
              f"{grid[best]:>12,}"
              f"{str(best):>14}{rule / grid[best]:>11.3f}{len(grid):>10}", flush=True)
    for r in rows:
        print(f"{r['model']}: speedup over serial: fixed {r['speedup_fixed']:.3f}x, layer rule "
              f"{r['speedup_layer_rule']:.3f}x, slack rule {r['speedup_rule']:.3f}x (oracle "
              f"{r['speedup_slack_oracle']:.3f}x), grid best "
              f"{r['speedup_grid_best']:.3f}x (cycles)")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))
    return 0
