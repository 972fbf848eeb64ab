"""`pimrt host-times`: time a model's host kernels on this machine's CUDA GPU and write them
to a file that `pimrt run` / `pimrt compare --host-times FILE` replay on any machine. It
simulates nothing, so it needs neither the memctl extension nor a long run on the GPU
machine."""
from __future__ import annotations

import pathlib

from pimrt import cliflags


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "host-times", help="time a model's CONV/linear kernels on the GPU, for --host-times",
        description="Time every CONV/linear kernel (forward, dX, dW, per output-channel group) "
                    "that `pimrt run` with the same settings needs on this machine's CUDA GPU, "
                    "and write them as JSON; `pimrt run --host-times FILE` replays them "
                    "anywhere; under --precision amp-fp16 / amp-bf16 each kernel runs in "
                    "float16 / bfloat16, as autocast runs it. docs/runtime.md")
    p.add_argument("--model", default="resnet18",
                   help="zoo model or FILE.py:NAME / module:NAME (as pimrt run)")
    p.add_argument("--allow-unsupported", action="store_true",
                   help="as pimrt run (the ops run on the host, not timed here)")
    p.add_argument("--batch", type=int, default=32, help="batch size (images per step)")
    p.add_argument("--input", type=int, default=32, help="input height and width")
    p.add_argument("--groups", type=int, default=1,  # pimrt.runtime.timing.DEFAULT_GROUPS
                   help="most output-channel groups per CONV, as the runs to replay use")
    p.add_argument("--slices", type=int, default=None,
                   help="batch slices of the forward pass, as the runs to replay use "
                        "(default as pimrt run)")
    p.add_argument("--part", default=None, help=cliflags.PART_HELP)
    cliflags.precision(p)        # --precision and --host-part, as the runs to replay take them
    p.add_argument("--update", default="sgd", choices=("sgd", "gradsa", "laysa"))
    p.add_argument("--out", type=pathlib.Path, default=pathlib.Path("results/host_times.json"),
                   help="the JSON file to write")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args) -> int:
    from pimrt.runtime import session
    from pimrt.runtime.host_times import require_cuda
    args.host_part, args.part = session.system_for(args.precision, args.host_part, args.part)
    require_cuda(what="pimrt host-times", precision_name=args.precision)
    graph = session.captured(args.model, args.batch, args.input, args.allow_unsupported,
                             args.precision)
    slices = session.slices_for(args.batch, args.slices)
    session.preflight(graph, args.part, args.groups, args.update, args.host_part, slices)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    _, info = session.host_times(graph, "measure", args.groups, args.part, args.host_part,
                                 args.update, True, save_to=args.out, quiet=args.quiet,
                                 meta={"input": args.input}, slices=slices)
    again = "" if args.precision == "fp32" else f" --precision {args.precision}"
    print(f"{args.model} batch {args.batch} {args.input}x{args.input}: {info['kernels']} "
          f"CONV/linear kernels timed in {args.precision} on {info['device']}, written to "
          f"{info['path']}; replay with pimrt run{again} --host-times {info['path']}")
    return 0
