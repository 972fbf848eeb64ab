"""`pimrt bench laysa`: GradSA alone, Layrub alone (dense exchange), the two naively combined,
and LaySA, side by side on the same data-parallel task (gloo ranks on this machine).

Memory (the "device" bytes a GPU would hold; same accounting for every variant, see
pimrt/laysa/ledger.py): tensors autograd keeps for backward (Layrub's accounting: distinct
storages; without Layrub, torch's own saves), parameter gradients while alive, GradSA's
residual and momentum on the device (SGD's momentum buffers for the dense Layrub run), DDP's
flat bucket buffers (one model's worth: GradSA alone, Layrub alone, naive), LaySA's per-layer
payloads and decoded update. One timeline per step, the peak of the sum is reported (rank 0,
a steady-state step). Parameters themselves (the same in every variant) are listed apart.
Measured: every variant on the one yardstick, pimrt.memory_meter.MemoryMeter, over one
window from the model's construction to the last timed step (rank 0): device memory (the
peak of live storages; parameters included) and host memory (the HostPools of Layrub and
LaySA). The ledger says where the device bytes go and is checked against the meter in
tests/test_laysa.py.

Largest batch within --budget (bytes per rank, on the meter): a batch fits when a real run on
the meter (the same window: the model's construction, a warm-up step and a timed step) stays
within the budget on every rank. The meter's peaks at --batch and twice it give a linear
prediction, which real runs verify; on a miss, bisection between the largest batch that fitted
and the smallest that did not, by real runs, to within 1/16 (at most 10 runs). Throughput:
images per second (all ranks) at that batch, from the measured step time.
"""
from __future__ import annotations

import json
import gc
import os
import statistics
import tempfile
import time
from datetime import timedelta

from pimrt.cliflags import alias

HELP = ("LaySA vs GradSA alone, Layrub alone and naive Layrub+GradSA: peak memory, step time, "
        "largest batch in a budget, throughput")
VARIANTS = ("gradsa", "layrub", "naive", "laysa")


def add_arguments(p) -> None:
    a = p.add_argument
    a("--model", default="resnet18", help="pimrt.zoo CIFAR-form model or tinycnn (default resnet18)")
    a("--input", dest="image_size", type=int, default=16, metavar="INPUT",
      help="image height and width")
    alias(p, "--image-size", "--input")
    a("--batch", type=int, default=4, help="per-rank batch for the side-by-side step (default 4)")
    a("--world", dest="nproc", type=int, default=2, metavar="RANKS",
      help="ranks (processes), as pimrt run's --world")
    alias(p, "--nproc", "--world")
    a("--steps", type=int, default=2, help="timed steps per measurement (after one warm-up step)")
    a("--density", type=float, default=0.001)
    a("--budget", default="256MB", help="device memory per rank for the largest-batch search, "
      "on the memory meter, parameters included (default 256MB)")
    a("--max-batch", type=int, default=128, help="cap of the largest-batch search")
    a("--variants", default=",".join(VARIANTS))
    a("--no-search", action="store_true", help="skip the largest-batch search")
    a("--json", dest="json_file", default=None, help="write rows and settings as JSON")


# ------------------------------------------------------------------------------------------
# one rank
# ------------------------------------------------------------------------------------------
class _GradTracker:
    """Ledger bytes of dense param.grad: added when a gradient appears, removed at zero_grad."""

    def __init__(self, params, ledger):
        self.ledger, self.held = ledger, {}
        self.hooks = [p.register_post_accumulate_grad_hook(self._hook) for p in params]

    def _hook(self, p):
        if id(p) not in self.held and p.grad is not None:
            n = p.grad.numel() * p.grad.element_size()
            self.held[id(p)] = n
            self.ledger.add("grad", n)

    def reset(self):
        for n in self.held.values():
            self.ledger.sub("grad", n)
        self.held = {}

    def close(self):
        for h in self.hooks:
            h.remove()


