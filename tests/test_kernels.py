"""The kernel plugin protocol: blocks, factors (explicit, Nystrom, random Fourier, closed
forms) and the closed-form reductions TUMK-ELM's scalable mode builds on them."""

import dask.array as da
import numpy as np
import pytest

import elmscale
from elmscale.algorithms._tumkelm_exact import exact_kspace_gram, exact_pass
from elmscale.algorithms._tumkelm_scalable import (
    factor_stats,
    kspace_gram,
    kspace_target,
    tumkelm_loss,
)
from elmscale.hidden import HiddenFeatures
from elmscale.kernels import (
    ConstantFactor,
    ExplicitFactor,
    FactorLayer,
    IdentityFactor,
    Kernel,
    LinearKernel,
    NystromFactor,
    PolynomialKernel,
    RandomFourierFactor,
    RBFKernel,
    paper_kernels,
)


@pytest.fixture
def points(rng):
    """80 points in 3-d, pairwise distances well above 1e-3 (no duplicates)."""
    return rng.uniform(-2, 2, size=(80, 3))


def _factor(kernel, X, m=None, method="nystrom", seed=0):
    m = X.shape[0] if m is None else m
    return kernel.factor(
        X,
        n_samples=X.shape[0],
        n_components=m,
        method=method,
        random_state=np.random.RandomState(seed),
    )


def test_registered_names():
    assert {"linear", "poly", "rbf"} <= set(elmscale.available("kernel"))
    assert elmscale.get("kernel", "gaussian") is RBFKernel
    assert elmscale.get("kernel", "polynomial") is PolynomialKernel


def test_paper_kernels():
    ks = paper_kernels()
    assert len(ks) == 15
    assert [k.degree for k in ks[1:4]] == [2, 3, 4]
    assert [k.width for k in ks[4:]] == [10.0**e for e in range(-10, 11, 2)]


@pytest.mark.parametrize(
    "kernel", [LinearKernel(), PolynomialKernel(2), PolynomialKernel(3, 0.5), RBFKernel(0.7)]
)
def test_diagonal_matches_block(kernel, points):
    np.testing.assert_allclose(kernel.diagonal(points), np.diag(kernel(points, points)), rtol=1e-12)


def test_rbf_extreme_widths_exact(points):
    # differences, not |x|^2 + |y|^2 - 2xy: the diagonal stays exactly 1 at width 1e-10
    np.testing.assert_array_equal(RBFKernel(1e-10)(points, points), np.eye(len(points)))
    np.testing.assert_array_equal(RBFKernel(1e10)(points, points), np.ones((80, 80)))


@pytest.mark.parametrize(
    "kernel, kind",
    [
        (LinearKernel(), "explicit"),
        (PolynomialKernel(2), "explicit"),
        (PolynomialKernel(4, 2.0), "explicit"),
        (PolynomialKernel(3, 0.0), "explicit"),
        (RBFKernel(1.0), "nystrom"),
        (RBFKernel(1e-10), "identity"),
        (RBFKernel(1e10), "constant"),
    ],
)
def test_factor_reproduces_kernel(kernel, kind, points):
    f = _factor(kernel, points)
    assert f.kind == kind
    K = kernel(points, points)
    np.testing.assert_allclose(f.dense(points), K, rtol=1e-9, atol=1e-9 * np.abs(K).max())
    np.testing.assert_allclose(
        f.diagonal(points), np.diag(K), rtol=1e-9, atol=1e-9 * np.abs(K).max()
    )


def test_polynomial_explicit_only_when_cheap(points):
    # C(3 + 4, 4) = 35 monomials: explicit with m >= 35, Nystrom below
    assert _factor(PolynomialKernel(4), points, m=35).kind == "explicit"
    assert _factor(PolynomialKernel(4), points, m=34).kind == "nystrom"


def test_nystrom_with_fewer_landmarks_is_close(rng):
    X = rng.normal(size=(400, 2))
    k = RBFKernel(2.0)
    f = _factor(k, X, m=100)
    assert f.n_components <= 100
    err = np.abs(f.dense(X) - k(X, X)).max()
    assert err < 2e-2  # a smooth 2-d kernel: fast spectral decay


