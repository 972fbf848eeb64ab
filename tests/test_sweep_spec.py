"""`pimrt sweep`'s spec: the points of a grid crossed with a list of points, their ids, the
baseline tasks they share, and every bad input refused with one line before any work (nothing
written)."""
import json
import pathlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pimrt.cli import main
from pimrt.sweep import spec as specs
from pimrt.sweep.spec import PER_POINT
from pimrt.sweep.tasks import plan


def systems(s) -> dict:
    out: dict = {}
    for p in s.points:
        out.setdefault(p.group, []).append(p)
    return out

TINY = """
[fixed]
model = "resnet_cifar_20"
batch = 2
input = 32
"""


def write(tmp_path, text, name="s.toml"):
    p = tmp_path / name
    p.write_text(text)
    return p


def test_grid_crossed_with_points(tmp_path):
    s = specs.load(write(tmp_path, TINY + """
[grid]
policy = ["serial", "authority"]
set.pim.lanes = [8, 16]
[[points]]
name = "base"
[[points]]
name = "tc"
host-part = "v100_tc"
host_set.compute.efficiency = 0.5
"""))
    assert s.axes == ["policy", "set.pim.lanes", "host_part", "host_set.compute.efficiency",
                      "variant"]
    assert len(s.points) == 2 * 2 * 2
    first = s.points[0]
    assert first.values == {"policy": "serial", "set.pim.lanes": 8, "variant": "base"}
    # every option of pimrt run, with sweep's defaults (no functional check) and [fixed]
    assert first.options["batch"] == 2 and first.options["functional"] == "none"
    assert first.options["host_part"] == "v100" and first.options["groups"] >= 1
    tc = [p for p in s.points if p.values["variant"] == "tc"]
    assert all(p.options["host_part"] == "v100_tc" for p in tc)
    assert specs.part_keys(tc[0].options) == ({"pim": {"lanes": 8}},
                                              {"compute": {"efficiency": 0.5}})
    # a system's points share its baselines: the same system, policies apart
    groups = systems(s)
    assert len(groups) == 4 and all(len(g) == 2 for g in groups.values())
    assert all({p.values["policy"] for p in g} == {"serial", "authority"}
               for g in groups.values())
    # one task per baseline of a system, one per point after them
    tasks = plan(s.points)
    kinds = [t.kind for t in tasks.values()]
    assert kinds.count("point") == 8
    assert kinds.count("serial") == kinds.count("bound") == 4
    # the lanes are the PIM's timing alone: a GPU-only step per host part, not per system
    assert kinds.count("gpu_only") == 2
    for t in tasks.values():
        if t.kind == "point":
            assert [tasks[n].kind for n in t.needs] == ["serial", "gpu_only", "bound"]
            serial, gpu, bound = (tasks[n].key.split()[1] for n in t.needs)
            assert serial == bound == t.point.group and gpu == t.point.gpu_group
            assert list(tasks).index(t.key) > max(list(tasks).index(n) for n in t.needs)
    by_gpu = {}
    for p in s.points:
        by_gpu.setdefault(p.gpu_group, set()).add(p.values["variant"])
    assert sorted(by_gpu.values(), key=sorted) == [{"base"}, {"tc"}]


def test_ids_name_the_run_not_the_spec(tmp_path):
    a = specs.load(write(tmp_path, TINY + '[grid]\npolicy = ["serial", "authority"]\n', "a.toml"))
    b = specs.load(write(tmp_path, TINY + '[grid]\npolicy = ["authority"]\n'
                         'groups = [1]\n', "b.toml"))
    assert a.points[1].id == b.points[0].id          # the same run in another spec
    assert a.hash != b.hash


def test_a_part_file_is_part_of_the_id(tmp_path):
    part = tmp_path / "mine.toml"
    part.write_text('include = "v100_hbm2_pim"\n')
    text = TINY + '[grid]\npart = ["mine.toml"]\n'
    before = specs.load(write(tmp_path, text)).points[0]
    assert before.options["part"] == str(part.resolve())   # relative to the spec's folder
    part.write_text('include = "v100_hbm2_pim"\n[pim]\nlanes = 16\n')
    assert specs.load(write(tmp_path, text)).points[0].id != before.id


