"""Every lab executes top to bottom in smoke mode on the CPU, within its time budget."""
import time
from pathlib import Path

import pytest

from kb.gpu_run import execute
from kb.labs import lab_meta


ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs_in_smoke_mode(path, tmp_path):
    budget = lab_meta(path).smoke_budget_s
    start = time.perf_counter()
    nb, record, _ = execute(path, "smoke", tmp_path / "record.json", timeout=int(budget), progress=False)
    seconds = time.perf_counter() - start
    assert seconds < budget, f"{path.name}: smoke run took {seconds:.0f} s, budget {budget:.0f} s"
    assert record.get("modules"), f"{path.name}: the record lists no snippet files"
    if lab_meta(path).published:  # a lab for special hardware (Hopper) records what the CPU can measure
        assert record["metrics"], f"{path.name}: a published lab must record its metrics"
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs if o.output_type == "error"]
    assert not errors
