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
    "mlperf-6578@1": (54.79074978425719, 571.7924987922726, 16000.163970205971),
    "mlperf-6578@4": (16.212240214574273, 18.98378632805011, 29.900237097829212),
    "mlperf-6578@9": (41.04917448009819, 43.4122467143164, 49.28023606000494),
    "mlperf-6578@18": (1.028381309984578, 7.097577798505154, 26.986012138726014),
    "mlperf-8999@1": (28.307355634472245, 220.25363053625318, 1227.6852400421915),
    "mlperf-8999@2": (52.96214779091207, 142.54158253084594, 215.87091672225307),
    "mlperf-8999@4": (37.1104873550119, 59.439881167376484, 163.92528666683538),
    "mlperf-8999@8": (7.241184673511231, 63.196346614589984, 514.3140777876526),
    "mlperf-9309@1": (681.9766160787802, 5576.4374487213845, 17045.541562104463),
    "mlperf-9309@5": (5023.092904234738, 5210.645494009486, 5950.259319577169),
    "mlperf-9309@10": (3344.2293424251616, 3469.325823890859, 3962.476369097466),
    "mlperf-9309@20": (222.7908962373806, 222.93109672974748, 363.45204035029593),
    "mlperf-9249@1": (144.1426825405082, 911.7241739822792, 2376.2983430512204),
    "mlperf-9249@5": (257.3894086610674, 326.366622727131, 357.6288875418532),
    "mlperf-9249@10": (253.56434617102747, 296.28889252017007, 479.3085261933735),
    "mlperf-9249@20": (1.664373298724195, 9.55705297461265, 36.42662272753729),
    "mlperf-8905@1": (719.8290019892999, 5773.068894310821, 17444.878939659524),
    "mlperf-8905@5": (1390.3783825675052, 1707.969091788229, 1761.4207890510725),
    "mlperf-8905@10": (1199.7518624201214, 1276.8353756798308, 1597.8926755166754),
    "mlperf-8905@19": (66.27431297647273, 67.9472956032587, 184.72153379475034),
    "mlperf-9355@1": (1810.1076543687518, 14792.42895670994, 45125.14820224433),
    "mlperf-9355@5": (7347.309413609978, 7620.460651636023, 8697.580541129635),
    "mlperf-9355@10": (4922.51657024423, 5105.310134457989, 5825.8133505456635),
    "mlperf-9355@20": (524.0459566060899, 524.3301368345303, 808.0243768648741),
    "mlperf-9303@1": (206.72937973702176, 1804.931823937498, 6014.3135460840995),
    "mlperf-9303@3": (275.84282310927637, 331.3446643640691, 354.95960793775373),
    "mlperf-9303@7": (175.29394070460094, 185.31332768926518, 220.22490779923217),
    "mlperf-9303@14": (1.4239809901316476, 9.91522623656522, 39.08067112751632),
    "mlperf-8781@1": (1574.950378391626, 1711.352269149744, 1919.5382492583299),
    "mlperf-8781@5": (1331.7078879966941, 1468.5487543354561, 1834.1782565123497),
    "mlperf-8781@10": (900.2687962789678, 968.2151398874422, 1142.2087750197193),
    "mlperf-8781@20": (11.043890870086425, 14.752921850882073, 33.1259836446596),
}

QUALITY: dict[float, tuple[float, float]] = {
    0.0: (0.006843969087452399, 0.8193832599118943),
    0.05: (0.11931919303519957, 1.0),  # the first bin (calibration.FIRST): no other moved
    0.1: (0.0058514840160854495, 0.8068181818181819),
    0.25: (0.006032974983696457, 0.7988165680473374),
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