@given(st.lists(st.sampled_from(["serial", "bank_partition", "authority"]), min_size=1,
                max_size=3, unique=True),
       st.lists(st.sampled_from([1, 2, 4]), min_size=1, max_size=3, unique=True),
       st.lists(st.sampled_from([4, 8, 16, 32]), min_size=1, max_size=4, unique=True),
       st.integers(0, 3))
def test_points_are_the_product_and_groups_share_all_but_per_point_options(
        policies, groups, lanes, variants):
    import pathlib
    import tempfile
    text = TINY + f"[grid]\npolicy = {json.dumps(policies)}\ngroups = {groups}\n" \
                  f"set.pim.lanes = {lanes}\n"
    text += "".join(f'[[points]]\nname = "v{i}"\nset.pim.mode_switch_cycles = {24 * (i + 1)}\n'
                    for i in range(variants))
    with tempfile.TemporaryDirectory() as d:
        s = specs.load(write(pathlib.Path(d), text))
    assert len(s.points) == len(policies) * len(groups) * len(lanes) * max(variants, 1)
    assert len({p.id for p in s.points}) == len(s.points)
    for g in systems(s).values():
        shared = [{k: v for k, v in p.options.items() if k not in PER_POINT} for p in g]
        assert all(o == shared[0] for o in shared)
    n_systems = len(lanes) * max(variants, 1)
    assert len(systems(s)) == n_systems
    # a serial step per system, a bound per system and groups, and one GPU-only step (the
    # systems differ only in the PIM's lanes and mode switch); a task each
    kinds = [t.kind for t in plan(s.points).values()]
    assert kinds.count("serial") == n_systems and kinds.count("gpu_only") == 1
    assert kinds.count("bound") == n_systems * len(groups)
    assert kinds.count("point") == len(s.points)


BAD = [
    ("[grid]\npolicys = ['serial']\n", "unknown axis 'policys'; did you mean 'policy'?"),
    ("[grid]\nout = ['x']\n", "'out' is not an axis"),
    ("[grid]\npolicy = []\n", "an axis with no values makes an empty grid"),
    ("[sweep]\nname = 'x'\n", "empty grid"),
    ("[grid]\nbatch = ['two']\n", "batch = 'two': expected an integer"),
    ("[grid]\nupdate = ['adam']\n", "update = 'adam': choose one of sgd, gradsa, laysa"),
    ("[grid]\npolicy = 'serial'\n", "expected a list of values"),
    ("[grid]\npolicy = ['serial', 'serial']\n", "lists a value twice"),
    ("[grid]\nset.pim = [8]\n", "expected set.TABLE.KEY"),
    ("[grid]\nhost_times = ['measure']\n", "a sweep replays host times"),
    ("[fixed]\nbatch = 2\n[grid]\nbatch = [2, 4]\n", "batch is in [fixed] and also varies"),
    ("[grid]\npolicy = ['serial']\n[[points]]\npolicy = 'authority'\n",
     "policy is a [grid] axis and also set by [[points]]"),
    ("[[points]]\nname = 'a'\n[[points]]\nname = 'a'\n", "two [[points]] are named 'a'"),
    ("[[points]]\ngroups = 4\n[[points]]\ngroups = 4\n", "points 1 and 2 are the same run"),
    ("[grids]\npolicy = ['serial']\n", "unknown table [grids]"),
    ("[sweep]\nname = 5\n[grid]\npolicy = ['serial']\n", "name = 5: expected a non-empty"),
    ("[grid\n", "not valid TOML"),
    # found by the checks of every point, before any work
    ("[grid]\npolicy = ['fifo']\n", "point 1 (policy=fifo): unknown policy 'fifo'"),
    ("[fixed]\nbatch = 2\n[grid]\nmodel = ['resnet19']\n", "point 1 (model=resnet19)"),
    ("[grid]\nset.pim.lanez = [8]\n", "unknown parameter 'lanez'"),
    ("[grid]\nhost_set.compute.peak_tflops = [-1.0]\n", "peak_tflops"),
    ("[grid]\ngroups = [3]\n", "point 1 (groups=3)"),
    ("[grid]\npart = ['nosuch.toml']\n", "no such part"),
    ("[grid]\nworld = [0]\n", "point 1 (world=0): --world must be >= 1, got 0"),
    ("[grid]\ndensity = [nan]\n", "--density must be in (0, 1], got nan"),
    ("[grid]\nlink_gbps = [-1.0]\n", "--link-gbps must be > 0, got -1.0"),
    ("[grid]\nslices = [3]\n", "point 1 (slices=3): slices=3 does not divide the batch"),
    ("[grid]\nhost_times = ['nofile.json']\n", "--host-times: no such file"),
    ("[grid]\nset.pim.lanes = [0]\n", "[pim] lanes: must be positive, found 0"),
    ("[grid]\nmodel = ['']\n", "model = '': expected a non-empty string"),
]


