"""The params document is a typed contract: a malformed one is refused when published and
when read, with a message that names the field; a good one passes unchanged."""

from __future__ import annotations

import json
from datetime import datetime

import pytest

from doxa.data.params_document import FORMAT, ParamsDocument, ParamsDocumentError
from doxa.inference.read import params as parameters
from doxa.inference.read import scorer

NOW = datetime(2026, 6, 1)
GOOD = {
    "trust": {"person": {"mean": 0.8, "lo": 0.7, "hi": 0.9, "n": 4}},
    "kinds": {"flower": {"options": ["lilies", "tulips"], "prior": [1, 1], "change_rate": 0.0,
                         "half_life_days": None}},
    "readers": {"a-reader": {"temperature": 1.2}},
    "calibration": {"method": "temperature", "temperature": 1.5, "floor": 0.01},
    "defaults": {"change_rate": 0.001, "trust": 0.6, "trust_by_top_layer": {"person": 0.8}},
}

#: (change to the good document, the field the error must name)
BAD = [
    ({"trust": {"person": {"mean": 1.5}}}, "trust['person'].mean"),
    ({"trust": {"person": {"lo": 0.5}}}, "trust['person'].mean"),
    ({"trust": {"person": {"mean": 0.8, "men": 0.8}}}, "trust['person'].men"),
    ({"kinds": {"flower": {"options": ["lilies", "tulips"], "prior": [1.0]}}}, "kinds['flower'].prior"),
    ({"kinds": {"flower": {"options": ["lilies", "tulips"], "prior": [1, 1], "change_rate": -0.1}}},
     "kinds['flower'].change_rate"),
    ({"readers": {"a-reader": {"temperature": 0}}}, "readers['a-reader'].temperature"),
    ({"calibration": {"method": "platt"}}, "calibration.method"),
    ({"calibration": {"method": "temperature"}}, "calibration.temperature"),
    ({"confusion": {"person": {"flower": [[0.9, 0.1], [0.5, 0.6]]}}}, "confusion['person']['flower'][1]"),
    ({"defaults": {"trust": "high"}}, "defaults.trust"),
    ({"trsut": {}}, "trsut"),
    ({"format": FORMAT + 1}, "format"),
]


def bad_document(change: dict) -> dict:
    return {**GOOD, **change}


def test_a_good_document_is_typed_and_published_as_given(small_mem):
    document = ParamsDocument.from_dict(GOOD)
    assert document.trust["person"].mean == 0.8 and document.kinds["flower"].prior == (1.0, 1.0)
    assert document.calibration.temperature == 1.5 and document.format == FORMAT
    version = small_mem.store.publish_params(GOOD)
    assert small_mem.store.latest_params() == (version, {**GOOD, "format": FORMAT, "version": version})
    assert small_mem.params()["readers"] == GOOD["readers"]


@pytest.mark.parametrize("change, field", BAD, ids=[f for _, f in BAD])
def test_a_malformed_document_is_refused_on_publish_and_nothing_is_written(small_mem, change, field):
    with pytest.raises(ParamsDocumentError) as err:
        small_mem.store.publish_params(bad_document(change))
    assert err.value.field == field and f"{field}:" in str(err.value)
    assert "nothing published" in str(err.value)
    assert small_mem.store.latest_params() == (None, None)


@pytest.mark.parametrize("change, field", BAD, ids=[f for _, f in BAD])
def test_a_malformed_published_version_is_refused_on_read(small_mem, change, field):
    # written past the check, as a store edited by hand or by a broken older doxa would hold it
    small_mem.store.con.execute("INSERT INTO params VALUES (7, now()::TIMESTAMP, ?)",
                                [json.dumps(dict(bad_document(change), version=7))])
    with pytest.raises(ParamsDocumentError) as err:
        small_mem.belief("maya.flower", NOW)
    assert err.value.field == field
    assert str(err.value).startswith("published parameter version 7 is malformed") and f"{field}:" in str(err.value)


def test_the_scorer_refuses_a_malformed_document(small_mem):
    evidence = small_mem.store.load_evidence(NOW)
    assert scorer.score(evidence, GOOD).probs.shape[0] == len(evidence.questions.ids)
    with pytest.raises(ParamsDocumentError, match=r"trust\['person'\]\.mean: 1\.5 is out of range"):
        scorer.score(evidence, bad_document({"trust": {"person": {"mean": 1.5}}}))


def test_the_defaults_are_a_valid_document():
    assert ParamsDocument.from_dict(parameters.default_params()).version is None


def test_doxa_belief_names_the_bad_field_of_a_published_version(tmp_path, small_records):
    from typer.testing import CliRunner

    import records
    from doxa.cli.main import app
    from doxa.data.store import Store

    path = str(tmp_path / "doxa.duckdb")
    runner = CliRunner()
    assert runner.invoke(app, ["ingest", records.write_jsonl(tmp_path / "small.jsonl", small_records),
                               "--db", path]).exit_code == 0
    with Store.open(path) as store:
        store.con.execute("INSERT INTO params VALUES (1, now()::TIMESTAMP, ?)",
                          [json.dumps(bad_document({"readers": {"a-reader": {"temperature": -2}}}))])
    for args in (["belief", "maya.flower"], ["belief", "maya.flower", "--json"]):
        out = runner.invoke(app, args + ["--db", path])
        assert out.exit_code == 1 and "internal error" not in out.output
        assert "published parameter version 1 is malformed" in out.output
        assert "readers['a-reader'].temperature: -2 is out of range" in out.output
