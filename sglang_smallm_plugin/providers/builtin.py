"""pluggy hook implementations that register the built-in providers."""

from ..hookspecs import hookimpl
from .compiled import CompiledMoeProvider, CompiledSortProvider
from .reference import ReferenceMoeProvider, ReferenceSortProvider


@hookimpl
def register_moe_kernels(register):
    register(CompiledMoeProvider())
    register(ReferenceMoeProvider())


@hookimpl
def register_sort_kernels(register):
    register(CompiledSortProvider())
    register(ReferenceSortProvider())