def test_random_fourier_features(rng):
    X = rng.normal(size=(100, 2))
    k = RBFKernel(1.5)
    f = _factor(k, np.vstack([X, rng.normal(size=(100, 2))]), m=4000, method="rff")
    assert isinstance(f, RandomFourierFactor)
    assert np.abs(f.dense(X) - k(X, X)).max() < 0.1  # O(1/sqrt(m)) per entry


def test_third_party_kernel_defaults_to_nystrom(points):
    class Laplacian(Kernel):
        def __call__(self, X, Y):
            return np.exp(-np.abs(X[:, None, :] - Y[None, :, :]).sum(-1))

    k = Laplacian()
    f = _factor(k, points)
    assert isinstance(f, NystromFactor)
    np.testing.assert_allclose(f.dense(points), k(points, points), atol=1e-8)
    np.testing.assert_allclose(k.diagonal(points[:5]), np.ones(5))


def test_identity_threshold_counts_close_pairs(rng):
    # width 1e-2 on 200 points in 1-d spaced 1e-3 apart: far from the identity
    X = np.linspace(0, 0.2, 200)[:, None]
    assert _factor(RBFKernel(1e-2), X).kind == "nystrom"
    assert _factor(RBFKernel(1e-6), X).kind == "identity"


def _full_matrix(width, sample):
    """The sample's full Gaussian matrix K and its mean off-diagonal mass (distinct pairs)."""
    d2 = ((sample[:, None, :] - sample[None, :, :]) ** 2).sum(-1)
    K = np.exp(-d2 / (2.0 * width**2))
    return K, K[d2 > 0].sum() / (len(sample) * (len(sample) - 1))


def _kind_from_full_matrix(width, sample, n_samples):
    """The closed-form rule of RBFKernel.factor evaluated on the full exp matrix."""
    K, off = _full_matrix(width, sample)
    if (n_samples - 1) * off < RBFKernel.identity_tol:
        return "identity"
    if 1.0 - K.min() < RBFKernel.constant_tol:
        return "constant"
    return "other"


@pytest.mark.parametrize("duplicates", [False, True])
def test_rbf_closed_form_shortcuts_decide_as_the_full_matrix(rng, duplicates):
    """The identity / constant tests read only the extreme distances before exp of the
    whole sample matrix: every width of a fine grid gets the kind the full matrix gives,
    with exact duplicate rows too."""
    X = rng.uniform(-1, 1, size=(120, 4))
    if duplicates:
        X[60:] = X[:60]
    for e in np.arange(-10, 10.01, 0.25):
        width = 10.0**e
        for n_samples in (120, 10**6):
            f = RBFKernel(width).factor(
                X, n_samples=n_samples, n_components=40, random_state=np.random.RandomState(0)
            )
            want = _kind_from_full_matrix(width, X, n_samples)
            assert (f.kind if f.kind in ("identity", "constant") else "other") == want or (
                want == "other" and f.kind == "identity"
            ), (width, n_samples, f.kind, want)


def _factor_from_full_matrix(width, sample, n_samples, m):
    """RBFKernel.factor's whole rule on the full exp matrix (without the shortcuts):
    the identity / constant tests, then Nystrom and its held-out identity test."""
    kind = _kind_from_full_matrix(width, sample, n_samples)
    if kind != "other":
        return kind, None
    off = _full_matrix(width, sample)[1]
    f = NystromFactor(RBFKernel(width), sample[:m])
    if len(sample) > m + 1 and 1.0 - np.mean(f.diagonal(sample[m:])) > (n_samples - 1) * off:
        return "identity", None
    return "nystrom", f.weights


