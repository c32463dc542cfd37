import pytest

from statkit.series import (argmax, clamp, cumulative_sum, differences, lerp, moving_average,
                            normalize, runs, weighted_mean)


def test_cumulative_sum():
    assert cumulative_sum([1, 2, 3, 4]) == [1, 3, 6, 10]


def test_moving_average():
    assert moving_average([1, 2, 3, 4, 5], 2) == [1.5, 2.5, 3.5, 4.5]
    assert moving_average([1, 2, 3], 3) == [2.0]


def test_moving_average_window_too_small():
    with pytest.raises(ValueError):
        moving_average([1, 2], 0)


def test_differences():
    assert differences([1, 4, 9, 16]) == [3, 5, 7]
    assert differences([1, 4, 9, 16], lag=2) == [8, 12]


def test_weighted_mean():
    assert weighted_mean([1, 3], [3, 1]) == 1.5


def test_weighted_mean_rejects_bad_weights():
    with pytest.raises(ValueError):
        weighted_mean([1, 2], [1])
    with pytest.raises(ValueError):
        weighted_mean([1, 2], [0, 0])


def test_normalize():
    assert normalize([2, 4, 6]) == [0.0, 0.5, 1.0]
    assert normalize([7, 7]) == [0.0, 0.0]


def test_clamp():
    assert clamp(5, 0, 10) == 5
    assert clamp(-1, 0, 10) == 0
    assert clamp(11, 0, 10) == 10
    assert clamp(10, 0, 10) == 10


def test_clamp_rejects_inverted_bounds():
    with pytest.raises(ValueError):
        clamp(1, 5, 2)


def test_lerp():
    assert lerp(10, 20, 0.25) == 12.5
    assert lerp(10, 20, 1) == 20


def test_argmax_first_of_ties():
    assert argmax([1, 5, 2, 5]) == 1
    assert argmax([9, 1]) == 0


def test_runs():
    assert runs([1, 1, 2, 2, 2, 1]) == [(1, 2), (2, 3), (1, 1)]
    assert runs([]) == []
