"""device-fit's speed model against published llama.cpp measurements (issue 30): the default efficiencies
are the fit of benchmarks/calibrate_devicefit_speed.py, the points kept out of that fit are predicted
within the goals (decode 20% mean and 40% worst, prompt 35% mean), and calibrating on some of one host's
runs improves the prediction of its other runs."""

import sys
from pathlib import Path

import pytest

from moetools.devicefit.speed import SpeedSettings
from moetools.devicefit.speed import calibrate as cal

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import calibrate_devicefit_speed as script  # noqa: E402
import published_speeds as ps  # noqa: E402


@pytest.fixture(scope="module")
def published():
    points = ps.load_points()
    cases, skipped = ps.build_cases(points)
    train, test, held = script.split(points, cases)
    return points, cases, train, test


def test_every_point_is_used_or_skipped_with_a_reason(published):
    points, cases, _, _ = published
    used = {case.label for case in cases}
    for point in points:
        assert point["id"] in used or ps.skip_reason(point), point["id"]
    assert len(cases) >= 18
    assert all(reason for _, _, reason in ps.exclusions(points))


def test_held_out_points_meet_the_goals(published):
    _, _, _, test = published
    stats = cal.summary(test)
    assert stats["tg"]["n"] >= 3 and stats["pp"]["n"] >= 3
    assert stats["tg"]["mean_abs"] <= 0.20 and stats["tg"]["worst_abs"] <= 0.40
    assert stats["pp"]["mean_abs"] <= 0.35


def test_the_defaults_are_the_fit(published):
    """Refitting from the defaults on the training points moves no efficiency by more than 5%: the
    defaults are what the fit gives, not hand-set figures."""
    _, _, train, _ = published
    defaults = SpeedSettings()
    fitted, _ = cal.fit(train, {name: getattr(defaults, name) for name in script.FITTED}, script.FITTED)
    for name, value in fitted.items():
        assert value == pytest.approx(getattr(defaults, name), rel=0.05), name
    assert not cal.check_fitted(fitted)


def test_calibrating_on_some_of_a_hosts_runs_improves_its_others(published):
    """One published host (RTX 5080 + Ryzen 9 9950X, three decode runs): calibrated on one run, the two
    others are predicted better than by the defaults."""
    _, cases, _, _ = published
    host = [case for case in cases if case.label.startswith("qwen35-35b-") and "5080-9950x" in case.label]
    assert len(host) == 3
    fit_on = [case for case in host if case.label == "qwen35-35b-q4km-5080-9950x-expscpu"]
    others = [case for case in host if case not in fit_on]
    defaults = SpeedSettings()
    fitted, _ = cal.fit(fit_on, {name: getattr(defaults, name) for name in cal.SEARCH_RANGE})
    before = cal.summary(others)["tg"]["mean_abs"]
    after = cal.summary(others, fitted)["tg"]["mean_abs"]
    assert after < before * 0.75, (before, after)


def test_a_fitted_efficiency_outside_its_range_is_reported_not_clamped():
    assert cal.check_fitted({"cpu_efficiency": 1.5, "gpu_efficiency": 0.7, "floor_s": 0.3}) == [("cpu_efficiency", 1.5)]
    assert cal.check_fitted({"pcie_efficiency": 0.0}) == [("pcie_efficiency", 0.0)]