@pytest.mark.parametrize("duplicates", [False, True])
def test_rbf_factor_equals_the_full_matrix_rule(rng, duplicates):
    """The bounds that skip exp of the sample matrix (and the held-out check) where they
    cannot change the decision give the factor of the full rule: same kind, same weights,
    over a fine grid of widths that crosses every threshold."""
    X = rng.uniform(-1, 1, size=(300, 3))
    if duplicates:
        X[150:] = X[:150]
    cache = elmscale.kernels.DistanceCache()  # shared by every width, as build_factors does
    for e in np.arange(-4, 3.01, 0.125):
        width = 10.0**e
        for n_samples in (300, 10**4, 10**7):
            f = RBFKernel(width).factor(
                X,
                n_samples=n_samples,
                n_components=40,
                random_state=np.random.RandomState(0),
                distances=cache,
            )
            kind, weights = _factor_from_full_matrix(width, X, n_samples, 40)
            assert f.kind == kind, (width, n_samples, f.kind, kind)
            if weights is not None:
                np.testing.assert_array_equal(f.weights, weights)


def test_features_written_into_a_column_slice(points, rng):
    """``features(X, out=)`` fills a strided column slice of a wider buffer with exactly
    ``features(X)`` for every kind of factor, returns it, and leaves the other columns."""
    kernels = [
        LinearKernel(),
        PolynomialKernel(2),
        RBFKernel(1.0),
        RBFKernel(1e-10),
        RBFKernel(1e10),
    ]
    factors = [_factor(k, points, m=30) for k in kernels]
    factors.append(RandomFourierFactor(1.0, points.shape[1], 7, np.random.RandomState(0)))
    assert {f.kind for f in factors} == {"explicit", "nystrom", "identity", "constant", "rff"}
    for f in factors:
        buf = rng.standard_normal((points.shape[0], f.n_components + 5))
        before = buf.copy()
        out = f.features(points, out=buf[:, 2 : 2 + f.n_components])
        assert np.shares_memory(out, buf) or f.n_components == 0
        np.testing.assert_array_equal(out, f.features(points))
        np.testing.assert_array_equal(buf[:, :2], before[:, :2])
        np.testing.assert_array_equal(buf[:, 2 + f.n_components :], before[:, 2 + f.n_components :])


def test_exp_or_zero_is_exp_bit_for_bit(rng):
    from elmscale.kernels._distances import exp_or_zero as _exp_or_zero

    Z = -np.concatenate(
        [
            rng.uniform(0, 800, 5000),
            rng.uniform(740, 750, 5000),
            [0.0, 745.0, 745.13, 745.14, 746.0, 746.5, 1e300, np.inf],
        ]
    )
    np.testing.assert_array_equal(_exp_or_zero(Z.reshape(-1, 2).copy()), np.exp(Z).reshape(-1, 2))
    inside = Z[Z > -700][:100]  # no underflow: every entry goes through exp
    np.testing.assert_array_equal(_exp_or_zero(inside.copy()), np.exp(inside))
    X = rng.uniform(-1, 1, size=(50, 3))
    for width in (1e-3, 1e-2, 0.1, 1.0):
        np.testing.assert_array_equal(
            RBFKernel(width)(X, X[:20]),
            np.exp(((X[:, None] - X[None, :20]) ** 2).sum(-1) * (-0.5 / width**2)),
        )


def test_off_diagonal_mass_partial_sum_is_a_lower_bound(rng):
    from elmscale.kernels._distances import off_diagonal_mass as _off_diagonal_mass

    X = rng.uniform(-1, 1, size=(600, 2))  # 179,700 pairs: three chunks
    X[300:310] = X[:10]  # exact duplicates are left out
    i, j = np.triu_indices(len(X), k=1)
    d2 = ((X[i] - X[j]) ** 2).sum(-1)  # condensed, as pdist orders the pairs
    distinct = d2 > 0
    assert np.count_nonzero(~distinct) == 10
    full = np.exp(-d2[distinct] / 0.5).sum()
    np.testing.assert_allclose(_off_diagonal_mass(d2, distinct, 0.5, np.inf), full, rtol=1e-12)
    part = _off_diagonal_mass(d2, distinct, 0.5, 1.0)
    assert 1.0 <= part < 0.5 * full  # stopped after the first chunk
    # most entries underflow (skipped): the same sum as exp of all of them
    tiny = np.exp(-d2[distinct] / 1e-6).sum()
    assert np.mean(d2 > 746 * 1e-6) > 0.99 and tiny > 0
    np.testing.assert_allclose(_off_diagonal_mass(d2, distinct, 1e-6, np.inf), tiny, rtol=1e-12)