class _Runner:
    def __init__(self, variant, args, rank):
        import torch
        from torch import nn
        from pimrt.gradsa import GradSAState, SparseConfig, gradsa_hook
        from pimrt.laysa import LaySA, Ledger, LedgerAcct
        from pimrt.layrub import Layrub
        from pimrt.train.models import build_model

        torch.manual_seed(0)
        self.variant, self.rank = variant, rank
        self.model = build_model(args.model, 10, args.image_size, 3)
        self.param_bytes = sum(p.numel() * p.element_size() for p in self.model.parameters())
        cfg = SparseConfig(density=args.density, warmup_steps=0)
        self.laysa = self.tracker = self.layrub = None
        if variant == "laysa":
            opt_m = 0.0
            self.net = self.model
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=0.0)
            self.laysa = LaySA(self.model, config=cfg, optimizer=self.opt)
            self.ledger = self.laysa.ledger
            return
        self.ledger = Ledger()
        self.net = nn.parallel.DistributedDataParallel(self.model)
        self.state = None
        if variant in ("gradsa", "naive"):
            self.state = GradSAState(self.model, None, cfg)
            self.net.register_comm_hook(self.state, gradsa_hook)
            opt_m = 0.0
        else:
            opt_m = 0.9
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.01, momentum=opt_m)
        use = variant in ("layrub", "naive")
        self.layrub = Layrub(self.model, offload=use, reuse=use, capture_graph=False)
        self.layrub.acct = LedgerAcct(self.ledger)
        self.tracker = _GradTracker(list(self.model.parameters()), self.ledger)
        self.ledger.set("comm", self.param_bytes)          # DDP's bucket buffers

    def _persistent(self):
        if self.state is not None:
            u = sum(ps.u.numel() * ps.u.element_size() for ps in self.state.store.params.values())
            v = sum(ps.v.numel() * ps.v.element_size() for ps in self.state.store.params.values())
            self.ledger.set("momentum", u)
            self.ledger.set("residual", v)
        else:
            m = sum(s["momentum_buffer"].numel() * 4 for s in self.opt.state.values()
                    if s.get("momentum_buffer") is not None)
            self.ledger.set("momentum", m)

    def step(self, x, y):
        import torch
        F = torch.nn.functional
        self.opt.zero_grad(set_to_none=True)
        if self.tracker is not None:
            self.tracker.reset()
            self._persistent()
        self.ledger.reset_peak()
        t0 = time.perf_counter()
        ctx = self.laysa if self.laysa is not None else self.layrub
        with ctx:
            F.cross_entropy(self.net(x), y).backward()
        self.opt.step()
        dt = time.perf_counter() - t0
        return dt, self.ledger.peak, dict(self.ledger.at_peak)

    def measure(self, batch, steps, seed=0):
        import torch
        g = torch.Generator().manual_seed(seed + self.rank)
        out = []
        for i in range(steps + 1):
            x = torch.randn(batch, 3, self.args_size, self.args_size, generator=g)
            y = torch.randint(0, 10, (batch,), generator=g)
            out.append(self.step(x, y))
        timed = out[1:]
        best = max(timed, key=lambda r: r[1])
        return {"batch": batch, "step_s": statistics.median(r[0] for r in timed),
                "peak_bytes": best[1], "at_peak": best[2]}

    def close(self):
        if self.laysa is not None:
            self.laysa.close()
        if self.tracker is not None:
            self.tracker.close()


def _metered(v, args, rank, batch, steps, seed=0):
    """One variant at ``batch`` on the one yardstick: a meter window over the model's
    construction, a warm-up step and ``steps`` timed steps (rank-local figures)."""
    from pimrt.memory_meter import MemoryMeter
    with MemoryMeter("cpu") as meter:
        r = _Runner(v, args, rank)
        r.args_size = args.image_size
        row = r.measure(batch, steps, seed)
    row["param_bytes"] = r.param_bytes
    row["meter_device_bytes"] = meter.device_peak_bytes
    row["meter_host_bytes"] = meter.host_peak_bytes
    r.close()
    return row


