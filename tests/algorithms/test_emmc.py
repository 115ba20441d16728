"""EMMC: chunked iterations against a dense NumPy implementation, the balance constraint, the
exact distributed selection, input kinds and errors."""

import dask
import dask.array as da
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import make_blobs
from sklearn.metrics import adjusted_rand_score
from sklearn.utils._param_validation import InvalidParameterError

import elmscale
from elmscale.algorithms._emmc import EMMC, random_labels, select_smallest

from .._reference import hidden


# -- a dense NumPy implementation of Algorithm 1, written out independently ------------------
def _dense_emmc(H, init, k, C, balance, output, max_iter):
    N = H.shape[0]
    if output == "multi":
        T = np.eye(k)
    elif k == 2:
        T = np.array([[-1.0], [1.0]])
    else:
        T = np.arange(k)[:, None] + 0.5
    tol = balance * N if N % k == 0 else max(balance * N, 1.0)
    M = H.T @ H + np.eye(H.shape[1]) / C
    labels = np.array(init)
    sizes_per_iter, betas = [], []
    for _ in range(max_iter):
        beta = np.linalg.solve(M, H.T @ T[labels])
        F = H @ beta
        if output == "multi":
            new = F.argmax(1)
        elif k == 2:
            new = (F[:, 0] > 0).astype(int)
        else:
            new = np.clip(np.ceil(F[:, 0]) - 1, 0, k - 1).astype(int)
        sizes = np.bincount(new, minlength=k)
        while sizes.max() - sizes.min() > tol:
            p, q = sizes.argmax(), sizes.argmin()
            m = min(int(np.ceil((sizes[p] - sizes[q] - tol) / 2)), sizes[p] - sizes[q] - 1)
            idx = np.flatnonzero(new == p)
            if output == "multi":
                key = F[idx, p] - F[idx, q]
            else:
                key = F[idx, 0] if q < p else -F[idx, 0]
            new[idx[np.lexsort((idx, key))[:m]]] = q  # smallest key first, then row order
            sizes = np.bincount(new, minlength=k)
        sizes_per_iter.append(sizes)
        betas.append(beta)
        done = np.array_equal(new, labels)
        labels = new
        if done:
            break
    return labels, betas[-1], sizes_per_iter


def _data(k, n=240, seed=0, weights=None):
    if weights is None:
        X, y = make_blobs(n, n_features=4, centers=k, cluster_std=2.5, random_state=seed)
    else:
        sizes = (np.asarray(weights) * n).astype(int)
        X, y = make_blobs(sizes, n_features=4, cluster_std=1.5, random_state=seed)
    return X, y


CASES = [(2, "single"), (4, "single"), (4, "multi")]


@pytest.mark.parametrize("k, output", CASES)
@pytest.mark.parametrize("chunks", [(240,), (70, 90, 80), (17, 100, 123)])
def test_chunked_equals_dense_reference(k, output, chunks, global_seed):
    X, _ = _data(k, seed=global_seed)
    init = np.random.RandomState(global_seed).randint(k, size=len(X))
    kw = dict(
        n_hidden=30, C=0.5, balance=0.03, output=output, max_iter=15, random_state=global_seed
    )
    model = EMMC(k, init=init, select="last", **kw).fit(da.from_array(X, chunks=(chunks, 4)))
    H = hidden(X, model.hidden_layer_)
    labels, beta, sizes = _dense_emmc(H, init, k, 0.5, 0.03, output, 15)
    np.testing.assert_array_equal(model.labels_.compute(), labels)
    np.testing.assert_allclose(model.output_weights_, beta, rtol=1e-10, atol=1e-12)
    assert model.n_iter_ == len(sizes)
    for h, s in zip(model.history_, sizes, strict=True):
        np.testing.assert_array_equal(h["sizes"], s)


@pytest.mark.parametrize("k, output", [(2, "single"), (4, "multi")])
@pytest.mark.parametrize("chunks", [(240,), (17, 100, 123)])
def test_elm_kmeans_start_equals_dense_reference(k, output, chunks, monkeypatch, global_seed):
    # the whole path of the paper's start: the engine's k-means on the chunked H
    # (elmscale.cluster.kmeans)
    # against scikit-learn's KMeans on the dense H, with the seed the fit hands to k-means,
    # then the dense iterations from that start
    from sklearn.cluster import KMeans

    from elmscale.algorithms import _emmc

    seeds = []

    def spy(E, n_clusters, **kwargs):
        seeds.append(kwargs["random_state"])
        return elmscale.cluster.kmeans(E, n_clusters, **kwargs)

    monkeypatch.setattr(_emmc, "kmeans", spy)
    X, _ = _data(k, seed=global_seed)
    model = EMMC(
        k,
        n_hidden=30,
        C=0.5,
        balance=0.03,
        output=output,
        init="elm-kmeans",
        select="last",
        n_init=3,
        max_iter=15,
        random_state=global_seed,
    ).fit(da.from_array(X, chunks=(chunks, 4)))
    H = hidden(X, model.hidden_layer_)
    km_seed = np.random.RandomState(seeds[0]).randint(2**31 - 1)  # as kmeans draws it
    init = KMeans(k, n_init=3, random_state=km_seed).fit(H).labels_
    labels, beta, _ = _dense_emmc(H, init, k, 0.5, 0.03, output, 15)
    np.testing.assert_array_equal(model.labels_.compute(), labels)
    np.testing.assert_allclose(model.output_weights_, beta, rtol=1e-8, atol=1e-10)


