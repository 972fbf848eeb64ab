"""`pimrt run`: one training step of a CNN, CONV on the host and non-CONV on the PIM, timed
through memctl under a sharing policy against the serial baseline."""
from __future__ import annotations

import pathlib
import sys

from pimrt import cliflags


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "run", help="co-execute and time one training step of a CNN",
        description="Split a CNN's training step between host (CONV/linear) and PIM (batch "
                    "norm, ReLU, add, pooling, SGD), pipeline it by output-channel groups, time "
                    "it through memctl and compare with serial host+PIM execution.")
    p.add_argument("--model", default="resnet18",
                   help="zoo model (pimrt.zoo.list_models()), or your own nn.Module as "
                        "FILE.py:NAME or module:NAME (a class or function that builds it with "
                        "no arguments)")
    p.add_argument("--allow-unsupported", action="store_true",
                   help="run ops pimrt does not capture on the host, with a warning naming "
                        "each, instead of refusing the model")
    p.add_argument("--batch", type=int, default=32, help="batch size (images per step)")
    p.add_argument("--input", type=int, default=32, help="input height and width (32 or 224)")
    p.add_argument("--policy", default="authority", help="serial, bank_partition, authority")
    p.add_argument("--groups", type=int, default=1,  # pimrt.runtime.timing.DEFAULT_GROUPS
                   help="most output-channel groups per CONV (default 1: each CONV runs whole and "
                        "the forward pass is pipelined by batch slices, the shorter step on "
                        "the default system; above 1 each CONV gets as many as its arithmetic "
                        "intensity covers: docs/runtime.md)")
    p.add_argument("--slices", type=int, default=None,
                   help="batch slices of the forward pass: a CONV whose weights are small "
                        "beside its feature maps runs slice by slice and the PIM follows slice "
                        "by slice (default: the largest divisor of the batch up to 4; 1: by "
                        "output-channel groups only; docs/runtime.md)")
    p.add_argument("--part", default=None, help=cliflags.PART_HELP)
    cliflags.precision(p)
    p.add_argument("--functional", default="golden",
                   help="run the step for real with the PIM ops on this backend first: golden, "
                        "rtl, torch, or none")
    p.add_argument("--layrub", action="store_true",
                   help="Layrub manages the feature maps: its offload and prefetch traffic goes "
                        "through memctl (both the run and the serial baseline)")
    p.add_argument("--update", default="sgd", choices=("sgd", "gradsa", "laysa"),
                   help="the parameter update: plain SGD on the PIM; GradSA's sparse exchange "
                        "(u, v resident, update after backward); LaySA (u, v fetched from host "
                        "memory per layer, mirror update in backward). docs/laysa.md")
    p.add_argument("--world", type=int, default=4, help="ranks of the sparse exchange")
    p.add_argument("--density", type=float, default=0.001,
                   help="fraction of each layer's gradient sent (gradsa, laysa)")
    p.add_argument("--link-gbps", type=float, default=10.0,
                   help="per-rank link bandwidth of the exchange, Gbit/s")
    p.add_argument("--no-plan", action="store_true",
                   help="keep every weight gradient right after its dX (by default a "
                        "pipelined SGD or GradSA step moves some to where the host would wait "
                        "for the PIM: docs/runtime.md)")
    cliflags.authority_rule(p)
    p.add_argument("--host-times", default="model", metavar="model|measure|FILE",
                   help="the host's CONV/linear compute: the host part's model ('model'); "
                        "'measure': the real kernels timed on this machine's CUDA GPU (written "
                        "to OUT/host_times.json); or such a file (or the --out folder that has "
                        "it) to replay times measured elsewhere. docs/runtime.md")
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results"),
                   help="folder of the results (summary.json, layers.csv, trace.json, plots)")
    p.add_argument("--save-trace", type=pathlib.Path, default=None, metavar="FILE",
                   help="write the step's memctl stream (host and PIM requests, markers, "
                        "parameters) under --policy to FILE as it runs, with its sidecar "
                        "FILE.layers.json; with --format dramsim3 or ramulator the GPU-only "
                        "step's host requests at their arrival cycles (default: none; "
                        "docs/traces.md)")
    p.add_argument("--format", default="npy", choices=TRACE_FORMATS,
                   help="format of --save-trace: npy (pimrt's binary, replayed by pimrt "
                        "memsim), dramsim3 or ramulator (Ramulator 2 load/store)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


TRACE_FORMATS = ("npy", "dramsim3", "ramulator")


def trace_sinks(args, meta: dict) -> tuple:
    """(sink of the policy's run, sink of the GPU-only run) for --save-trace."""
    if args.save_trace is None:
        return None, None
    if args.format == "npy":
        from pimrt.trace.step import StepTrace
        keys = ("model", "batch", "input", "host_part", "precision", "slices")
        return StepTrace(args.save_trace, {**{k: meta[k] for k in keys},
                                           "step": args.policy}), None
    from pimrt.trace.host_export import HostTrace
    return None, HostTrace(args.save_trace, args.format)


def amp_functional_lines(f: dict) -> None:
    """What `pimrt run` prints of an AMP functional step (pimrt.runtime.functional_amp)."""
    scale = f" at loss scale {f['loss_scale']:g} ({f['steps_skipped_first']} first steps " \
        f"skipped by torch's scaler)" if f["loss_scale"] else ""
    print(f"functional step ({f['backend']} backend, {f['precision']}{scale}): max |loss diff| "
          f"{f['loss_abs_diff']:.3g}; ReLU decisions: {f['relu_mask_flips']} differ from "
          f"torch's AMP step's, {f['pim_vs_fp32_flips']} from fp32's (torch's AMP step: "
          f"{f['torch_amp_vs_fp32_flips']}); with the PIM's decisions gradients "
          f"within {f['max_grad_rel_diff_same_masks']:.3g} of torch's AMP step; "
          f"{len(f['judged_by_fp32'])} of them beyond {f['tolerance']:g}, judged against "
          f"torch's fp32 step; inf/NaN check {'skips' if f['found_inf'] else 'passes'} as "
          f"torch's {'does' if f['found_inf'] == f['found_inf_ref'] else 'does NOT'}; 16-bit "
          f"weight copies {'equal' if f['weight_copies_equal_torch_cast'] else 'DIFFER from'} "
          f"torch's cast; groups agree: {f['groups_equal']}  ({f['wall_s']:.1f} s)")
    u = f.get("update_check")
    if u:
        update_line(u)
    if not (f["grads_within_tolerance"] and f["groups_equal"]
            and f["found_inf"] == f["found_inf_ref"] and f["weight_copies_equal_torch_cast"]
            and update_within(u)):
        print("warning: the PIM's AMP step is outside the documented tolerance "
              "(docs/precision.md)", file=sys.stderr)


#: a GradSA / LaySA update on the PIM against pimrt.gradsa in torch on the same gradients:
#: parameters and residuals within the ulp torch's fused add-with-alpha differs by
UPDATE_TOLERANCE = 1e-6


def update_line(u: dict) -> None:
    print(f"  {u['update']} update on the PIM vs pimrt.gradsa in torch on the same "
          f"gradients: parameters within {u['max_param_rel_diff']:.3g}, residuals within "
          f"{u['max_residual_rel_diff']:.3g} ({u['kept_elements']} elements kept at "
          f"density {u['density']:.3g})")


def update_within(u: dict | None) -> bool:
    return not u or (u["max_param_rel_diff"] <= UPDATE_TOLERANCE
                     and u["max_residual_rel_diff"] <= UPDATE_TOLERANCE)


def fp32_functional_lines(f: dict, backend: str) -> None:
    """What `pimrt run` prints of an fp32 functional step (pimrt.runtime.functional)."""
    print(f"functional step ({backend} backend): max |loss diff| "
          f"{f['loss_abs_diff']:.3g}, max grad rel. diff {f['max_grad_rel_diff']:.3g}, "
          f"groups agree: {f['groups_equal']}  ({f['wall_s']:.1f} s, torch step "
          f"{f['torch_wall_s']:.2f} s)")
    flips = f.get("relu_mask_flips", 0)
    grad = f.get("max_grad_rel_diff_same_masks", f["max_grad_rel_diff"])
    if flips:
        hard = f.get("relu_mask_hard_flips", 0)
        print(f"  {flips} ReLU / ReLU6 decision(s) differ from torch's ({flips - hard} at "
              f"activations within rounding of the threshold, {hard} farther); with the "
              f"PIM's decisions torch's gradients agree to {grad:.3g}")
    u = f.get("update_check")
    if u:
        update_line(u)
    judged = f.get("judged_by_float64") or {}
    if judged:
        worst = max(j["pim_vs_float64"] / max(j["torch_vs_float64"], 1e-300)
                    for j in judged.values())
        print(f"  {len(judged)} gradient(s) differ from torch's float32 step by more than "
              f"1e-4; against a float64 step the PIM's error in them is at most "
              f"{worst:.2g}x torch's own")
    if f["loss_abs_diff"] > 1e-5 or not f.get("grads_within_tolerance", grad <= 1e-4) or \
            not f["groups_equal"] or \
            not update_within(u):
        print("warning: the PIM step is outside the documented tolerance (loss 1e-5, "
              "gradients 1e-4 relative with the same ReLU masks or, where torch's float32 "
              "gradient is rounding noise, within 4x its distance from float64; a GradSA "
              "update 1e-6; "
              "docs/runtime.md)",
              file=sys.stderr)


def run(args) -> int:
    from pimrt.memctl import POLICIES
    from pimrt.errors import ConfigError
    from pimrt.runtime import report, session

    from pimrt.runtime.exchange import ExchangeConfig

    if args.policy not in POLICIES:
        raise ConfigError(f"unknown policy {args.policy!r}; choose one of {', '.join(POLICIES)}")
    from pimrt.output import check_out_dir, lock_out_dir
    check_out_dir(args.out, create=False)    # before any work; created and locked below
    if args.save_trace is not None:
        from pimrt.output import check_out_file
        check_out_file(args.save_trace, "--save-trace")
    exchange = ExchangeConfig(args.update, args.world, args.density, args.link_gbps)
    args.host_part, args.part = session.system_for(args.precision, args.host_part, args.part)
    from pimrt.runtime.functional_amp import check_options
    check_options(args.functional, exchange.mode, args.precision)
    graph = session.captured(args.model, args.batch, args.input, args.allow_unsupported,
                             args.precision)
    from pimrt.runtime.schedule import host_fallback_note
    note = host_fallback_note(graph)      # layers one might expect on the PIM: said once
    if note:
        print(note)
    slices = session.slices_for(args.batch, args.slices)
    session.preflight(graph, args.part, args.groups, exchange.mode, args.host_part, slices)
    pipelined = args.policy != "serial"
    if args.host_times == "measure":
        from pimrt.runtime.host_times import require_cuda
        require_cuda(precision_name=args.precision)
    else:                                    # the model, or a file checked before long work
        times, host_info = session.host_times(graph, args.host_times, args.groups, args.part,
                                              args.host_part, exchange.mode, pipelined,
                                              slices=slices)
    out = args.out
    lock_out_dir(check_out_dir(out))         # one run at a time in it (released at exit)
    if args.host_times == "measure":
        times, host_info = session.host_times(
            graph, "measure", args.groups, args.part, args.host_part, exchange.mode, pipelined,
            save_to=out / "host_times.json", quiet=args.quiet, meta={"input": args.input},
            slices=slices)
    meta = {"model": args.model, "batch": args.batch, "input": args.input, "slices": slices,
            "part": args.part, "host_part": args.host_part, "precision": args.precision,
            "host_times": host_info,
            "system": session.system(args.part, args.host_part)}
    if times is not None:
        h = host_info
        where = f"measured on {h['device']}, written to {h['path']}" \
            if h["source"] == "measured" else f"from {h['path']} (measured on " \
            f"{h.get('device', 'a device the file does not name')})"
        print(f"host compute: {h['kernels']} CONV/linear kernels {where}")
    if args.functional != "none":
        from pimrt.runtime.functional_amp import check
        f = check(args.model, args.batch, args.input, args.functional, args.groups,
                  update=exchange.mode, density=exchange.density, slices=slices,
                  precision=args.precision)
        meta["functional"] = f
        if args.precision != "fp32":
            amp_functional_lines(f)
        else:
            fp32_functional_lines(f, args.functional)
    meta["layrub"] = args.layrub
    sink, gpu_sink = trace_sinks(args, meta)
    serial = session.timed(graph, "serial", 1, args.part, args.host_part, args.quiet, "serial",
                           args.layrub, exchange, host_times=times,
                           sink=sink if args.policy == "serial" else None)
    run = serial if args.policy == "serial" else session.timed(
        graph, args.policy, args.groups, args.part, args.host_part, args.quiet, args.policy,
        args.layrub, exchange, plan=not args.no_plan, host_times=times, slices=slices,
        authority_rule=args.authority_rule, sink=sink)
    gpu, bound = session.baselines(graph, args.groups, args.part, args.host_part, args.quiet,
                                   "", args.layrub, exchange, not args.no_plan, times, slices,
                                   gpu_sink)
    s = report.write_all(run, serial, meta, out, gpu, bound)
    sy = meta["system"]
    m = sy["memory"]
    print(f"system: {m['name']} ({m['channels']} channels, {m['peak_gbs']:.0f} GB/s, "
          f"{m['pim_units']} PIM units of {m['pim_lanes']} lanes at {m['pim_clock_mhz']:.0f} "
          f"MHz) + {sy['host']['name']} ({sy['host']['peak_tflops']:g} TFLOP/s)")
    print(f"{args.model} batch {args.batch} {args.input}x{args.input}: {args.policy} "
          f"{s['step_ms']:.3f} ms; GPU-only {s['gpu_only_step_ms']:.3f} ms -> "
          f"{s['speedup_vs_gpu_only']:.3f}x; serial host+PIM {s['serial_step_ms']:.3f} ms -> "
          f"{s['speedup_vs_serial']:.3f}x; {s['mode_switches']} mode switches, simulated in "
          f"{s['simulation_wall_s']:.1f} s")
    if "layer_rule_step_ms" in s:
        if s["authority_rule_kept"] == "layer":
            print(f"  authority rule: {s['authority_rule_knows']}; kept the per-layer rule's "
                  f"step (the slack rule's {s['slack_rule_step_ms']:.3f} ms, "
                  f"{s['slack_rule_step_ms'] / s['step_ms']:.3f}x as long)")
        else:
            print(f"  authority rule: {s['authority_rule_knows']}; the per-layer rule's step "
                  f"{s['layer_rule_step_ms']:.3f} ms ({s['speedup_vs_layer_rule']:.3f}x)")
    elif s["authority_rule"]:
        print(f"  authority rule: {s['authority_rule_knows']}")
    print(f"  contention-free bound {s['bound_step_ms']:.3f} ms (step / bound "
          f"{s['step_vs_bound']:.3f}), lower bound max(host alone, PIM alone) "
          f"{s['lower_bound_step_ms']:.3f} ms")
    from pimrt.runtime import energy
    print("  " + energy.line(s))
    if s["sliced_layers"]:
        convs = sum(1 for n in graph.nodes if n.kind in ("conv", "linear"))
        others = "whole in the others" if args.groups == 1 else \
            "by output-channel groups (where the group rule splits them) in the others"
        print(f"  forward by {slices} batch slices in {len(s['sliced_layers'])} of {convs} "
              f"CONV/linear layers, {others}")
    ph = s["phases"]
    print("  of which " + ", ".join(
        f"{name} {ph[k]['ms']:.3f} vs {ph[k]['serial_ms']:.3f} ms ({ph[k]['speedup']:.3f}x)"
        for k, name in (("fwd", "forward"), ("bwd", "backward"), ("update", "update"))))
    mem = s["update_memory"]
    split = ", ".join(f"{k} {v / 2**20:.1f}" for k, v in mem["at_peak"].items() if v)
    print(f"update {args.update}: peak DRAM for parameters, gradients and optimizer/exchange "
          f"state {mem['peak_bytes'] / 2**20:.1f} MiB ({split} MiB)")
    print(f"wrote {out / 'summary.json'}, {out / 'layers.csv'}, {out / 'trace.json'} (Perfetto), "
          + ", ".join(s["plots"]))
    if args.save_trace is not None:
        what = f"the {args.policy} step's memctl stream" if sink else \
            f"the GPU-only step's {gpu_sink.count:,} host requests"
        print(f"wrote {what} to {args.save_trace}"
              + (f" ({sink.meta['records']:,} records; replay: pimrt memsim "
                 f"{args.save_trace})" if sink else f" ({args.format} format)"))
    return 0