def _largest_batch(v, args, rank, world, budget, a, b):
    """The largest batch whose real run stays within ``budget`` device bytes on the meter on
    every rank: predicted from the meter's peaks at --batch (``a``) and twice it (``b``),
    then verified and bisected by real runs."""
    import torch
    import torch.distributed as dist
    per = max(1.0, (b["meter_device_bytes"] - a["meter_device_bytes"]) / args.batch)
    fixed = a["meter_device_bytes"] - per * args.batch
    guess = max(1, min(args.max_batch, int((budget - fixed) // per)))
    t = torch.tensor([guess], dtype=torch.int64)
    dist.all_reduce(t, op=dist.ReduceOp.MIN)      # the same batch on every rank
    bt, lo, hi, found, runs = int(t), 0, None, None, []
    for _ in range(10):     # up by 1/16 from a fit, bisection once a batch has missed
        m = _metered(v, args, rank, bt, 1, seed=7)
        ok = torch.tensor([int(m["meter_device_bytes"] <= budget)])
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
        runs.append([bt, m["meter_device_bytes"], bool(int(ok))])
        if int(ok):
            found, lo = m, bt
        else:
            hi = bt
        if hi is None:
            if lo >= args.max_batch:
                break
            bt = min(args.max_batch, lo + max(1, lo // 16))
        elif hi - lo <= max(1, lo // 16):
            break
        else:
            bt = (lo + hi) // 2
    return {"max_batch": found["batch"] if found else 0,
            "max_batch_step_s": found["step_s"] if found else None,
            "max_batch_device_bytes": found["meter_device_bytes"] if found else None,
            "max_batch_ledger_bytes": found["peak_bytes"] if found else None,
            "search_runs": runs,          # [batch, meter device bytes, fitted on every rank]
            "search_bracketed": lo >= args.max_batch or (hi is not None
                                                         and hi - lo <= max(1, lo // 16)),
            "throughput": (world * found["batch"] / found["step_s"]) if found else 0.0}


def _worker(rank, world, init_file, args, out_file):
    import torch
    import torch.distributed as dist
    from pimrt.layrub.errors import parse_bytes
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world,
                            timeout=timedelta(seconds=600))
    variants = [v for v in args.variants.split(",") if v]
    rows = {}
    for v in variants:
        rows[v] = _metered(v, args, rank, args.batch, args.steps)
        if not args.no_search:
            rows[v]["b2"] = _metered(v, args, rank, 2 * args.batch, 1)
    budget = None
    if not args.no_search:
        budget = parse_bytes(args.budget)
        for v in variants:
            rows[v].update(_largest_batch(v, args, rank, world, budget, rows[v], rows[v].pop("b2")))
    if rank == 0:
        with open(out_file, "w") as f:
            json.dump({"rows": rows, "budget": budget}, f)
    dist.barrier()
    gc.collect()    # DDP holds the process group in reference cycles (pimrt.train.loop.main)
    dist.destroy_process_group()
    from pimrt.train.distenv import leave
    leave(0)        # without the interpreter's teardown (pimrt.train.distenv.leave)


# ------------------------------------------------------------------------------------------
def _mib(n):
    return f"{n / 2**20:.2f}" if n is not None else "-"


def run(args) -> int:
    import torch.multiprocessing as mp
    from pimrt.errors import PimrtError
    from pimrt.layrub.errors import parse_bytes

    bad = [v for v in args.variants.split(",") if v and v not in VARIANTS]
    if bad:
        raise PimrtError(f"unknown variant {bad[0]!r}; valid: {', '.join(VARIANTS)}")
    if args.batch < 1 or args.nproc < 1 or args.steps < 1:
        raise PimrtError("--batch, --world and --steps must be >= 1")
    try:
        parse_bytes(args.budget)
    except PimrtError as exc:
        raise PimrtError(f"--budget: {exc}") from None
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        out = os.path.join(d, "rows.json")
        mp.spawn(_worker, args=(args.nproc, os.path.join(d, "init"), args, out), nprocs=args.nproc,
                 join=True)
        with open(out) as f:
            res = json.load(f)
    rows, budget = res["rows"], res["budget"]
    base = rows.get("gradsa")
    print(f"{args.model} at {args.image_size}x{args.image_size}, {args.nproc} ranks (gloo, CPU), "
          f"batch {args.batch} per rank, density {args.density}; parameters "
          f"{_mib(next(iter(rows.values()))['param_bytes'])} MiB (in the meter's device column, apart in the ledger)")
    print("device/host MiB: the memory meter (pimrt.memory_meter) over the model's construction and "
          "the steps, parameters included; ledger: where the device bytes go (parameters apart)")
    hdr = (f"{'variant':8} {'device':>8} {'vs GradSA':>9} {'host':>7} {'ledger':>8} {'saved':>8} {'grad':>7} "
           f"{'res+mom':>8} {'comm':>7} {'upd':>6} {'step s':>7}")
    if budget is not None:
        hdr += f" {'max batch':>9} {'img/s':>7} {'vs GradSA':>9}"
    print(hdr)
    for v, r in rows.items():
        a = r["at_peak"]
        dev = r["meter_device_bytes"]
        line = (f"{v:8} {_mib(dev):>8} "
                f"{(100 * (dev / base['meter_device_bytes'] - 1) if base else 0):>+8.1f}% "
                f"{_mib(r['meter_host_bytes']):>7} {_mib(r['peak_bytes']):>8} {_mib(a['saved']):>8} "
                f"{_mib(a['grad']):>7} {_mib(a['residual'] + a['momentum']):>8} {_mib(a['comm']):>7} "
                f"{_mib(a['update']):>6} {r['step_s']:>7.3f}")
        if budget is not None:
            gain = (f"{100 * (r['throughput'] / base['throughput'] - 1):>+8.1f}%"
                    if base and base["throughput"] else f"{'-':>9}")   # GradSA fits no batch
            mb = (">=" if r["max_batch"] >= args.max_batch or not r["search_bracketed"] else "") \
                + str(r["max_batch"])
            line += f" {mb:>9} {r['throughput']:>7.1f} {gain}"
        print(line)
    if budget is not None:
        print(f"budget {_mib(budget)} MiB per rank ({args.budget}) on the meter; largest batch "
              f"by real runs, searched up to {args.max_batch} (>=: the cap or the runs ran out, "
              f"the real limit is higher)")
    print(f"({time.perf_counter() - t0:.0f} s)")
    if args.json_file:
        with open(args.json_file, "w") as f:
            json.dump({"settings": {k: v for k, v in vars(args).items() if k != "func"},
                       "budget": budget, "rows": rows}, f, indent=2)
    return 0
