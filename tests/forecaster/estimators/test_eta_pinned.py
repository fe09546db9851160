"""``EtaModel`` forecasts pinned to the values the model gave on recorded runs.

Why: fit and predict are tuned for speed (a refit runs ~120 times per ``evaluate``
and every ``refit_seconds`` in the service), and a faster path must not move a single
forecast. These values were computed by the model as it is specified (docs/
forecasting-model.md) on real MLPerf runs (``mlperf_v2_sample.csv.gz``): fitted on the
earliest 240 by end time, thinned as ``evaluate`` gives them, and asked about later runs
cut at their start, a quarter, half and all but the last point. Any change to what the
model computes fails here; a change meant to alter the forecasts updates these values
in the same commit and says why. Equal to ``REL`` relative: a change of rounding alone
(the pooled regression's least-squares solve, ``pooled.min_norm_solve``) moves the last
digits, ~1e-13; anything the model computes differently moves far more.
``bench/fit_speed.py --check`` does the same on thousands of runs.
"""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from gpu_eta.forecaster.estimators.eta_model import EtaModel
from gpu_eta.forecaster.runs import Run, thinned
from gpu_eta.forecaster.runs_csv import read_runs

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "runs" / "mlperf_v2_sample.csv.gz"
HISTORY = 240
REL = 1e-9


@functools.cache
def runs_by_end() -> tuple[Run, ...]:
    return tuple(sorted(read_runs(FIXTURE), key=lambda r: r.last_timestamp))


@functools.cache
def fitted() -> EtaModel:
    return EtaModel(random_state=0).fit([thinned(r) for r in runs_by_end()[:HISTORY]])


def cases() -> list[tuple[str, Run]]:
    """(label, running job): every 15th later run, cut at four progress points."""
    out = []
    for run in runs_by_end()[HISTORY::15]:
        n = len(run.epoch_times)
        for keep in sorted({1, max(1, n // 4), max(1, n // 2), max(1, n - 1)}):
            cut = Run(
                run_id=run.run_id,
                epochs_planned=run.epochs_planned,
                epoch_times=run.epoch_times[:keep],
                features=run.features,
                completed=None,
                namespace=run.namespace,
            )
            out.append((f"{run.run_id}@{keep}", cut))
    return out


PINNED: dict[str, tuple[float, float, float]] = {
    "mlperf-6578@1": (51.23291388424549, 798.0872512931749, 371449.7074506),
    "mlperf-6578@4": (16.208775805194172, 18.983786338285604, 29.929160112464334),
    "mlperf-6578@9": (41.04917448009819, 43.4122467143164, 49.28023606000494),
    "mlperf-6578@18": (1.028381309984578, 7.097577798505154, 26.986012138726014),
    "mlperf-8999@1": (28.307355634473236, 357.00219199489885, 10070.359170551721),
    "mlperf-8999@2": (46.69261785123284, 144.32947749144907, 230.8415049653255),
    "mlperf-8999@4": (37.11933002846532, 59.459258345206194, 164.06723767282534),
    "mlperf-8999@8": (7.241184673511231, 63.196346614589984, 514.3140777876526),
    "mlperf-9309@1": (1186.3179386296101, 10686.499763861662, 114584.97811511363),
    "mlperf-9309@5": (5023.741889536421, 5210.645494009486, 5948.430792824311),
    "mlperf-9309@10": (3344.561576619365, 3469.325823890859, 3961.688937459807),
    "mlperf-9309@20": (222.7908962373806, 222.93109672974748, 363.45204035029593),
    "mlperf-9249@1": (415.2720931438342, 3953.2265887904055, 1525406.1606659787),
    "mlperf-9249@5": (252.6547864835528, 326.4909476476513, 360.3211897978504),
    "mlperf-9249@10": (253.59329563995993, 296.29945162696777, 479.4201442547767),
    "mlperf-9249@20": (1.664373298724195, 9.55705297461265, 36.42662272753729),
    "mlperf-8905@1": (798.2207085026662, 7439.7994625859355, 6337869.576944716),
    "mlperf-8905@5": (1386.8449168623076, 1707.9690784019642, 1753.1639646384403),
    "mlperf-8905@10": (1199.8169254663205, 1276.8353756798308, 1598.013987063825),
    "mlperf-8905@19": (66.27431297647273, 67.9472956032587, 184.72153379475034),
    "mlperf-9355@1": (2380.8557777934584, 21437.311053308364, 229894.55052394816),
    "mlperf-9355@5": (7348.116407449646, 7620.460651636023, 8695.510343327023),
    "mlperf-9355@10": (4923.13375443624, 5105.310134457989, 5824.098683088251),
    "mlperf-9355@20": (524.0459566060899, 524.3301368345303, 808.0243768648741),
    "mlperf-9303@1": (253.1957244299786, 2301.668780434688, 30997.797836840982),
    "mlperf-9303@3": (283.4630391259955, 331.0721238715272, 350.77013670662),
    "mlperf-9303@7": (175.30074686815004, 185.31254418133753, 220.23015386706385),
    "mlperf-9303@14": (1.4239809901316476, 9.91522623656522, 39.08067112751632),
    "mlperf-8781@1": (1574.950378391626, 1711.352269149744, 2108.0237164052737),
    "mlperf-8781@5": (1396.0941561428795, 1468.548730343207, 1703.2393235214506),
    "mlperf-8781@10": (900.2869477273322, 968.2151400698995, 1197.1617375937205),
    "mlperf-8781@20": (9.589692649684538, 14.769941979012733, 33.13776946444377),
}

QUALITY: dict[float, tuple[float, float]] = {
    0.0: (0.0071611522703916245, 0.8232758620689655),
    0.05: (0.11931919303519957, 1.0),  # the first bin (calibration.FIRST): no other moved
    0.1: (0.0058514840160854495, 0.8011363636363636),
    0.25: (0.006032974983696457, 0.7869822485207101),
    0.5: (0.005404146481937463, 0.8202764976958525),
    0.75: (0.003098887009544137, 0.8232758620689655),
    0.9: (0.0047495888099456625, 0.811023622047244),
    0.95: (0.0034799150320844493, 0.8079470198675496),
    1.0: (0.0128753152774139, 0.8148148148148148),
}


@pytest.mark.parametrize(("label", "run"), cases(), ids=[label for label, _ in cases()])
def test_forecast_is_pinned(label: str, run: Run) -> None:
    f = fitted().predict(run, run.last_timestamp + 60.0)
    assert (f.p10, f.p50, f.p90) == pytest.approx(PINNED[label], rel=REL, abs=0)


def test_quality_is_pinned() -> None:
    quality = fitted().quality_
    assert quality.keys() == QUALITY.keys()
    for point, (err, cov) in QUALITY.items():
        got = quality[point]
        assert got[0] == pytest.approx(err, rel=REL, abs=0, nan_ok=True)
        assert got[1] == cov  # a share of moments: any change is a moment changing side
