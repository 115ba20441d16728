"""The base kernels of the TUMK-ELM paper."""

from ._linear import LinearKernel
from ._polynomial import PolynomialKernel
from ._rbf import RBFKernel


def paper_kernels():
    """The 15 base kernels of TUMK-ELM (Xiang et al. 2018): linear; polynomial of degree 2,
    3, 4 (coef0 = 1); Gaussian of width 1e-10, 1e-8, ..., 1e10."""
    return (
        [LinearKernel()]
        + [PolynomialKernel(degree=d, coef0=1.0) for d in (2, 3, 4)]
        + [RBFKernel(width=10.0**e) for e in range(-10, 11, 2)]
    )
