"""Everything that touches SGLang internals lives in this subpackage."""

from .entry import register

__all__ = ["register"]
