"""The sweep's loop against an executor that plays out lost workers and errors (no processes):
each baseline runs once and its points after it; a lost task runs once more, alone; a baseline
lost again or failing fails the points that need it, with an error naming it, and the others go
on; what is in flight never exceeds the executor's slots."""
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from executor_fakes import QuietExecutor
from pimrt.sweep import runner
from pimrt.sweep import spec as specs
from pimrt.sweep.store import Store

CODE = "c0de"


class Handle:
    def __init__(self, kind, options, needs):
        self.kind, self.options, self.needs = kind, options, needs
        self.model = options["model"]
        self.outcome = None


class Scripted(QuietExecutor):
    """The serial baseline's outcomes in turn, by model: "ok", "lost", "error" (the executor
    failed) or "fail" (the simulation raised); every other task is ok."""

    def __init__(self, script: dict, slots: int):
        self.script = {k: list(v) for k, v in script.items()}
        self.n = slots
        self.inflight: list = []
        self.log: list = []            # (kind, model, policy, kinds of the others in flight)

    def slots(self):
        return self.n

    def submit(self, kind, options, needs):
        h = Handle(kind, options, needs)
        # a point is sent only after the baselines it needs, with their results
        assert kind != "point" or sorted(needs) == ["bound", "gpu_only", "serial"]
        assert all(d.outcome == "ok" and d.options["model"] == h.model
                   for d in needs.values())
        self.log.append((kind, h.model, options["policy"],
                         [(o.kind, o.model) for o in self.inflight]))
        self.inflight.append(h)
        assert len(self.inflight) <= self.n
        return h

    def outcome(self, h):
        self.inflight.remove(h)
        kind = self.script[h.model].pop(0) if h.kind == "serial" else "ok"
        h.outcome = kind
        if kind == "ok":
            value = {"summary": {"step_ms": 1.0, "plots": []}, "files": {}} \
                if h.kind == "point" else h.kind
            return "ok", {"ok": True, "value": value, "worker": "here", "code": CODE}
        if kind == "fail":
            return "ok", {"ok": False, "error": f"boom in {h.model}", "detail": "trace",
                          "worker": "here", "code": CODE}
        return kind, f"{kind} in {h.model}"


MODELS = ["resnet_cifar_20", "resnet_cifar_32", "resnet_cifar_44", "resnet_cifar_56"]


def spec_of(tmp_path, n):
    p = tmp_path / "s.toml"
    p.write_text(f"[grid]\nmodel = {json.dumps(MODELS[:n])}\n"
                 "policy = ['serial', 'authority']\n")
    return specs.load(p)


@settings(deadline=None)
@given(st.lists(st.sampled_from([["ok"], ["lost", "ok"], ["lost", "lost"], ["error"],
                                 ["fail"]]), min_size=1, max_size=4), st.integers(1, 3))
def test_baselines_once_points_after_them_lost_tasks_again_alone(tmp_path_factory, outcomes,
                                                                  slots):
    tmp = tmp_path_factory.mktemp("r")
    spec = spec_of(tmp, len(outcomes))
    store = Store.open(tmp / "out", spec)
    store.start()
    ex = Scripted(dict(zip(MODELS, outcomes)), slots)
    result = runner.run(spec, store, ex, quiet=True, code=CODE)
    for model, script in zip(MODELS, outcomes):
        runs = [(kind, others) for kind, m, _, others in ex.log if m == model]
        serial = [others for kind, others in runs if kind == "serial"]
        assert len(serial) == (2 if script[0] == "lost" else 1)
        if len(serial) == 2:
            assert serial[1] == []                       # the retry ran alone
        ok = script[-1] == "ok"
        # the points ran (each once) only on a baseline that was done
        assert sum(kind == "point" for kind, _ in runs) == (2 if ok else 0)
        assert sum(kind == "gpu_only" for kind, _ in runs) <= 1
        states = {store.rows[p.id]["status"] for p in spec.points
                  if p.options["model"] == model}
        assert states == {"done" if ok else "failed"}
    failed = sum(s[-1] != "ok" for s in outcomes)
    assert len(result.failed) == 2 * failed and result.done == 2 * (len(outcomes) - failed)
    rows = (tmp / "out" / "results.csv").read_text().splitlines()
    assert len(rows) == 1 + len(spec.points)
    for p, why in result.failed:
        err = json.loads((store.folder(p) / "error.json").read_text())["error"]
        assert err == why
        assert why.startswith(f"its serial host+PIM baseline of {p.options['model']} on its "
                              f"system ({p.group}) failed: ")
        assert why.endswith(("worker lost twice: lost in " + p.options["model"],
                             "error in " + p.options["model"], "boom in " + p.options["model"]))


def test_a_worker_with_other_code_is_refused(tmp_path):
    spec = spec_of(tmp_path, 1)
    store = Store.open(tmp_path / "out", spec)
    store.start()
    result = runner.run(spec, store, Scripted({MODELS[0]: ["ok"]}, 2), quiet=True,
                        code="other")
    assert result.done == 0 and len(result.failed) == 2
    assert all("worker here runs other simulator code (fingerprint c0de; this client's is "
               "other)" in why for _, why in result.failed)


class Inline(QuietExecutor):
    """Each task run at once in this process, through the worker's own run_task."""
    retries_lost = False

    class Done:
        def __init__(self, result):
            self.result = result

    def slots(self):
        return 2

    def submit(self, kind, options, needs):
        from pimrt.sweep.worker import run_task
        return self.Done(run_task(kind, options, tuple(needs),
                                  *(h.result for h in needs.values())))

    def wait(self, handles, seconds):
        return set(handles)

    def outcome(self, h):
        return "ok", h.result


def test_the_functional_check_is_a_baseline_its_points_share(tmp_path):
    """functional = "golden" in both policies of a system: one check, in both summaries."""
    from pimrt.sweep.code import fingerprint
    p = tmp_path / "s.toml"
    p.write_text('[fixed]\nmodel = "resnet_cifar_20"\nbatch = 2\ninput = 32\n'
                 'functional = "golden"\n[grid]\npolicy = ["serial", "authority"]\n')
    spec = specs.load(p)
    store = Store.open(tmp_path / "out", spec)
    store.start()
    result = runner.run(spec, store, Inline(), quiet=True,
                        code=fingerprint()["fingerprint"])
    assert result.done == 2 and not result.failed
    assert dict(result.tasks) == {"serial": 1, "gpu_only": 1, "bound": 1, "functional": 1,
                                  "point": 2}
    checks = [json.loads((store.folder(q) / "summary.json").read_text())["functional"]
              for q in spec.points]
    assert checks[0] == checks[1] and checks[0]