@pytest.mark.parametrize("text,message", BAD, ids=[m[:30] for _, m in BAD])
def test_bad_spec_is_one_line_before_any_work(tmp_path, capsys, text, message):
    body = TINY + text
    if text.startswith("[fixed]"):              # one [fixed] table only
        body = text.replace("[fixed]\n", "[fixed]\ninput = 32\n" if "model" in text else
                            '[fixed]\nmodel = "resnet_cifar_20"\ninput = 32\n')
    spec = write(tmp_path, body)
    out = tmp_path / "out"
    assert main(["sweep", str(spec), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("pimrt sweep: error: "), err
    assert message in err[0], err[0]
    assert not out.exists()


def test_a_grid_over_the_limit_needs_yes(tmp_path, capsys):
    spec = write(tmp_path, TINY + "[grid]\nset.pim.mode_switch_cycles = "
                 f"{list(range(1, 202))}\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dry-run"]) == 2
    assert "201 points is over the limit of 200 without --yes (201)" in \
        capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dry-run", "--yes",
                 "--quiet"]) == 0
    # a serial step and a bound per point, one GPU-only step (the mode switch is the PIM's)
    assert "201 points and 403 baselines they share, simulator code " in \
        capsys.readouterr().out
    # a grid far too large is refused before its points are made
    huge = write(tmp_path, TINY + "[grid]\n" + "".join(f"set.pim.{k} = {list(range(1, 101))}\n"
                           for k in ("lanes", "mode_switch_cycles", "clock_ratio"))
                 + "slices = [1, 2]\n[[points]]\n[[points]]\ngroups = 2\n", "huge.toml")
    assert main(["sweep", str(huge), "--out", str(tmp_path / "o"), "--yes"]) == 2
    assert "4000000 points is over the limit of 100000 even with --yes (100 x 100 x 100 x 2 " \
        "x 2 [[points]])" in capsys.readouterr().err


def test_command_line_misuse(tmp_path, capsys):
    spec = write(tmp_path, TINY + "[grid]\npolicy = ['serial']\n")
    for argv, message in (
            ([str(tmp_path / "nope.toml"), "--out", "o"], "no such spec file"),
            ([str(tmp_path)], "a results folder; give --plot X"),
            ([str(spec), "--plot", "policy"], "is not a results folder"),
            ([str(spec), "--out", str(tmp_path / "o"), "--jobs", "0"], "--jobs must be >= 1"),
            ([str(spec), "--out", str(tmp_path / "o"), "--jobs", "2", "--scheduler",
              "local:2"], "--jobs is for local processes"),
            ([str(spec), "--out", str(tmp_path / "o"), "--scheduler", "nowhere"],
             "expected a scheduler's address (tcp://HOST:PORT) or local:N"),
            ([str(spec), "--out", str(tmp_path / "o"), "--scheduler", "local:0"],
             "at least one worker")):
        assert main(["sweep", *argv, "--quiet"]) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and message in err[0], (argv, err)
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name, size", [("sweep-sensitivity.toml", 32),
                                        ("sweep-sensitivity-224.toml", 224)])
