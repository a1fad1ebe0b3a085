"""The generator: the committed JSON is what it makes of the registry now; its PromQL builders refuse what
cannot be; the SDK's own model keeps everything it wrote."""

from __future__ import annotations

import json
import sys

import pytest

from streamscope.events.registry import METRICS, Instrument, M, prometheus_label
from tests.dashboards.dashboard_json import PROMETHEUS_ANNOTATION_KEYS, STREAMSCOPE_JSON, load

pytestmark = pytest.mark.skipif(
    sys.version_info < (3, 11), reason="the generator's grafana-foundation-sdk needs Python >= 3.11"
)


@pytest.fixture(scope="module")
def generate():
    from dashboards import generate

    return generate


def test_the_committed_json_is_what_the_registry_gives(generate):
    assert STREAMSCOPE_JSON.read_text() == generate.render(), (
        f"{STREAMSCOPE_JSON} is out of date: run python -m dashboards.generate and commit it"
    )


def test_check_flag_names_a_stale_file_and_passes_a_current_one(generate, tmp_path, capsys):
    out = tmp_path / "d.json"
    assert generate.main(["--check", "--output", str(out)]) == 1  # missing
    out.write_text(generate.render().replace("Overview", "Overveiw"))
    assert generate.main(["--check", "--output", str(out)]) == 1
    assert f"{out} is out of date" in capsys.readouterr().err
    assert generate.main(["--output", str(out)]) == 0
    assert generate.main(["--check", "--output", str(out)]) == 0
    assert json.loads(out.read_text()) == load()


def test_a_selector_filters_by_the_variables_its_metric_carries(generate):
    for m in METRICS:
        sel = generate.series(m)
        assert 'job=~"$job"' in sel
        for var, attr in (("rank", "rank"), ("dataset", "dataset")):
            assert (f'{prometheus_label(attr)}=~"${var}"' in sel) == (attr in m.attributes), (m.name, sel)


def test_promql_builders_refuse_what_a_metric_cannot_give(generate):
    with pytest.raises(ValueError, match="streamscope.cache.size.*only counters"):
        generate.rate(M.CACHE_SIZE)
    with pytest.raises(ValueError, match="streamscope.loader.wait is a counter, it has no _bucket"):
        generate.series(M.LOADER_WAIT, "_bucket")
    hist = next(m for m in METRICS if m.instrument is Instrument.HISTOGRAM)
    assert generate.rate(hist, "_bucket").startswith("rate(")


def test_the_sdk_model_keeps_every_key_but_the_prometheus_annotation_ones():
    """foundation-sdk's from_json drops keys its model does not know (panel targets included, which tsc does not
    look into): a round trip changes nothing but the annotation keys the SDK cannot set."""
    from grafana_foundation_sdk.cog import encoder
    from grafana_foundation_sdk.cog.plugins import register_default_plugins
    from grafana_foundation_sdk.models.dashboard import Dashboard

    register_default_plugins()
    doc = load()
    back = json.loads(json.dumps(Dashboard.from_json(doc), cls=encoder.JSONEncoder))
    for a, b in zip(doc["annotations"]["list"], back["annotations"]["list"]):
        assert set(a) - set(b) <= PROMETHEUS_ANNOTATION_KEYS and set(b) <= set(a)
        b.update({k: a[k] for k in set(a) - set(b)})
    assert back == doc
