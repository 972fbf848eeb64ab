"""The sweep's loop against an executor that plays out lost workers and errors (no processes):
a lost group runs once more, alone; lost again or failing, it is recorded and the others go on;
what is in flight never exceeds the executor's slots."""
import json

from hypothesis import given
from hypothesis import strategies as st

from pimrt.sweep import runner
from pimrt.sweep import spec as specs
from pimrt.sweep.store import Store


class Handle:
    def __init__(self, model, points):
        self.model, self.points = model, points


class Scripted:
    """Each group's outcomes in turn by its first point's model: "ok", "lost" or "error"."""
    retries_lost = True

    def __init__(self, script: dict, slots: int):
        self.script = {k: list(v) for k, v in script.items()}
        self.n = slots
        self.inflight: list = []
        self.log: list = []            # (model, others in flight when submitted)

    def slots(self):
        return self.n

    def submit(self, points):
        model = points[0]["options"]["model"]
        h = Handle(model, points)
        self.log.append((model, [o.model for o in self.inflight]))
        self.inflight.append(h)
        assert len(self.inflight) <= self.n
        return h

    def wait(self, handles, seconds):
        return {handles[0]}

    def outcome(self, h):
        self.inflight.remove(h)
        model, points = h.model, h.points
        kind = self.script[model].pop(0)
        if kind == "ok":
            return "ok", [{"id": p["id"], "ok": True, "files": {},
                           "summary": {"step_ms": 1.0, "plots": []}} for p in points]
        return kind, f"{kind} in {model}"

    def close(self, cancel=False):
        pass


MODELS = ["resnet_cifar_20", "resnet_cifar_32", "resnet_cifar_44", "resnet_cifar_56"]


def spec_of(tmp_path, n):
    p = tmp_path / "s.toml"
    p.write_text(f"[grid]\nmodel = {json.dumps(MODELS[:n])}\n"
                 "policy = ['serial', 'authority']\n")
    return specs.load(p)


@given(st.lists(st.sampled_from([["ok"], ["lost", "ok"], ["lost", "lost"], ["error"]]),
                min_size=1, max_size=4), st.integers(1, 3))
def test_lost_groups_run_again_alone_once(tmp_path_factory, outcomes, slots):
    tmp = tmp_path_factory.mktemp("r")
    spec = spec_of(tmp, len(outcomes))
    store = Store.open(tmp / "out", spec)
    store.start()
    ex = Scripted(dict(zip(MODELS, outcomes)), slots)
    result = runner.run(spec, store, ex, quiet=True)
    for model, script in zip(MODELS, outcomes):
        runs = [others for m, others in ex.log if m == model]
        assert len(runs) == (2 if script[0] == "lost" else 1)
        if len(runs) == 2:
            assert runs[1] == []                      # the retry ran alone
        states = {store.rows[p.id]["status"] for p in spec.points
                  if p.options["model"] == model}
        assert states == {"done" if script[-1] == "ok" else "failed"}
    failed = sum(s[-1] != "ok" for s in outcomes)
    assert len(result.failed) == 2 * failed and result.done == 2 * (len(outcomes) - failed)
    rows = (tmp / "out" / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + len(spec.points)
    for p, why in result.failed:
        err = json.loads((store.folder(p) / "error.json").read_text())["error"]
        assert err == why and ("worker lost twice" in why or "error in" in why)
