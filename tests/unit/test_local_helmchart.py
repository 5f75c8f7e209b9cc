"""The values `batchop local up --operator helm` and the e2e test install the chart with,
rendered by the real helm binary against the chart's values.schema.json."""

from __future__ import annotations

import subprocess
from typing import Any

import pytest
import yaml

from batchop_dev.image import OperatorImage
from batchop_dev.local import helmchart

IMAGE = OperatorImage(
    tag="localhost/batchop:0.1.0-0123456789ab", image_id="x", size_bytes=1, built=False
)


def test_local_values_render_the_local_image_never_pulled_and_the_stacks_prometheus() -> None:
    values = helmchart.local_values(IMAGE, "http://127.0.0.1:39049", scrape_interval_s=5.0)
    got = subprocess.run(
        [
            str(helmchart.helm_binary()),
            "template",
            "rel",
            str(helmchart.CHART),
            "-n",
            "ops",
            *helmchart.set_flags(values),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert got.returncode == 0, got.stderr  # the chart's schema accepts every value
    (dep,) = [d for d in yaml.safe_load_all(got.stdout) if d and d["kind"] == "Deployment"]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["image"] == IMAGE.tag
    assert container["imagePullPolicy"] == "Never"
    env: dict[str, Any] = {e["name"]: e.get("value") for e in container["env"]}
    assert env["BATCHOP_PROMETHEUS_URL"] == "http://127.0.0.1:39049"
    assert env["BATCHOP_RATE_WINDOW"] == "20s"
    assert env["BATCHOP_POD_MONITOR"] == "true"
    assert env["BATCHOP_SCRAPE_INTERVAL"] == "5s"


def test_an_image_not_built_by_make_image_is_refused() -> None:
    other = OperatorImage(tag="docker.io/batchop/batchop:1", image_id="", size_bytes=0, built=False)
    with pytest.raises(helmchart.HelmError, match="is not a localhost/batchop:<tag>"):
        helmchart.local_values(other, "http://127.0.0.1:1")
