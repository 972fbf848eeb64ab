"""`pimrt sweep`: design-space exploration from a TOML spec (docs/sweep.md).

- options.py: the axes a spec may name (every option of `pimrt run`, and single keys of the
  memory and host parts as `set.TABLE.KEY` / `host_set.TABLE.KEY`) and their checks;
- spec.py: the spec file -> its points (a grid crossed with a list of points), their ids and
  the system each runs on;
- tasks.py: the baselines the points share, each a task, and each point a task after them;
- code.py: the fingerprint of the simulator's code a results folder was made with;
- check.py: every error a point would hit, found before any work;
- worker.py: one task (a baseline or a point) timed in a worker process;
- executors.py: local processes (--jobs) or a Dask cluster (--scheduler);
- store.py: the results folder (its spec, each point's folder, results.csv / .parquet);
- runner.py: the loop that submits tasks once their baselines are done, records points and
  draws the progress bar;
- plot.py: `pimrt sweep DIR --plot X --y Y --by Z`.
"""
