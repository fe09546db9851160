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
    "mlperf-6578@1": (88.0137591258966, 383.80453648002083, 1142.214514661463),
    "mlperf-6578@4": (15.641889448347996, 18.983791031275157, 25.84494697218612),
    "mlperf-6578@9": (41.049174480118104, 43.41224671429327, 49.28023605987042),
    "mlperf-6578@18": (1.028381309984578, 7.097577798505154, 26.986012138726014),
    "mlperf-8999@1": (29.219932733875073, 154.4881272906919, 504.01353809171655),
    "mlperf-8999@2": (67.93627265507509, 137.0564302012521, 168.48886164704493),
    "mlperf-8999@4": (36.517812701752575, 41.78112079477548, 55.035398186392726),
    "mlperf-8999@8": (7.241123250572245, 63.19567327364447, 514.3049311248924),
    "mlperf-9309@1": (1614.8097189272726, 5528.828330227956, 15240.339003756373),
    "mlperf-9309@5": (4995.099053920711, 5209.401396630888, 5648.269221514379),
    "mlperf-9309@10": (3325.680646745466, 3468.4397173317725, 3760.7006521084722),
    "mlperf-9309@20": (222.79089628015493, 222.93109672974748, 363.45204035029593),
    "mlperf-9249@1": (233.50610546565338, 892.610299958162, 2541.3012435197993),
    "mlperf-9249@5": (271.2687784402908, 325.61382400127195, 341.5433678588573),
    "mlperf-9249@10": (258.92278261964566, 281.5542384424566, 331.25379241478754),
    "mlperf-9249@20": (1.664373298724195, 9.55705297461265, 36.42662272753729),
    "mlperf-8905@1": (1674.4776539341838, 5728.363107325609, 15786.701832194158),
    "mlperf-8905@5": (1592.3652528174678, 1707.9688146405488, 1770.2641913394775),
    "mlperf-8905@10": (1197.570010165369, 1260.291309359916, 1390.098515908769),
    "mlperf-8905@19": (66.27431297647273, 67.9472956032587, 184.72153379475034),
    "mlperf-9355@1": (4372.621023725837, 14746.15703974076, 40477.847190312044),
    "mlperf-9355@5": (7305.207514329823, 7618.532321155977, 8260.321445169133),
    "mlperf-9355@10": (4914.752778944731, 5121.496712886932, 5544.386568669208),
    "mlperf-9355@20": (524.0459566927916, 524.3301368345303, 808.0243768648741),
    "mlperf-9303@1": (484.9406226835928, 1743.9244117213107, 4874.975315879773),
    "mlperf-9303@3": (272.43444988390326, 331.1191977676328, 348.0218525155762),
    "mlperf-9303@7": (174.39332475563688, 184.68596293191, 206.27100045426965),
    "mlperf-9303@14": (1.4239809901316476, 9.91522623656522, 39.08067112751632),
    "mlperf-8781@1": (1574.950378391626, 1711.352269149744, 1894.836730481105),
    "mlperf-8781@5": (1336.7962320342176, 1468.5487376217716, 1660.5356037154115),
    "mlperf-8781@10": (900.2092264394436, 969.2769275226335, 1067.5333347412989),
    "mlperf-8781@20": (9.443533719654283, 14.773944247835832, 33.14054244694416),
}

QUALITY: dict[float, tuple[float, float]] = {
    0.0: (0.006000627612023285, 0.8248847926267281),
    0.05: (0.11931919303519957, 0.9),  # the first bin (calibration.FIRST): no other moved
    0.1: (0.0058514840160854495, 0.8068181818181818),
    0.25: (0.006032974983696457, 0.7810650887573964),
    0.5: (0.005404146481937463, 0.815668202764977),
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