def test_the_documented_sensitivity_spec_is_the_bench_s_variants(name, size):
    """docs/sweep-sensitivity.toml (32x32) and docs/sweep-sensitivity-224.toml: the five CNNs
    x pimrt bench sensitivity's variants, each with that variant's part keys and host part,
    at its groups."""
    import pathlib
    from pimrt.bench.sensitivity import VARIANTS
    from pimrt.runtime.timing import DEFAULT_GROUPS
    s = specs.load(pathlib.Path(__file__).resolve().parents[1] / "docs" / name)
    assert len(s.points) == 5 * len(VARIANTS) and len(systems(s)) == len(s.points)
    for p in s.points:
        _, overrides, host = VARIANTS[p.values["variant"]]
        mem, host_keys = specs.part_keys(p.options)
        assert {f"{t}.{k}": v for t, kv in mem.items() for k, v in kv.items()} == overrides
        assert p.options["host_part"] == host and not host_keys
        assert (p.options["policy"], p.options["groups"], p.options["batch"],
                p.options["input"]) == ("authority", DEFAULT_GROUPS, 32, size)
    # the GPU-only step per model and system as the host sees it: the default, one stack and
    # the Tensor-Core host; lanes, the PIM's clock and the mode switch share the default's
    kinds = [t.kind for t in plan(s.points).values()]
    assert kinds.count("gpu_only") == 5 * 3 and kinds.count("serial") == 5 * len(VARIANTS)
    for model in {p.options["model"] for p in s.points}:
        mine = {p.values["variant"]: p.gpu_group for p in s.points
                if p.options["model"] == model}
        assert len({mine[v] for v in ("default", "lanes16", "pim_at_memory_clock",
                                      "switch_x4")}) == 1
        assert len({mine[v] for v in ("default", "one_stack", "tensor_core_host")}) == 3


def test_the_authority_rule_is_a_point_s_own(tmp_path):
    """Points that differ in the authority rule share their system's baselines."""
    s = specs.load(write(tmp_path, TINY + '[grid]\nauthority_rule = ["layer", "slack"]\n'))
    assert [p.options["authority_rule"] for p in s.points] == ["layer", "slack"]
    assert len(systems(s)) == 1
    kinds = [t.kind for t in plan(s.points).values()]
    assert kinds.count("serial") == kinds.count("gpu_only") == kinds.count("bound") == 1


def test_out_defaults_to_results_sweep_spec(capsys):
    from pimrt.commands.sweep import out_folder
    assert out_folder(pathlib.Path("docs/sweep-sensitivity.toml")) == \
        pathlib.Path("results/sweep/sweep-sensitivity")
    with pytest.raises(SystemExit):
        main(["sweep", "--help"])
    assert "default: results/sweep/SPEC" in " ".join(capsys.readouterr().out.split())


def test_the_sweep_says_once_per_model_which_layers_run_on_the_host(tmp_path, capsys):
    """As pimrt run and compare do: resnet_cifar_20's global average pool has no PIM program."""
    spec = write(tmp_path, TINY + "[grid]\ngroups = [1, 2]\n")
    assert main(["sweep", str(spec), "--out", str(tmp_path / "o"), "--dry-run", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.count("resnet_cifar_20: note: 1 layer the PIM has no program for run on the "
                     "host: avgpool (global average pool)") == 1


def test_a_point_without_a_part_runs_on_its_host_parts_own_memory(tmp_path):
    s = specs.load(write(tmp_path, TINY + """
[grid]
precision = ["fp32", "amp-fp16", "amp-bf16"]

[[points]]
name = "default"

[[points]]
name = "given"
part = "hbm2_pim"
"""))
    got = [(p.options["precision"], p.values["variant"], p.options["host_part"],
            p.options["part"]) for p in s.points]
    assert got == [("fp32", "default", "v100", "v100_hbm2_pim"),
                   ("fp32", "given", "v100", "hbm2_pim"),
                   ("amp-fp16", "default", "v100_tc", "v100_hbm2_pim"),
                   ("amp-fp16", "given", "v100_tc", "hbm2_pim"),
                   ("amp-bf16", "default", "a100_tc", "a100_hbm2_pim"),
                   ("amp-bf16", "given", "a100_tc", "hbm2_pim")]
