"""The built-in activations against their definitions in float64 and float32."""

import warnings

import numpy as np
import pytest

from elmscale.hidden._activations import SLAB, sigmoid


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", [(3, 5), (2 * SLAB + 7,), (700, 300)])
def test_sigmoid_is_the_logistic_function_to_rounding(dtype, shape):
    z = np.random.RandomState(0).standard_normal(shape) * 30
    z.flat[:4] = [-1e4, -100.0, 0.0, 1e4]  # exp(-z) overflows for the first: no warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = sigmoid(z.astype(dtype))
    with np.errstate(over="ignore"):
        exact = 1.0 / (1.0 + np.exp(-z.astype(dtype).astype(np.float64)))
    assert got.dtype == dtype
    # relative accuracy, also where the value is tiny (0.5 tanh(z/2) + 0.5 loses it there)
    rtol = 1e-14 if dtype == np.float64 else 1e-6
    normal = exact > 1e4 * np.finfo(dtype).tiny
    np.testing.assert_allclose(got[normal], exact[normal], rtol=rtol)
    assert got.flat[0] == 0.0 and got.flat[2] == 0.5 and got.flat[3] == 1.0


def test_sigmoid_works_in_place_on_views():
    z = np.linspace(-5, 5, 60).reshape(6, 10)
    view = z[:, ::2]  # not contiguous
    out = sigmoid(view)
    assert out is view
    start = np.linspace(-5, 5, 60).reshape(6, 10)
    np.testing.assert_allclose(z[:, ::2], 1 / (1 + np.exp(-start[:, ::2])), rtol=1e-15)
    np.testing.assert_array_equal(z[:, 1::2], start[:, 1::2])
