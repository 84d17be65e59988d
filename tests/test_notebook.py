"""The inspection notebook runs top to bottom (tiny sizes) and is committed without outputs."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "inspect_interactions.ipynb"


def test_notebook_is_committed_without_outputs():
    nb = nbformat.read(NOTEBOOK, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert not cell.outputs and cell.execution_count is None, "clear the notebook's outputs"


@pytest.mark.slow
def test_notebook_executes(tmp_path, monkeypatch):
    from nbclient import NotebookClient

    monkeypatch.setenv("AUTOINT_NOTEBOOK_FAST", "1")  # tiny sizes; the kernel inherits the environment
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("AUTOINT_NOTEBOOK_WORK", str(tmp_path / "work"))  # not left behind in /tmp
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = NotebookClient(nb, timeout=300, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    text = "\n".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "planted crosses:" in text
    assert (tmp_path / "work" / "mlflow.db").is_file()
    if os.environ.get("AUTOINT_DATA_DIR"):
        assert "test AUC" in text and "skipping MovieLens" not in text
    # Run again into the same work folder (a kernel restarted, or the cell run twice): the training cell gave
    # "holds a finished run" when its run folder was a fixed name (a helper's hunt)
    again = nbformat.read(NOTEBOOK, as_version=4)
    again.cells = again.cells[:4]  # the set-up and the synthetic run
    assert "syn_run = train(" in again.cells[-1].source
    NotebookClient(again, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(NOTEBOOK.parent)}}).execute()
    assert len(list((tmp_path / "work").glob("synthetic-run-*"))) == 2