@pytest.mark.parametrize("form", ["distance", "value"])
def test_closed_forms_equal_dense_sums(form, points, rng):
    """Reductions of alpha I + Phi Phi^T (closed forms for K ~ I and K ~ 11^T, explicit
    features) equal the dense sums over all N^2 pairs, chunked over uneven row blocks."""
    kernels = [LinearKernel(), PolynomialKernel(2), RBFKernel(1e-10), RBFKernel(1e10)]
    factors = [_factor(k, points) for k in kernels]
    assert [f.kind for f in factors] == ["explicit", "explicit", "identity", "constant"]
    assert isinstance(factors[2], IdentityFactor) and isinstance(factors[3], ConstantFactor)
    assert isinstance(factors[0], ExplicitFactor)
    Xd = da.from_array(points, chunks=((30, 7, 43), (3,)))
    stats, _ = factor_stats(HiddenFeatures(Xd, FactorLayer(factors), cache=False))
    np.testing.assert_allclose(
        FactorLayer(factors).diagonals(points),
        np.column_stack([k.diagonal(points) for k in kernels]),
        rtol=1e-12,
    )
    ref = exact_kspace_gram(kernels, points, form)
    # the all-ones kernel has d = 0 exactly: its row of Z^T Z is a cancellation, so compare
    # it at rounding level of the largest entry
    np.testing.assert_allclose(
        kspace_gram(stats, form), ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max()
    )
    labels = rng.randint(0, 3, len(points))
    mu = rng.uniform(size=4)
    mu /= mu.sum()
    F = np.eye(3)[labels]
    Phi = np.hstack([f.features(points) for f in factors])
    A = np.column_stack([k.diagonal(points) for k in kernels])
    cs = {"E": Phi.T @ F, "sizes": F.sum(0), "SA": A.T @ F}
    ZtT, loss = exact_pass(kernels, points, labels, mu, form, 3)
    np.testing.assert_allclose(
        kspace_target(stats, cs, form), ZtT, rtol=1e-10, atol=1e-12 * np.abs(ZtT).max()
    )
    np.testing.assert_allclose(tumkelm_loss(stats, cs, mu), loss, rtol=1e-10)


# -- elmscale.testing.check_kernel ------------------------------------------------------------
def _gaussian(width):
    def dense(X, Y):
        return np.exp(-((X[:, None, :] - Y[None, :, :]) ** 2).sum(-1) / (2.0 * width**2))

    return dense


@pytest.mark.parametrize(
    "kernel, params, reference",
    [
        ("linear", None, lambda X, Y: X @ Y.T),
        ("poly", {"degree": 3, "coef0": 0.5}, lambda X, Y: (X @ Y.T + 0.5) ** 3),
        ("polynomial", {"degree": 2}, lambda X, Y: (X @ Y.T + 1.0) ** 2),
        ("rbf", {"width": 0.3}, _gaussian(0.3)),
        ("gaussian", {"width": 1e-10}, _gaussian(1e-10)),
        (RBFKernel, {"width": 1e10}, _gaussian(1e10)),
        (RBFKernel(1.0), None, _gaussian(1.0)),
    ],
    ids=["linear", "poly3", "poly2", "rbf", "rbf-identity", "rbf-constant", "instance"],
)
def test_check_kernel_accepts_the_builtin_kernels(kernel, params, reference):
    from elmscale.testing import check_kernel

    check_kernel(kernel, params=params, reference=reference)


class _Float32(LinearKernel):
    def __call__(self, X, Y):
        return super().__call__(X, Y).astype(np.float32)


