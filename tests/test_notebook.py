"""notebooks/posterior_diagnostics.ipynb runs top to bottom on a small trained store."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from training_data import crowd_store

NOTEBOOK = Path(__file__).resolve().parents[1] / "notebooks" / "posterior_diagnostics.ipynb"


def test_posterior_diagnostics_notebook_executes(tmp_path, monkeypatch):
    from doxa.inference.learn.train import train

    db = str(tmp_path / "crowd.duckdb")
    store, _ = crowd_store(db, n_items=40, n_workers=6, n_biased=2, gold_share=0.6, seed=12)
    result = train(store, fit_options={"progress": False, "n_draws": 40, "window": 20, "patience": 40,
                                       "max_steps": 200}, folds=0, progress=False)
    store.close()
    assert Path(result.posterior_path).exists()
    monkeypatch.setenv("DOXA_DB", db)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    NotebookClient(notebook, timeout=120, kernel_name="python3",
                   resources={"metadata": {"path": str(tmp_path)}}).execute()
    outputs = "".join(out.get("text", "") for cell in notebook.cells if cell.cell_type == "code"
                      for out in cell.get("outputs", []))
    errors = [out for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
              if out.get("output_type") == "error"]
    assert not errors
    assert "parameter version 1" in outputs and "settlements (in-sample parameters)" in outputs
    images = sum(1 for cell in notebook.cells if cell.cell_type == "code" for out in cell.get("outputs", [])
                 if "image/png" in out.get("data", {}))
    assert images >= 5
    assert (tmp_path / "reliability.png").exists()


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
