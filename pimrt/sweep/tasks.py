"""A sweep's work as tasks with dependencies: each baseline that points share runs once as its
own task, and each point runs as its own task after the baselines it needs.

    serial SYSTEM          the serial host+PIM step on the point's system (its `group`: every
                           option but policy, groups, slices, no_plan and functional)
    gpu_only SYSTEM        the GPU-only step on that system, shared by the points whose
                           systems differ only in the PIM's timing (lanes, clock, mode switch)
    bound SYSTEM g s plan  the contention-free bound per (groups, slices, plan), with the
                           planned schedule a pipelined policy of the same key reuses
    functional SYSTEM ...  the functional check per (backend, groups, slices), where asked
    point ID               the point's policy, its report (the `serial` point is the serial
                           baseline's report)

So a grid over policies alone runs its points in parallel once their system's baselines are
done, and the three baselines of a system run in parallel with each other."""
from __future__ import annotations

import dataclasses

BASELINES = ("serial", "gpu_only", "bound", "functional")
WORDS = {"serial": "serial host+PIM baseline", "gpu_only": "GPU-only baseline",
         "bound": "contention-free bound", "functional": "functional check"}


@dataclasses.dataclass
class Task:
    key: str                 # unique in the sweep
    kind: str                # one of BASELINES, or "point"
    options: dict            # the run's options (a baseline's: its first point's)
    needs: tuple = ()        # keys of the tasks whose results it takes
    point: object = None     # the spec's Point, for a point

    def words(self) -> str:
        """The task in an error message."""
        if self.point is not None:
            return f"point {self.point.index + 1} ({self.point.id})"
        o = self.options
        what = WORDS[self.kind]
        if self.kind == "bound":
            what += f" (groups {o['groups']}, slices {o['slices']}, " \
                    f"{'no plan' if o['no_plan'] else 'planned'})"
        return f"{what} of {o['model']} on its system ({self.key.split()[1]})"


def _slices(o: dict) -> int:
    from pimrt.runtime.session import slices_for
    return slices_for(o["batch"], o["slices"])


def plan(points) -> dict[str, Task]:
    """The tasks of these points, each point after the baselines it needs; a baseline that
    several points need is one task."""
    tasks: dict[str, Task] = {}

    def need(kind: str, key: str, o: dict) -> str:
        if key not in tasks:
            tasks[key] = Task(key, kind, o)
        return key

    for p in points:
        o, g = p.options, p.group
        s = _slices(o)
        needs = [need("serial", f"serial {g}", o),
                 need("gpu_only", f"gpu_only {p.gpu_group}", o),
                 need("bound", f"bound {g} g{o['groups']} s{s} "
                               f"{'no_plan' if o['no_plan'] else 'plan'}", o)]
        if o["functional"] != "none":
            needs.append(need("functional",
                              f"functional {g} {o['functional']} g{o['groups']} s{s}", o))
        tasks[f"point {p.id}"] = Task(f"point {p.id}", "point", o, tuple(needs), p)
    return tasks