class _Asymmetric(Kernel):
    def __call__(self, X, Y):
        return np.asarray(X, np.float64) @ (np.asarray(Y, np.float64) + 0.1).T


class _PerBlock(LinearKernel):
    """Normalised by the block's row count: depends on how the rows are cut."""

    def __call__(self, X, Y):
        return super().__call__(X, Y) / len(X)


class _WrongDiagonal(LinearKernel):
    def diagonal(self, X):
        return np.ones(len(X))


class _Indefinite(LinearKernel):
    def __call__(self, X, Y):
        return -super().__call__(X, Y)

    def diagonal(self, X):
        return -super().diagonal(X)


class _WrongFactor(LinearKernel):
    def factor(self, sample, **kwargs):
        return ExplicitFactor(lambda X: 2.0 * np.asarray(X, np.float64), sample.shape[1])


class _InPlace(LinearKernel):
    def __call__(self, X, Y):
        X *= 1.0 + 1e-3
        return super().__call__(X, Y)


class _StaleCache(RBFKernel):
    """Computes something else when given a distance cache."""

    def __call__(self, X, Y, *, distances=None):
        if distances is not None:
            return RBFKernel(2.0 * self.width)(X, Y)
        return super().__call__(X, Y)


class _Unpicklable(LinearKernel):
    def __init__(self):
        import threading

        self.lock = threading.Lock()


@pytest.mark.parametrize(
    "kernel, reference, message",
    [
        (_Float32(), None, "must be float64"),
        (_Asymmetric(), None, "is not symmetric"),
        (_PerBlock(), None, "is not row-wise"),
        (_WrongDiagonal(), None, r"diagonal\(X\) differs"),
        (_Indefinite(), None, "is not positive semi-definite"),
        (_WrongFactor(), None, "must represent K exactly"),
        (_InPlace(), None, "modified its input"),
        (_StaleCache(0.5), None, r"distances=cache\) differs"),
        (_Unpicklable(), None, "cannot be pickled"),
        (RBFKernel(1.0), _gaussian(2.0), "differs from the reference"),
    ],
    ids=lambda v: type(v).__name__.strip("_") if isinstance(v, Kernel) else None,
)
def test_check_kernel_reports_a_broken_kernel(kernel, reference, message):
    from elmscale.testing import check_kernel

    with pytest.raises(AssertionError, match=message):
        check_kernel(kernel, reference=reference)


def test_check_kernel_rejects_params_for_an_instance():
    from elmscale.testing import check_kernel

    with pytest.raises(TypeError, match="params is for a kernel class"):
        check_kernel(LinearKernel(), params={"degree": 2})


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_block_of_any_dtype_computes_its_distances_once(dtype, rng, monkeypatch):
    """The factor layer and the scalable embedding evaluate Gaussians of several widths on
    one block: a float32 block is cast once, so they share one distance computation, and
    give what the float64 block gives."""
    from elmscale.algorithms._tumkelm_scalable import _embed, build_factors
    from elmscale.kernels import _distances

    X = rng.uniform(size=(200, 4))
    widths = [RBFKernel(w) for w in (0.5, 2.0)]  # factored on one shared landmark sample
    factors = build_factors(widths, X, 200, 20, "nystrom", np.random.RandomState(0))
    assert all(f.kind == "nystrom" for f in factors)
    layer, folds = FactorLayer(factors), [rng.normal(size=(f.n_basis, 3)) for f in factors]
    block = X[:50].astype(dtype)
    calls = []
    real = _distances.sqdist
    monkeypatch.setattr(_distances, "sqdist", lambda *a: calls.append(1) or real(*a))
    H, U = layer(block), _embed(block, factors, folds)
    assert len(calls) == 2  # one for the layer, one for the embedding
    np.testing.assert_array_equal(H, layer(block.astype(np.float64)))
    np.testing.assert_array_equal(U, _embed(block.astype(np.float64), factors, folds))