@pytest.mark.parametrize("k, output", CASES)
def test_sweep_equals_separate_fits(k, output, global_seed):
    from elmscale import emmc_sweep

    X, _ = _data(k, seed=global_seed)
    Xd = da.from_array(X, chunks=((70, 90, 80), 4))
    Cs = [2.0**-6, 0.5, 8.0]
    base = EMMC(
        k, n_hidden=30, balance=0.03, output=output, n_init=2, max_iter=15, random_state=global_seed
    )
    fits = emmc_sweep(Xd, Cs, base)
    assert [C for C, _ in fits] == Cs
    for C, model in fits:
        ref = clone(base).set_params(C=C).fit(Xd)
        np.testing.assert_array_equal(model.labels_.compute(), ref.labels_.compute())
        np.testing.assert_array_equal(model.output_weights_, ref.output_weights_)
        assert model.n_iter_ == ref.n_iter_ and model.C == C
        np.testing.assert_array_equal(model.predict(X), ref.predict(X))


def test_sweep_errors(blobs):
    from elmscale import emmc_sweep

    X, _ = blobs
    with pytest.raises(InvalidParameterError, match="'C' parameter of EMMC"):
        emmc_sweep(X, [1.0, -1.0], n_clusters=3)
    with pytest.raises(TypeError, match="either an estimator or keyword"):
        emmc_sweep(X, [1.0], EMMC(3), n_hidden=10)


