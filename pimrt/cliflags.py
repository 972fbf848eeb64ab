"""What the options of every command share: one spelling per concept (`CONCEPTS`; an old
spelling still parses as a hidden alias, `alias`) and help that shows each option's default
(`show_defaults`, run over every parser by pimrt.cli and by `python -m pimrt.train`)."""
from __future__ import annotations

import argparse
import re

#: concept -> (the spellings help lists, old spellings that parse but help does not list)
CONCEPTS = {
    "input": (("--input",), ("--inputs", "--input-size", "--image-size")),
    "batch": (("--batch",), ("--batch-size",)),
    "model": (("--model", "--models"), ()),
    # ranks of a data-parallel exchange: modelled (pimrt run) or launched (bench gradsa, laysa)
    "world": (("--world",), ("--nproc",)),
}


def alias(parser: argparse.ArgumentParser, old: str, new: str) -> None:
    """Accept `old` as a spelling of the option `new` (same destination, type and choices)
    that neither help nor usage lists."""
    act = parser._option_string_actions[new]
    kw = {"dest": act.dest, "default": argparse.SUPPRESS, "help": argparse.SUPPRESS}
    if type(act) is argparse._StoreAction:
        kw.update(type=act.type, choices=act.choices, nargs=act.nargs, metavar=act.metavar)
    elif type(act) is argparse._StoreTrueAction:
        kw["action"] = "store_true"
    else:
        raise TypeError(f"alias {old} of {new}: a {type(act).__name__} is not aliased")
    parser.add_argument(old, **kw)


def shown_default(action: argparse.Action) -> bool:
    """Whether help should show this option's default: it has one worth saying (not None,
    not a flag's False, not an empty list)."""
    d = action.default
    return bool(action.option_strings) and action.help is not argparse.SUPPRESS \
        and d is not None and d is not False and d is not argparse.SUPPRESS and d != []


def says_default(text: str, default) -> bool:
    """Whether a help text states this default ("default 4", "(default: results)")."""
    return re.search(r"default:? " + re.escape(str(default)) + r"(?!\w|\.\d)", text) is not None


def show_defaults(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Append "(default: X)" to the help of each option of `parser` and of its sub-commands
    that has a default and whose help does not already state it."""
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            for sub in dict.fromkeys(a.choices.values()):
                show_defaults(sub)
        elif shown_default(a) and "%(default)" not in (a.help or "") \
                and not says_default(a.help or "", a.default):
            a.help = f"{a.help} (default: %(default)s)" if a.help else "default: %(default)s"
    return parser


def authority_rule(parser: argparse.ArgumentParser) -> None:
    """--authority-rule, as `pimrt run`, `compare` and a sweep's axis take it."""
    from pimrt.runtime.authority_rules import AUTHORITY_RULES, DEFAULT_AUTHORITY_RULE
    parser.add_argument(
        "--authority-rule", default=DEFAULT_AUTHORITY_RULE, choices=AUTHORITY_RULES,
        help="how the authority policy sets its epochs per host CONV: 'slack' is "
             "profile-guided (the host holds the channel where the step waits for it, yields "
             "where it has slack, judged on the task durations measured on an earlier step: "
             "the per-layer rule's, whose step is reported beside); 'slack-oracle' judges on "
             "each task's exact duration alone, which no controller knows in advance; "
             "'layer' from each host layer's traits alone. docs/runtime.md")


#: --part's help, as `pimrt run`, `compare` and `host-times` take it
PART_HELP = ("memory part (name or TOML file); default: the host part's GPU's own memory with "
             "PIM units, v100_hbm2_pim (the V100's four HBM2 stacks) for v100 and v100_tc, "
             "a100_hbm2_pim (the A100's five) for a100 and a100_tc. docs/runtime.md")


def precision(parser: argparse.ArgumentParser) -> None:
    """--precision and --host-part, as `pimrt run`, `compare` and a sweep's axes take them."""
    from pimrt.graph.precision import PRECISIONS
    parser.add_argument(
        "--precision", default="fp32", choices=tuple(PRECISIONS),
        help="the training step's precision: fp32, or mixed precision as torch's autocast "
             "runs it (CONVs on Tensor Cores on 16-bit copies of the fp32 weights, "
             "activations and their gradients 16-bit in memory, batch norm statistics, "
             "gradients of the weights and the update fp32; amp-fp16 with loss scaling). "
             "docs/precision.md")
    parser.add_argument(
        "--host-part", default=None,
        help="host part (name or TOML file); default: v100 for fp32, v100_tc (its Tensor "
             "Cores) for amp-fp16, a100_tc for amp-bf16")