def test_distance_cache_shares_and_bounds_entries(rng):
    """One cache: the same arrays give the same distance object (computed once), other
    arrays their own; only the last ``size`` pairs are kept; a view is one object."""
    from elmscale.kernels import DistanceCache

    X, Y = rng.uniform(size=(30, 3)), rng.uniform(size=(10, 3))
    cache = DistanceCache(size=2)
    d = cache.sqdist(X, Y)
    np.testing.assert_array_equal(d, ((X[:, None] - Y[None]) ** 2).sum(-1))
    assert cache.sqdist(X, Y) is d
    assert cache.sqdist(X.copy(), Y) is not d  # equal values, another array
    cache.sqdist(X)
    assert cache.sqdist(X, Y) is not d  # evicted after two newer pairs
    assert cache.view(X, 0, 5) is cache.view(X, 0, 5)
    np.testing.assert_array_equal(cache.view(X, 5, 30), X[5:])
    widths = [RBFKernel(w) for w in (0.5, 1.0, 2.0)]
    shared = DistanceCache()
    for k in widths:
        np.testing.assert_array_equal(k(X, Y, distances=shared), k(X, Y))
    assert len(shared._entries) == 1


def test_polynomials_of_several_degrees_share_one_product_and_square(rng):
    """Through a DistanceCache the polynomial kernels on the same arrays share X L^T + c
    and its square: the same numbers, bit for bit, as each computed alone, in new arrays
    (a caller that writes into one leaves the cache and the others alone)."""
    from elmscale.kernels import DistanceCache, PolynomialKernel

    X, L = rng.randn(300, 5), rng.randn(40, 5)
    cache = DistanceCache()
    kernels = [PolynomialKernel(degree=d, coef0=1.0) for d in (1, 2, 3, 4, 5)]
    shared = [k(X, L, distances=cache) for k in kernels]
    for k, K in zip(kernels, shared, strict=True):
        np.testing.assert_array_equal(K, k(X, L))
        np.testing.assert_allclose(K, (X @ L.T + 1.0) ** k.degree, rtol=1e-12)
    assert len(cache._products) == 1 and len(cache._squares) == 1
    shared[1][:] = 0.0
    np.testing.assert_array_equal(kernels[2](X, L, distances=cache), kernels[2](X, L))
    other = PolynomialKernel(degree=2, coef0=0.5)(X, L, distances=cache)
    np.testing.assert_array_equal(other, PolynomialKernel(degree=2, coef0=0.5)(X, L))


def test_a_pickled_factor_layer_computes_its_distances_once_per_block(monkeypatch):
    """A factor layer sent to a worker comes back with its landmarks as views of the pickle's
    buffer: its Gaussians still share one distance matrix per block, and its polynomials one
    product, with the numbers of the layer that was never pickled."""
    import pickle

    from sklearn.datasets import make_blobs

    from elmscale.kernels import _distances

    X, _ = make_blobs(1500, n_features=20, centers=3, random_state=0)
    model = elmscale.TUMKELM(3, mode="scalable", random_state=0).fit(X)
    layer = model.hidden_layer_
    sent = pickle.loads(pickle.dumps(layer))
    kinds = [type(getattr(f, "kernel", None)).__name__ for f in sent.factors if f.kind == "nystrom"]
    assert kinds.count("RBFKernel") >= 2 and kinds.count("PolynomialKernel") >= 2, kinds
    calls = {"sqdist": 0, "products": 0}
    sqdist, products = _distances.sqdist, _distances.DistanceCache.products

    def counted_sqdist(*args):
        calls["sqdist"] += 1
        return sqdist(*args)

    def counted_products(self, X, Y, shift=0.0):
        calls["products"] += not any(a is X and b is Y for a, b, _, _ in self._products)
        return products(self, X, Y, shift)

    monkeypatch.setattr(_distances, "sqdist", counted_sqdist)
    monkeypatch.setattr(_distances.DistanceCache, "products", counted_products)
    block = X[:400].astype(np.float32)
    H = sent(block)
    assert calls == {"sqdist": 1, "products": 1}
    np.testing.assert_array_equal(H, layer(block))