def test_mixed_hidden_layer_equals_its_formula(global_seed):
    # default layer: L - round(0.25 L) sigmoid nodes of the engine's draw, then Gaussian nodes
    # exp(-||x' - c||^2 / (w m)^2) with c rows of the scaled X and m their median distance
    from scipy.spatial.distance import cdist, pdist

    X, _ = _data(3, seed=global_seed)
    Xd = da.from_array(X, chunks=((70, 90, 80), 4))
    model = EMMC(3, n_hidden=31, rbf_width=0.7, max_iter=1, n_init=1, random_state=global_seed).fit(
        Xd
    )
    layer = model.hidden_layer_
    Xs = (X - X.mean(0)) / X.std(0)
    sig = layer.parts[0]
    centres = layer.parts[1].input_weights.T
    assert (sig.n_hidden, len(centres)) == (23, 8)
    # each centre is a distinct scaled row
    d = cdist(centres, Xs)
    assert np.allclose(d.min(axis=1), 0, atol=1e-9) and len(set(d.argmin(axis=1))) == 8
    m = np.median(pdist(centres))
    expected = np.hstack(
        [
            1 / (1 + np.exp(-(Xs @ sig.input_weights + sig.biases))),
            np.exp(-cdist(Xs, centres, "sqeuclidean") / (0.7 * m) ** 2),
        ]
    )
    np.testing.assert_allclose(hidden(X, layer), expected, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(
        model.decision_function(X), expected @ model.output_weights_, rtol=1e-8, atol=1e-10
    )


@pytest.mark.parametrize("fraction, kinds", [(0.0, {"additive"}), (1.0, {"rbf"})])
def test_rbf_fraction_extremes_give_one_kind_of_node(fraction, kinds, blobs):
    X, _ = blobs
    model = EMMC(3, n_hidden=20, rbf_fraction=fraction, max_iter=2, n_init=1, random_state=0).fit(X)
    assert {model.hidden_layer_.node} == kinds and model.hidden_layer_.n_hidden == 20


def test_gaussian_nodes_separate_clusters_that_differ_in_spread():
    # ringnorm in miniature: N(0, 4I) vs N(a, I), separable by the norm only; from k-means
    # on H, sigmoid nodes alone stay near chance, the default mixed layer finds the two
    # clusters (from k-means on X too, the default start)
    rng = np.random.RandomState(0)
    y = np.repeat([0, 1], 300)
    X = np.where(y[:, None] == 0, 2.0 * rng.randn(600, 20), rng.randn(600, 20) + 0.45)
    assert (
        adjusted_rand_score(y, EMMC(2, n_hidden=60, n_init=2, random_state=0).fit(X).labels_) > 0.7
    )
    kw = dict(n_hidden=60, n_init=2, init="elm-kmeans", select="last", random_state=0)
    assert adjusted_rand_score(y, EMMC(2, **kw).fit(X).labels_) > 0.7
    assert adjusted_rand_score(y, EMMC(2, rbf_fraction=0, **kw).fit(X).labels_) < 0.3


def test_ties_are_broken_by_row_order_whatever_the_chunking(global_seed):
    # 6 distinct points, each repeated: every score is tied 40 times; the balance step must
    # take the first rows of the tie in global order, as the dense reference does
    rng = np.random.RandomState(global_seed)
    X = np.repeat(rng.randn(6, 3), 40, axis=0)[rng.permutation(240)]
    init = np.zeros(240, dtype=int)
    init[:7] = 1
    kw = dict(n_hidden=10, C=1.0, balance=0.0, max_iter=5, select="last", random_state=global_seed)
    ref = None
    for chunks in [(240,), (50, 50, 140), (7, 233)]:
        model = EMMC(2, init=init, **kw).fit(da.from_array(X, chunks=(chunks, 3)))
        got = model.labels_.compute()
        if ref is None:
            H = hidden(X, model.hidden_layer_)
            ref = _dense_emmc(H, init, 2, 1.0, 0.0, "single", 5)[0]
        np.testing.assert_array_equal(got, ref)
        assert np.bincount(got).tolist() == [120, 120]


@pytest.mark.parametrize("run_rows, n_runs", [(60, 4), (55, 4), (1000, 1)])
def test_iterations_run_on_runs_of_chunks_with_the_same_labels(
    run_rows, n_runs, monkeypatch, global_seed
):
    """The scores and labels of the iterations are held in runs of X's chunks: each radix
    pass of a balance selection is one task per run, however finely X is chunked, and the
    labels equal the dense reference's (a run's target rows that are no multiple of a chunk's
    included: runs hold whole chunks)."""
    import elmscale.algorithms._emmc as emmc_module

    monkeypatch.setattr(emmc_module, "block_rows", lambda n_samples: run_rows)
    blocks_per_selection = []
    for name in ("select_smallest", "_gathered_step"):
        step = getattr(emmc_module, name)

        def counted(F_blocks, *args, step=step, **kwargs):
            blocks_per_selection.append(len(F_blocks))
            return step(F_blocks, *args, **kwargs)

        monkeypatch.setattr(emmc_module, name, counted)
    X, _ = _data(4, n=240, seed=global_seed, weights=[0.7, 0.1, 0.1, 0.1])
    init = np.zeros(240, dtype=int)
    kw = dict(n_hidden=20, C=1.0, balance=0.05, max_iter=4, select="last", random_state=global_seed)
    model = EMMC(4, init=init, output="multi", **kw).fit(da.from_array(X, chunks=(10, 4)))
    H = hidden(X, model.hidden_layer_)
    ref = _dense_emmc(H, init, 4, 1.0, 0.05, "multi", 4)[0]
    np.testing.assert_array_equal(model.labels_.compute(), ref)
    assert model.labels_.chunks == ((10,) * 24,)  # handed back in X's chunks
    assert blocks_per_selection and set(blocks_per_selection) == {n_runs}  # whole chunks each


@pytest.mark.parametrize("k, output", CASES)
def test_balance_holds_after_every_iteration_on_imbalanced_data(k, output, global_seed):
    weights = [0.7] + [0.3 / (k - 1)] * (k - 1)
    X, _ = _data(k, n=400, seed=global_seed, weights=weights)
    for balance in (0.0, 0.15):
        model = EMMC(
            k,
            n_hidden=40,
            balance=balance,
            output=output,
            init="kmeans",
            n_init=2,
            max_iter=10,
            select="last",
            random_state=global_seed,
        ).fit(X)
        tol = max(balance * len(X), 1.0 if len(X) % k else 0.0)
        assert model.n_iter_ >= 1
        for h in model.history_:
            assert h["sizes"].sum() == len(X)
            assert h["sizes"].max() - h["sizes"].min() <= tol
        np.testing.assert_array_equal(
            np.bincount(model.labels_, minlength=k), model.history_[-1]["sizes"]
        )


def _blocks(arr, chunks):
    out, start = [], 0
    for c in chunks:
        out.append(arr[start : start + c])
        start += c
    return out


@pytest.mark.parametrize("max_gather", [1, 50, 65536])
@pytest.mark.parametrize("kind", ["spread", "ties", "all_equal"])
def test_distributed_selection_is_exact(kind, max_gather, rng):
    N = 500
    if kind == "spread":
        f = rng.randn(N) * 10.0 ** rng.randint(-5, 5, size=N)
    elif kind == "ties":
        f = rng.randint(-3, 4, size=N).astype(float) * 0.1
        f[:10] = -0.0  # -0.0 and +0.0 are the same key
    else:
        f = np.full(N, 0.25)
    F = np.stack([f, -f], axis=1)
    labels = rng.randint(2, size=N)
    chunks = (120, 1, 200, 179)
    Fb, lb = _blocks(F, chunks), _blocks(labels, chunks)
    members = np.flatnonzero(labels == 1)
    for m in (1, 7, len(members) // 2, len(members)):
        u_star, quotas = select_smallest(Fb, lb, 1, 0, m, "single", max_gather=max_gather)
        from elmscale.algorithms._emmc import _apply_move

        moved = (
            np.concatenate(
                [
                    _apply_move(Fb[b], lb[b], 1, 0, "single", u_star, quotas[b])
                    for b in range(len(chunks))
                ]
            )
            != labels
        )
        key = f[members] + 0.0
        expected = members[np.lexsort((members, key))[:m]]
        np.testing.assert_array_equal(np.flatnonzero(moved), np.sort(expected))


@pytest.mark.parametrize("k, output", CASES)
def test_paths_find_separated_clusters(k, output):
    X, y = make_blobs(400, n_features=3, centers=k, cluster_std=0.6, random_state=3)
    model = EMMC(k, n_hidden=60, output=output, n_init=3, random_state=0).fit(X)
    ari = adjusted_rand_score(y, model.labels_)
    # the ordinal single-output code cannot always order 4 clusters along one axis
    assert ari > (0.6 if (output == "single" and k > 2) else 0.95)
    assert model.targets_.shape == (k, 1 if output == "single" else k)
    assert model.output_weights_.shape == (60, model.targets_.shape[1])


@pytest.mark.parametrize("init", ["elm-kmeans", "kmeans", "random"])
def test_numpy_and_dask_input_agree(init, blobs, blobs_dask):
    X, _ = blobs
    Xd, _ = blobs_dask
    kw = dict(n_hidden=40, init=init, output="multi", n_init=3, random_state=1)
    a = EMMC(3, **kw).fit(X)
    b = EMMC(3, **kw).fit(Xd)
    assert isinstance(a.labels_, np.ndarray) and isinstance(b.labels_, da.Array)
    np.testing.assert_array_equal(a.labels_, b.labels_.compute())
    assert isinstance(a.predict(X), np.ndarray) and isinstance(b.predict(Xd), da.Array)
    np.testing.assert_array_equal(a.predict(X), b.predict(Xd).compute())


def test_random_init_does_not_depend_on_chunking():
    lab = random_labels(1000, 5, seed=7)
    d = da.arange(1000, chunks=((300, 1, 699),))
    from elmscale.algorithms._emmc import _hash_labels

    np.testing.assert_array_equal(d.map_blocks(_hash_labels, 7, 5).compute(), lab)
    assert set(np.unique(lab)) == set(range(5))


def test_cache_does_not_change_the_result(blobs_dask):
    Xd, _ = blobs_dask
    kw = dict(n_hidden=30, n_init=2, random_state=0)
    a = EMMC(3, cache=True, **kw).fit(Xd)
    b = EMMC(3, cache=False, **kw).fit(Xd)
    np.testing.assert_array_equal(a.labels_.compute(), b.labels_.compute())
    np.testing.assert_allclose(a.output_weights_, b.output_weights_, rtol=1e-12)


def test_predict_is_the_relabelling_of_the_outputs(blobs):
    X, _ = blobs
    model = EMMC(3, n_hidden=30, output="multi", random_state=0).fit(X)
    np.testing.assert_array_equal(model.predict(X), model.decision_function(X).argmax(1))
    assert model.converged_ == (model.history_[-1]["n_changed"] == 0)


def test_registered_as_emmc():
    assert elmscale.get("algorithm", "emmc") is EMMC


@pytest.mark.distributed
def test_distributed_fit_matches_synchronous(dask_client, blobs_dask):
    Xd, _ = blobs_dask
    kw = dict(n_hidden=30, balance=0.03, n_init=2, random_state=0, cache=True)
    got = EMMC(3, output="multi", **kw).fit(Xd)
    with dask.config.set(scheduler="sync"):
        ref = EMMC(3, output="multi", **kw).fit(Xd)
        ref_labels = ref.labels_.compute()
    np.testing.assert_array_equal(got.labels_.compute(), ref_labels)
    np.testing.assert_allclose(got.output_weights_, ref.output_weights_, rtol=1e-10)


def _stop_at(n_changed, n_samples, tol):
    """The iterations a fit with ``tol`` runs, from the changes of a fit with tol=0."""
    return next(i + 1 for i, c in enumerate(n_changed) if c <= tol * n_samples)


def test_tol_stops_where_few_labels_change_with_the_labels_of_a_shorter_run(global_seed):
    """With ``tol`` the iterations end after the first that changes at most tol * N labels,
    and the fit is the one ``tol=0`` gives with ``max_iter`` at that iteration."""
    X, _ = make_blobs(600, n_features=6, centers=4, cluster_std=4.0, random_state=global_seed)
    params = dict(n_clusters=4, n_hidden=60, init="random", random_state=global_seed)
    full = EMMC(tol=0, **params).fit(X)
    changed = [h["n_changed"] for h in full.history_]
    small = sorted({c for c in changed if c > 0})
    if len(changed) < 3 or not small:
        pytest.skip(f"the iterations end too soon to stop earlier: {changed}")
    tol = small[0] / len(X)
    stop = _stop_at(changed, len(X), tol)
    assert stop < full.n_iter_
    early = EMMC(tol=tol, **params).fit(X)
    capped = EMMC(tol=0, max_iter=stop, **params).fit(X)
    assert early.n_iter_ == stop and early.converged_
    assert [h["n_changed"] for h in early.history_] == changed[:stop]
    np.testing.assert_array_equal(early.labels_, capped.labels_)
    np.testing.assert_array_equal(early.objectives_, capped.objectives_)
    np.testing.assert_array_equal(early.output_weights_, capped.output_weights_)


def test_n_iter_no_change_stops_with_the_fit_of_a_shorter_run(global_seed):
    """With ``n_iter_no_change`` the iterations end that many iterations after the lowest
    objective so far, and the fit is the one a run capped there gives."""
    patience = 1
    X, _ = make_blobs(600, n_features=6, centers=4, cluster_std=5.0, random_state=global_seed)
    params = dict(n_clusters=4, n_hidden=60, init="random", tol=0, random_state=global_seed)
    full = EMMC(n_iter_no_change=None, max_iter=30, **params).fit(X)
    obj = full.objectives_
    since = [i - int(np.argmin(obj[:i])) for i in range(1, full.n_iter_ + 1)]
    stops = [i + 1 for i, gap in enumerate(since) if gap >= patience]
    if not stops or stops[0] >= full.n_iter_:
        pytest.skip(f"the objective falls to the end: {obj}")
    early = EMMC(n_iter_no_change=patience, max_iter=30, **params).fit(X)
    capped = EMMC(n_iter_no_change=None, max_iter=stops[0], **params).fit(X)
    assert early.n_iter_ == stops[0] < full.n_iter_
    np.testing.assert_array_equal(early.labels_, capped.labels_)
    np.testing.assert_array_equal(early.objectives_, capped.objectives_)
    np.testing.assert_array_equal(early.objectives_, full.objectives_[: len(early.objectives_)])
    assert early.objective_ == obj[: stops[0] + 1].min()


def test_tol_below_one_label_is_the_papers_rule(blobs):
    """Below 1 / tol samples only an iteration that changes no label ends the fit."""
    a = EMMC(n_clusters=3, tol=0, random_state=0).fit(blobs[0])
    b = EMMC(n_clusters=3, tol=0.99 / len(blobs[0]), random_state=0).fit(blobs[0])
    assert a.n_iter_ == b.n_iter_
    np.testing.assert_array_equal(a.labels_, b.labels_)


# -- errors -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "params, match",
    [
        (dict(tol=1.0), r"The 'tol' parameter of EMMC must be a float in the range \[0.0, 1.0\)"),
        (dict(tol=-1e-4), r"The 'tol' parameter of EMMC must be a float in the range"),
        (dict(n_iter_no_change=0), r"The 'n_iter_no_change' parameter of EMMC must be an int"),
        (
            dict(balance=1.5),
            r"The 'balance' parameter of EMMC must be a float in the range "
            r"\[0.0, 1.0\] or a str among \{'auto'\}. Got 1.5",
        ),
        (
            dict(balance=-0.1),
            r"The 'balance' parameter of EMMC must be a float in the range "
            r"\[0.0, 1.0\] or a str among \{'auto'\}. Got -0.1",
        ),
        (
            dict(n_clusters=1),
            r"The 'n_clusters' parameter of EMMC must be an int in the range "
            r"\[2, inf\)",
        ),
        (dict(C=0), r"The 'C' parameter of EMMC must be a float in the range \(0.0, inf\)"),
        (dict(output="many"), r"The 'output' parameter of EMMC must be a str among"),
        (dict(init="kmeans++"), r"The 'init' parameter of EMMC must be"),
        (dict(activation="sigmod"), r"activation"),
        (
            dict(rbf_fraction=1.5),
            r"The 'rbf_fraction' parameter of EMMC must be a float in the "
            r"range \[0.0, 1.0\]. Got 1.5",
        ),
        (
            dict(rbf_width=0.0),
            r"The 'rbf_width' parameter of EMMC must be a float in the range "
            r"\(0.0, inf\)",
        ),
    ],
)
def test_bad_parameters(params, match, blobs):
    with pytest.raises(InvalidParameterError, match=match):
        EMMC(**params).fit(blobs[0])


def test_bad_input(blobs):
    X, _ = blobs
    bad = X.copy()
    bad[3, 1] = np.nan
    with pytest.raises(ValueError, match="X contains NaN or infinity"):
        EMMC(2, n_hidden=10).fit(bad)
    with pytest.raises(ValueError, match="X must be 2-D"):
        EMMC(2, n_hidden=10).fit(X[:, 0])
    with pytest.raises(ValueError, match="n_clusters=5 must be <= n_samples=4"):
        EMMC(5, n_hidden=10).fit(X[:4])
    with pytest.raises(
        ValueError,
        match=r"init as an array must hold n_samples=240 integer "
        r"labels in \[0, 1\]",
    ):
        EMMC(2, n_hidden=10, init=np.zeros(10, dtype=int)).fit(X)
    with pytest.raises(ValueError, match=r"labels in \[0, 1\]"):
        EMMC(2, n_hidden=10, init=np.full(240, 2)).fit(X)
    model = EMMC(2, n_hidden=10, random_state=0).fit(X)
    with pytest.raises(ValueError, match=r"X has 2 features, but .* 5"):
        model.predict(X[:, :2])


@pytest.mark.parametrize("k, expected", [(2, 1), (3, 3)])
def test_output_auto_is_single_for_two_clusters_else_multi(k, expected, blobs):
    X, _ = blobs
    model = EMMC(k, n_hidden=20, max_iter=2, random_state=0).fit(X)
    assert model.output == "auto" and model.targets_.shape == (k, expected)


def test_algorithm_protocol():
    from elmscale.testing import check_algorithm

    # check_dont_overwrite_parameters sets n_clusters=1, which EMMC rightly refuses
    check_algorithm(
        "emmc",
        params=dict(n_hidden=20, n_init=2, max_iter=5, random_state=0),
        skip_checks=("check_dont_overwrite_parameters",),
    )


def test_fit_on_dask_input_brings_back_no_n_sized_array(monkeypatch):
    # every dask.compute of a fit returns small things: Gram partials, counts, candidates
    seen, real = [], dask.base.compute

    def spy(*args, **kwargs):
        result = real(*args, **kwargs)

        def rows(obj):
            if isinstance(obj, dict):
                for v in obj.values():
                    rows(v)
            elif (
                isinstance(obj, tuple)
                and len(obj)
                and isinstance(obj[0], str)
                and obj[0] == "MT19937"
            ):
                return  # a RandomState's state, handed back by the task that drew a sample
            elif isinstance(obj, (tuple, list)):
                for v in obj:
                    rows(v)
            elif getattr(obj, "ndim", 0) > 0:
                seen.append(obj.shape[0])

        rows(result)
        return result

    monkeypatch.setattr(dask.base, "compute", spy)
    monkeypatch.setattr(dask, "compute", spy)
    X, _ = _data(3, n=3000, seed=0, weights=[0.5, 0.25, 0.25])
    # init_sample < N: the k-means sample is the only row-sized gather, and it is bounded
    from elmscale.algorithms import _emmc

    monkeypatch.setattr(_emmc, "kmeans", _small_sample(_emmc.kmeans))
    model = EMMC(3, n_hidden=30, balance=0.03, n_init=2, max_iter=3, random_state=0).fit(
        da.from_array(X, chunks=(1000, 4))
    )
    assert sum(h["n_moved"] for h in model.history_) > 0  # the selection ran
    # 500 rows of the k-means sample, 65536 radix counters of the selection; never N = 3000
    assert seen and all(n <= 500 or n == 1 << 16 for n in seen)


def _small_sample(func):
    def wrapped(*args, **kwargs):
        return func(*args, init_sample=500, **kwargs)

    return wrapped


# -- the objective and the choice of the returned labels ---------------------------------------
def _dense_objective(H, labels, T, C):
    """(min_beta ||H beta - T[labels]||^2 + ||beta||^2 / C) / N, by a dense solve."""
    t = T[np.asarray(labels)]
    beta = np.linalg.solve(H.T @ H + np.eye(H.shape[1]) / C, H.T @ t)
    return (np.sum((H @ beta - t) ** 2) + np.sum(beta**2) / C) / len(H)


@pytest.mark.parametrize("k, output", CASES)
def test_objective_is_the_ridge_fit_of_the_labels(k, output, global_seed):
    X, _ = _data(k, seed=global_seed)
    init = np.random.RandomState(global_seed).randint(k, size=len(X))
    model = EMMC(
        k, init=init, n_hidden=30, C=0.5, output=output, max_iter=4, random_state=global_seed
    ).fit(da.from_array(X, chunks=((70, 90, 80), 4)))
    H, T = hidden(X, model.hidden_layer_), model.targets_
    labels = model.labels_.compute()
    assert len(model.objectives_) == model.n_iter_ + 1  # the start, then each iteration's
    np.testing.assert_allclose(model.objectives_[0], _dense_objective(H, init, T, 0.5), rtol=1e-8)
    np.testing.assert_allclose(model.objective_, _dense_objective(H, labels, T, 0.5), rtol=1e-8)


def _kmeans_partition(X, k, seed):
    from sklearn.cluster import KMeans

    Xs = (X - X.mean(0)) / X.std(0)
    return KMeans(k, n_init=10, random_state=seed).fit(Xs).labels_


@pytest.mark.parametrize("k, output", CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_lowest_loss_is_never_worse_than_a_kmeans_start(k, output, seed, global_seed):
    # imbalanced clusters and a tight balance step: the iterations may raise the objective
    # above the start's; select="lowest_loss" then returns the start itself
    weights = [0.7] + [0.3 / (k - 1)] * (k - 1)
    X, _ = _data(k, n=400, seed=global_seed + seed, weights=weights)
    start = _kmeans_partition(X, k, seed)
    kw = dict(n_hidden=40, balance=0.03, output=output, max_iter=10, random_state=seed)
    model = EMMC(k, init=start, select="lowest_loss", **kw).fit(X)
    last = EMMC(k, init=start, **kw).fit(X)
    H = hidden(X, model.hidden_layer_)
    objective = _dense_objective(H, model.labels_, model.targets_, 1.0)
    np.testing.assert_allclose(model.objective_, objective, rtol=1e-8)
    np.testing.assert_allclose(model.objective_, np.min(last.objectives_), rtol=1e-12)
    assert model.objective_ <= _dense_objective(H, start, model.targets_, 1.0) * (1 + 1e-10)
    np.testing.assert_array_equal(model.objectives_, last.objectives_)
    if np.argmin(last.objectives_) == 0:
        np.testing.assert_array_equal(model.labels_, start)
    np.testing.assert_array_equal(np.bincount(model.labels_, minlength=k), model.cluster_sizes_)


def test_auto_tolerance_scales_with_the_mean_cluster_size():
    from elmscale.algorithms._emmc import auto_tolerance, balance_tolerance

    assert auto_tolerance(1000, 2) == balance_tolerance(0.15, 1000, 2) == 150  # the paper's
    # 38 clusters of 64: 0.15 * 2 * 64 = 19.2 where 0.15 n would allow 364 (empty clusters)
    assert auto_tolerance(38 * 64, 38) == pytest.approx(0.3 * 64)
    assert auto_tolerance(6, 3) == pytest.approx(0.6)
    assert auto_tolerance(7, 3) == 1.0  # n not a multiple of k: at least 1


@pytest.mark.parametrize("k, output", CASES)
def test_auto_balance_holds_after_every_iteration(k, output, global_seed):
    from elmscale.algorithms._emmc import auto_tolerance

    weights = [0.55] + [0.45 / (k - 1)] * (k - 1)
    X, _ = _data(k, n=400, seed=global_seed, weights=weights)
    model = EMMC(k, n_hidden=40, output=output, max_iter=10, random_state=global_seed).fit(X)
    assert model.balance == "auto" and model.select == "lowest_loss" and model.init == "kmeans"
    for h in model.history_:
        assert h["sizes"].max() - h["sizes"].min() <= auto_tolerance(len(X), k)


def test_a_cycle_of_labels_ends_the_iterations_with_the_same_result(monkeypatch):
    """Where the iterations return to an earlier partition (segment, seed 6: a 2-cycle from
    iteration 28) they stop there, with the labels, weights and objective of a run to
    ``max_iter`` (here without cycle detection: every partition key made unique, and no
    labels counted as those of two iterations before)."""
    from elmscale.algorithms import _emmc
    from tests.conftest import load_dataset

    X, y = load_dataset("segment")
    model = EMMC(n_clusters=7, random_state=6).fit(X)
    assert model.cycle_ == (28, 2) and model.n_iter_ == 30 and not model.converged_
    assert len(model.objectives_) == model.n_iter_ + 1
    assert model.objectives_[-1] == model.objectives_[28]
    counter = iter(range(1, 10**6))
    monkeypatch.setattr(_emmc, "_labels_key", lambda labels, start: np.uint64(next(counter)))
    settle = _emmc._settle_run

    def no_return(*args):
        n_changed, _, key, sums = settle(*args)
        return n_changed, np.int64(len(X)), key, sums

    monkeypatch.setattr(_emmc, "_settle_run", no_return)
    full = EMMC(n_clusters=7, random_state=6).fit(X)
    assert full.cycle_ is None and full.n_iter_ == 50
    np.testing.assert_array_equal(model.labels_, full.labels_)
    np.testing.assert_array_equal(model.output_weights_, full.output_weights_)
    assert model.objective_ == full.objective_
    np.testing.assert_array_equal(model.objectives_, full.objectives_[: model.n_iter_ + 1])


def test_a_cycle_of_two_within_tol_ends_the_iterations_with_the_fit_of_a_shorter_run():
    """Where the balance step moves the same points back and forth, the labels come back
    near those of two iterations before without repeating them; the iterations stop at the
    first that differs from them in at most tol * N labels, with the fit a run capped there
    gives (imbalanced blobs and a tight balance: a near cycle of two from iteration 4)."""
    sizes = (np.array([0.55, 0.15, 0.15, 0.15]) * 800).astype(int)
    X, _ = make_blobs(sizes, n_features=4, cluster_std=1.5, random_state=3)
    params = dict(n_clusters=4, n_hidden=40, balance=0.02, max_iter=40, random_state=3)
    full = EMMC(tol=0, **params).fit(X)
    changed = [h["n_changed"] for h in full.history_]
    returned = [h["n_returned"] for h in full.history_]
    assert returned[0] == -1
    # the first iteration nearer the labels of two before than any earlier one, and than
    # to the labels of the one before
    near = [
        i
        for i in range(1, len(changed))
        if 0 < returned[i] < min(changed[: i + 1])
        and min(returned[1:i], default=len(X)) > returned[i]
    ]
    assert near, (changed, returned)
    stop, tol = near[0] + 1, returned[near[0]] / len(X)
    early = EMMC(tol=tol, **params).fit(X)
    capped = EMMC(tol=0, **{**params, "max_iter": stop}).fit(X)
    assert early.n_iter_ == stop < full.n_iter_ and early.converged_ and early.cycle_ is None
    assert [h["n_returned"] for h in early.history_] == returned[:stop]
    np.testing.assert_array_equal(early.labels_, capped.labels_)
    np.testing.assert_array_equal(early.objectives_, capped.objectives_)
    np.testing.assert_array_equal(early.output_weights_, capped.output_weights_)
    # select="last" keeps Algorithm 1's rule: only the labels of the one before count
    last = EMMC(tol=tol, select="last", **params).fit(X)
    assert last.n_iter_ > stop


@pytest.mark.parametrize("cache", [False, True])
def test_an_iteration_reads_h_once_and_its_sums_equal_the_dense_ones(
    cache, monkeypatch, global_seed
):
    """Each iteration builds the hidden rows of every point once (the scores, the labels
    they pick and those labels' H^T F come from one pass) plus the rows of the points the
    balance step moves; the labels still equal the dense reference's, whose H^T F is
    recomputed from the balanced labels."""
    from elmscale.hidden._layer import RandomHiddenLayer

    built = []
    call = RandomHiddenLayer.__call__

    def counted(self, X):
        built.append(len(X))
        return call(self, X)

    monkeypatch.setattr(RandomHiddenLayer, "__call__", counted)
    X, _ = _data(4, n=300, seed=global_seed, weights=[0.7, 0.1, 0.1, 0.1])
    init = np.zeros(300, dtype=int)
    kw = dict(n_hidden=20, C=1.0, balance=0.05, max_iter=5, select="last", cache=cache)
    model = EMMC(4, init=init, output="multi", random_state=global_seed, **kw)
    model.fit(da.from_array(X, chunks=(60, 4)))
    n_built = sum(built)
    monkeypatch.setattr(RandomHiddenLayer, "__call__", call)
    ref = _dense_emmc(hidden(X, model.hidden_layer_), init, 4, 1.0, 0.05, "multi", 5)[0]
    np.testing.assert_array_equal(model.labels_.compute(), ref)
    moved = sum(h["n_moved"] for h in model.history_)
    assert moved > 0  # the balance step worked, and its correction is tested
    if cache:  # H is built once and kept
        assert n_built == 300
    else:  # the Gram pass, one pass per iteration, and the rows the balance step moved
        passes = 300 * (1 + model.n_iter_)
        assert passes < n_built <= passes + moved  # a point moved twice is built once


@pytest.mark.parametrize("cache", [False, True])
def test_scores_and_changed_label_sums_equal_the_dense_ones(cache, global_seed):
    from elmscale.algorithms._emmc import scores_and_label_sums
    from elmscale.gram import changed_label_sums
    from elmscale.hidden import HiddenFeatures, RandomHiddenLayer

    rng = np.random.RandomState(global_seed)
    X = rng.rand(250, 6)
    layer = RandomHiddenLayer.draw(6, 15, random_state=global_seed)
    features = HiddenFeatures(da.from_array(X, chunks=(70, 6)), layer, cache=cache)
    H = hidden(X, layer)
    beta = rng.randn(15, 3)
    F, picked, sums = scores_and_label_sums(features, beta, 3, "multi")
    F, picked, sums = dask.compute(F, picked, sums)
    np.testing.assert_allclose(F, H @ beta, rtol=1e-12)
    np.testing.assert_array_equal(picked, (H @ beta).argmax(axis=1))
    one_hot = np.eye(3)[picked]
    np.testing.assert_allclose(sums, H.T @ one_hot, rtol=1e-12, atol=1e-12)
    after = picked.copy()
    after[rng.choice(250, 30, replace=False)] = rng.randint(0, 3, 30)
    before_d, after_d = (da.from_array(a, chunks=100) for a in (picked, after))
    moved = changed_label_sums(features, before_d, after_d, 3, dask.delayed(sums)).compute()
    np.testing.assert_allclose(moved, H.T @ np.eye(3)[after], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("cache", [False, True])
def test_the_end_of_an_iteration_equals_the_dense_counts_key_and_sums(cache, global_seed):
    """settle_iteration, one task per run of chunks: the labels changed since the last
    iteration and since the one before, the partition's key, and the change of H^T F from
    the picked labels to the balanced ones, against NumPy on the whole arrays."""
    from elmscale.algorithms._emmc import _labels_key, settle_iteration
    from elmscale.hidden import HiddenFeatures, RandomHiddenLayer

    rng = np.random.RandomState(global_seed)
    X = rng.rand(250, 6)
    layer = RandomHiddenLayer.draw(6, 15, random_state=global_seed)
    features = HiddenFeatures(da.from_array(X, chunks=(40, 6)), layer, cache=cache)
    H = hidden(X, layer)
    runs = [[0, 1, 2], [3], [4, 5, 6]]
    rows = tuple(int(sum(features.chunks[b] for b in run)) for run in runs)
    earlier, before, picked = (rng.randint(0, 3, 250) for _ in range(3))
    after = picked.copy()
    after[rng.choice(250, 30, replace=False)] = rng.randint(0, 3, 30)
    arrays = [da.from_array(a, chunks=(rows,)) for a in (earlier, before, picked, after)]
    for given in (None, arrays[0]):
        n_changed, n_returned, key, sums = dask.compute(
            *settle_iteration(features, runs, arrays[1], given, *arrays[2:], 3)
        )
        assert n_changed == np.count_nonzero(before != after)
        assert n_returned == (-1 if given is None else np.count_nonzero(earlier != after))
        assert key == _labels_key(after, 0)
        np.testing.assert_allclose(
            sums, H.T @ (np.eye(3)[after] - np.eye(3)[picked]), rtol=1e-12, atol=1e-12
        )


def _sequential_balance(F, labels, sizes, tol, output):
    """The balance step one move at a time, densely: each move takes the members of p with
    the smallest keys, earlier rows first among equal keys."""
    from elmscale.algorithms._emmc import balance_moves, emmc_move_keys

    labels, sizes = labels.copy(), np.array(sizes)
    while (move := balance_moves(sizes, tol)) is not None:
        p, q, m = move
        rows = np.flatnonzero(labels == p)
        keys = emmc_move_keys(F[rows], p, q, output)
        labels[rows[np.lexsort((rows, keys))[:m]]] = q
        sizes[p] -= m
        sizes[q] += m
    return labels, sizes


@pytest.mark.parametrize("max_gather", [1, 200, 1 << 20])
@pytest.mark.parametrize("output, ties", [("multi", False), ("multi", True), ("single", True)])
def test_moves_chosen_together_equal_the_moves_one_at_a_time(max_gather, output, ties, rng):
    """A balance step's moves chosen from one gather (a large bound), in several (a small
    one) or each by a distributed selection (1) take the rows the moves one at a time
    take, ties to earlier rows, on data where a cluster gives to several others."""
    from elmscale.algorithms._emmc import balance_labels, plan_moves

    k, N = 5, 900
    F = rng.randn(N, k if output == "multi" else 1)
    if ties:
        F = np.round(F, 1)
    labels = rng.choice(k, N, p=[0.55, 0.25, 0.1, 0.05, 0.05])
    sizes = np.bincount(labels, minlength=k)
    moves = plan_moves(sizes, 20.0)
    assert len(moves) >= 4 and len({p for p, _, _ in moves}) < len(moves)  # p gives twice
    chunks = (100, 250, 50, 300, 200)
    got, got_sizes, n_moved = balance_labels(
        da.from_array(F, chunks=(chunks, -1)),
        da.from_array(labels, chunks=(chunks,)),
        sizes,
        20.0,
        output,
        max_gather=max_gather,
    )
    want, want_sizes = _sequential_balance(F, labels, sizes, 20.0, output)
    np.testing.assert_array_equal(got.compute(), want)
    np.testing.assert_array_equal(got_sizes, want_sizes)
    assert n_moved == sum(m for _, _, m in moves)


@pytest.mark.parametrize("distinct", [3, 1000])
def test_smallest_first_is_the_head_of_a_stable_sort(distinct, rng):
    """The members a move takes from a block: the m smallest keys, earlier rows first among
    equal keys, as a stable sort orders them, for every m and with many ties."""
    from elmscale.algorithms._emmc import smallest_first

    u = rng.randint(0, distinct, 200).astype(np.uint64)
    order = np.argsort(u, kind="stable")
    for m in range(0, 202):
        np.testing.assert_array_equal(smallest_first(u, m), order[:m])
