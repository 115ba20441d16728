from ..hookspecs import hookimpl
from ..kernels import LinearKernel, PolynomialKernel, RBFKernel


@hookimpl
def register_kernels(register):
    # Each kernel evaluates blocks (exact mode) and factors itself for the scalable mode:
    # explicit features, Nystrom, random Fourier features, or a closed form (see
    # ``elmscale.kernels``).
    register("linear", LinearKernel, description="x . y (explicit features)")
    register(
        "poly",
        PolynomialKernel,
        aliases=("polynomial",),
        description="(x . y + c)^d (explicit monomials when few, else Nystrom)",
    )
    register(
        "rbf",
        RBFKernel,
        aliases=("gaussian",),
        description="exp(-||x - y||^2 / 2w^2) (Nystrom or RFF; closed form K ~ I or 11^T "
        "for extreme widths)",
    )
