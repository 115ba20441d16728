from ..hookspecs import hookimpl
from ..kernels import LinearKernel, PolynomialKernel, RBFKernel


@hookimpl
def register_kernels(register):
    register("linear", LinearKernel, description="x . y")
    register("poly", PolynomialKernel, aliases=("polynomial",), description="(x . y + c)^d")
    register("rbf", RBFKernel, aliases=("gaussian",), description="exp(-||x - y||^2 / 2w^2)")
