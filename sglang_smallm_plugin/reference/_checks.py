"""Input checks shared by the references: clear ValueErrors instead of wrong answers."""

import torch


def require(cond: bool, msg: str) -> None:
    if not cond:
        raise ValueError(msg)


def require_tensor(t, name: str, *, dtypes=None, dim=None, contiguous=False) -> None:
    require(isinstance(t, torch.Tensor), f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if dtypes is not None:
        dtypes = tuple(dtypes)
        require(t.dtype in dtypes, f"{name} must have dtype in {[str(d) for d in dtypes]}, got {t.dtype}")
    if dim is not None:
        require(t.dim() == dim, f"{name} must be {dim}-D, got shape {tuple(t.shape)}")
    if contiguous:
        require(t.is_contiguous(), f"{name} must be contiguous (got strides {t.stride()})")


BYTE_DTYPES = (torch.uint8, torch.int8, torch.float8_e4m3fn, torch.float8_e4m3fnuz) + (
    (torch.float4_e2m1fn_x2,) if hasattr(torch, "float4_e2m1fn_x2") else ()
)
