"""A model whose builder kills the worker process that builds it: always (always.flag absent
here) or only the first time (once: leaves a flag). The client's checks build it in the
main process, which it spares."""
import multiprocessing
import os
import pathlib

from pimrt import zoo

HERE = pathlib.Path(__file__).parent


def _maybe_die(flag: str, once: bool) -> None:
    if multiprocessing.current_process().name == "MainProcess":
        return
    f = HERE / flag
    if once and f.exists():
        return
    f.write_text("died\n")
    os._exit(3)


def once():
    _maybe_die("once.flag", True)
    return zoo.build("resnet_cifar_20", input_size=32)


def always():
    _maybe_die("always.flag", False)
    return zoo.build("resnet_cifar_20", input_size=32)
