"""A model whose builder, in a worker process, writes that process's id to hang.pid beside
this file and then waits for ten minutes: a task that is still running when the sweep's
client is stopped. The client's checks build it in the main process, which it spares."""
import multiprocessing
import os
import pathlib
import time

from pimrt import zoo

HERE = pathlib.Path(__file__).parent


def forever():
    if multiprocessing.current_process().name != "MainProcess":
        (HERE / "hang.pid.tmp").write_text(str(os.getpid()))
        os.replace(HERE / "hang.pid.tmp", HERE / "hang.pid")
        time.sleep(600)
    return zoo.build("resnet_cifar_20", input_size=32)
