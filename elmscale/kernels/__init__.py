"""Kernels for kernel ELMs and multiple-kernel clustering (TUMK-ELM), as plugins.

A kernel plugin is a class implementing :class:`Kernel`. It declares two things:

**How to evaluate a block** (exact mode): ``kernel(X, Y)`` returns the dense block
``K(X, Y)`` for NumPy blocks, and ``kernel.diagonal(X)`` the values ``K(x_i, x_i)``.

**How to factor it** (scalable mode): ``kernel.factor(sample, n_samples=N, n_components=m,
method=..., random_state=...)`` returns a :class:`KernelFactor`, a small picklable object
standing for the N x N matrix

    K  ~  alpha I  +  Phi Phi^T,        Phi = basis(X) @ weights   (N x m)

``alpha`` is a closed-form multiple of the identity and ``Phi`` a low-rank factor whose rows
are computed from the rows of X alone, block by block, on the workers. Every reduction the
scalable TUMK-ELM needs (sums of products of two kernels, same-cluster sums, diagonals,
leading eigenvectors of a weighted sum) has a closed form in ``alpha`` and a small Gram of the
``Phi``'s, so nothing N x N is ever formed. The built-in factors:

============================ ====================================== ==========================
factor                       K is represented as                    used for
============================ ====================================== ==========================
:class:`ExplicitFactor`      Phi = phi(X), exact                    linear; polynomial when
                                                                    C(d + degree, degree) <= m
:class:`NystromFactor`       Phi = K(X, L) U S^-1/2 (landmarks L)   default otherwise
:class:`RandomFourierFactor` Phi = sqrt(2/m) cos(X Omega + b)       Gaussian, ``method="rff"``
:class:`IdentityFactor`      alpha I (no Phi), closed form          Gaussian so narrow that
                                                                    K ~ I
:class:`ConstantFactor`      c 1 1^T (Phi = sqrt(c) 1), closed form Gaussian so wide that
                                                                    K ~ 1 1^T
============================ ====================================== ==========================

A third-party kernel (a string or histogram kernel, say) only has to implement ``__call__``:
the default :meth:`Kernel.factor` is Nystrom on the landmark sample, which needs nothing else.
It may override ``factor`` to return an explicit feature map or a closed form.
``elmscale.testing.check_kernel`` checks a kernel against dense NumPy computations.

Gaussians of several widths evaluated on the same arrays share their squared distances,
and polynomials of several degrees their products ``X Y^T + c`` and squares, through a
:class:`DistanceCache` that the caller creates and passes as ``distances=`` (kernels that
accept it declare ``shares_distances = True``).

``sample`` is a NumPy array of rows of X drawn uniformly at random by the caller (the
landmarks); ``n_samples`` is the size of the full data, which a kernel may use to judge
whether a closed form is accurate enough (see :meth:`RBFKernel.factor`).
"""

from ._base import Kernel, kernel_factor
from ._distances import DistanceCache
from ._factors import (
    ConstantFactor,
    ExplicitFactor,
    IdentityFactor,
    KernelFactor,
    NystromFactor,
    RandomFourierFactor,
    factor_basis,
    kernel_block,
)
from ._layer import FactorLayer
from ._linear import LinearKernel
from ._paper import paper_kernels
from ._polynomial import PolynomialKernel
from ._rbf import RBFKernel

__all__ = [
    "ConstantFactor",
    "DistanceCache",
    "ExplicitFactor",
    "FactorLayer",
    "IdentityFactor",
    "Kernel",
    "KernelFactor",
    "LinearKernel",
    "NystromFactor",
    "PolynomialKernel",
    "RBFKernel",
    "RandomFourierFactor",
    "factor_basis",
    "kernel_block",
    "kernel_factor",
    "paper_kernels",
]
