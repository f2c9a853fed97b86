"""dag_parse_ratio: parse time of each DAG file over its empty twin's (goal <= 1.5).

The twin is the same DAG file with the project taken out: every @task body
replaced by `pass` and every top-level import that is neither Airflow nor the
standard library dropped (its names stand in as plain strings). Airflow's own cost of building those operators is in
both; the ratio measures what the file adds on top, imports and work at parse
time (an `import torch` at the top costs ~1 s: a ratio in the hundreds). Both are
parsed as the dag-processor parses them (DagBag on one file, in a child forked
from a process that has Airflow imported), alternating, many times; medians are
compared. The
ratio against a one-task DAG is reported beside it, for scale.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.record import Record
from ops.airflow_env import airflow_env
from tasks.core.settings import REPO_ROOT, Settings

ONE_TASK_DAG = """
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import dag

@dag(dag_id="one_task", schedule=None, catchup=False, tags=["bench"])
def one_task():
    EmptyOperator(task_id="noop")

one_task()
"""

MEASURE = r'''
import ast, json, os, statistics, sys, time
from pathlib import Path
ALLOWED = {"airflow", "__future__"} | set(sys.stdlib_module_names)
from airflow.dag_processing.dagbag import DagBag

def twin_source(path):
    tree = ast.parse(Path(path).read_text())

    class EmptyTasks(ast.NodeTransformer):
        def visit_FunctionDef(self, node):
            self.generic_visit(node)
            if any("task" in ast.unparse(d) for d in node.decorator_list):
                node.body = [ast.Pass()]
            return node

    def kept(stmt):
        if isinstance(stmt, ast.Import):
            roots = {a.name.split(".")[0] for a in stmt.names}
        elif isinstance(stmt, ast.ImportFrom):
            roots = {(stmt.module or "").split(".")[0]}
        else:
            return True
        return roots <= ALLOWED

    def stand_in(stmt):
        """A dropped import's names as plain strings, so module-level uses (a Param's pattern) still parse."""
        names = [a.asname or a.name.split(".")[0] for a in stmt.names]
        return ast.parse(" = ".join(names) + " = '.'").body[0]

    tree.body = [s if kept(s) else stand_in(s) for s in tree.body]
    return ast.unparse(EmptyTasks().visit(tree))

def parse(path):
    """Parse in a forked child, as the dag-processor does: modules the file imports are not
    already cached in the parent, so each parse pays for them."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        t0 = time.perf_counter()
        bag = DagBag(dag_folder=path, bundle_path=None)
        elapsed = time.perf_counter() - t0
        ok = not bag.import_errors and bool(bag.dags)
        os.write(w, json.dumps([elapsed, ok, {k: str(v) for k, v in bag.import_errors.items()}]).encode())
        os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        elapsed, ok, errors = json.loads(f.read())
    os.waitpid(pid, 0)
    assert ok, f"{path}: {errors or 'no DAG parsed'}"
    return elapsed

dag_files, one_task, tmp, repeats = json.loads(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), int(sys.argv[4])
files = {"one_task": one_task}
for path in dag_files:
    twin = tmp / f"twin_{Path(path).stem}.py"
    twin.write_text(twin_source(path))
    files[Path(path).stem] = path
    files["twin_" + Path(path).stem] = str(twin)
times = {k: [] for k in files}
for _ in range(repeats):
    for name, path in files.items():
        times[name].append(parse(path))
print(json.dumps({k: statistics.median(v) for k, v in times.items()}))
'''


def run(repeats: int = 30) -> list[Record]:
    dag_files = [str(p) for p in sorted((REPO_ROOT / "dags").glob("*.py"))]
    with tempfile.TemporaryDirectory() as tmp:
        one_task = Path(tmp) / "one_task.py"
        one_task.write_text(ONE_TASK_DAG)
        env = airflow_env(Settings.from_env({"SLUICE_HOME": str(Path(tmp) / "home")}), 8080)
        env["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "WARNING"
        out = subprocess.run(
            [sys.executable, "-c", MEASURE, json.dumps(dag_files), str(one_task), tmp, str(repeats)],
            env=env,
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise RuntimeError(out.stderr[-3000:])
    med = json.loads(out.stdout.strip().splitlines()[-1])
    stems = [Path(p).stem for p in dag_files]
    ratios = {s: med[s] / med[f"twin_{s}"] for s in stems}
    return [
        Record(
            "dag_parse_ratio",
            max(ratios.values()),
            "ratio",
            "<= 1.5",
            {
                "per_file_ratio_vs_twin": ratios,
                "median_seconds": med,
                "repeats": repeats,
                "vs_one_task_dag": {s: med[s] / med["one_task"] for s in stems},
            },
        )
    ]
