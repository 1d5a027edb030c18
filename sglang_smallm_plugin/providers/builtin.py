"""pluggy hook implementations that register the built-in providers."""

from .. import envs
from ..hookspecs import hookimpl
from .compiled import CompiledMoeProvider, CompiledSortProvider
from .reference import ReferenceMoeProvider, ReferenceSortProvider


@hookimpl
def register_moe_kernels(register):
    register(CompiledMoeProvider())
    register(ReferenceMoeProvider())
    if envs.EMULATE.enabled():
        from .emulated import EmulatedMoeProvider

        register(EmulatedMoeProvider())


@hookimpl
def register_sort_kernels(register):
    register(CompiledSortProvider())
    register(ReferenceSortProvider())
    if envs.EMULATE.enabled():
        from .emulated import EmulatedSortProvider

        register(EmulatedSortProvider())
