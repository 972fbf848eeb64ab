"""Extreme depth: train a 1,000+ layer CIFAR ResNet for a few steps on CPU inside a
feature-map memory budget that the baseline exceeds.

    .venv/bin/python -m pimrt.layrub.deep --depth 1202 --batch 16 --budget 512MB --steps 3

The budget is enforced on the device bytes autograd holds for backward (Layrub's
accounting; on a GPU this is device memory). The baseline (no Layrub) is checked by a dry run
on the meta device and refused before training; ``--run-baseline`` also runs it, under the
same enforcement, until it fails.
"""
from __future__ import annotations

import argparse
import sys
import time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pimrt.layrub.deep", description=__doc__.split(
        "\n")[0])
    ap.add_argument("--depth", type=int, default=1202, help="ResNet depth (6n+2 or 9n+2)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--budget", default="512MB", help="device feature-map budget")
    ap.add_argument("--host-budget", default=None, help="host memory budget for offloaded maps")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--run-baseline", action="store_true",
                    help="also run the baseline step (fails when it exceeds the budget)")
    args = ap.parse_args(argv)

    import torch
    from torch import nn

    from pimrt import zoo
    from pimrt.errors import PimrtError
    from pimrt.layrub import Layrub, LayrubBudgetError, fmt_bytes, parse_bytes, plan
    from pimrt.layrub.memory import PeakMemory, tune_malloc

    try:
        tune_malloc()
        budget = parse_bytes(args.budget)
        torch.manual_seed(0)
        model = zoo.resnet_cifar(args.depth)
        shape = (args.batch, 3, 32, 32)
        t = time.perf_counter()
        lr = Layrub(model, input_shape=shape, device_budget=budget, host_budget=args.host_budget)
        g = lr.graph
        convs = g.kind_counts().get("conv", 0) + g.kind_counts().get("linear", 0)
        print(f"ResNet-{args.depth}: {len(g)} graph layers ({convs} conv/linear), "
              f"{sum(p.numel() for p in model.parameters()):,} parameters; input {shape}; "
              f"analysed in {time.perf_counter() - t:.1f} s")
        p = plan(g)
        print(f"planner: baseline peak {fmt_bytes(p.baseline_peak_bytes)}, Layrub "
              f"{fmt_bytes(p.peak_bytes)} (-{100 * p.reduction:.1f}%), host "
              f"{fmt_bytes(p.host_peak_bytes)}")
        print(f"budget for feature maps held for backward: {fmt_bytes(budget)}")
        try:
            Layrub(model, input_shape=shape, offload=False, reuse=False, device_budget=budget,
                   capture_graph=False)
            print("baseline: fits the budget (choose a larger depth or batch, or a smaller "
                  "budget)")
        except LayrubBudgetError as exc:
            print(f"baseline: refused before training: {exc}")
        if args.run_baseline:
            m = Layrub(model, offload=False, reuse=False, device_budget=budget,
                       capture_graph=False)
            x = torch.randn(shape)
            y = torch.randint(0, 10, (args.batch,))
            try:
                with m:
                    nn.functional.cross_entropy(model(x), y).backward()
                print(f"baseline step: ran, held {fmt_bytes(m.stats.saved_peak_bytes)}")
            except LayrubBudgetError as exc:
                print(f"baseline step: failed during forward: {exc}")
            model.zero_grad(set_to_none=True)
        print(f"Layrub: estimate {fmt_bytes(lr.estimate['device_bytes'])} on the device, "
              f"{fmt_bytes(lr.estimate['host_bytes'])} host pool")
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
        for step in range(args.steps):
            x = torch.randn(shape)
            y = torch.randint(0, 10, (args.batch,))
            t = time.perf_counter()
            with PeakMemory("cpu") as mem:
                loss = lr.train_step(opt, nn.functional.cross_entropy, x, y)
            s = lr.stats
            print(f"step {step + 1}: loss {loss.item():.4f}, {time.perf_counter() - t:.1f} s; "
                  f"held for backward peak {fmt_bytes(s.saved_peak_bytes)} (budget "
                  f"{fmt_bytes(budget)}), host pool peak {fmt_bytes(s.host_peak_bytes)}, "
                  f"offloaded {fmt_bytes(s.offloaded_bytes)}, process peak RSS +"
                  f"{fmt_bytes(mem.peak)}", flush=True)
        return 0
    except PimrtError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
