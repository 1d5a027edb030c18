"""Whether SGLang's Triton MoE fallback will load a configuration of the user's own (`SGLANG_MOE_CONFIG_DIR`).

The H200 token caps were measured against SGLang's Triton path with the configurations SGLang ships (README,
Known limitations). SGLang looks for `<dir>/configs/triton_<version>/E=<E>,N=<N>,device_name=<GPU>,
dtype=fp8_w8a8,block_shape=[128, 128].json` (and the same name in other versions' folders), `<dir>` being
`SGLANG_MOE_CONFIG_DIR` where set, else its own package folder. A file for the layer's shape under a folder
the user set makes the fallback faster than what the caps were measured against, from about 20 tokens: the
runner says so once per shape, with the fix (`SGLANG_SMALLM_MAX_TOKENS`)."""

import os

FP8_BLOCK_TAIL = ",dtype=fp8_w8a8,block_shape=[128, 128].json"


def user_fp8_configs(num_experts: int, inter: int, environ=None) -> list:
    """Paths of FP8 128x128 block-scale Triton configurations for (E, N = I) under SGLANG_MOE_CONFIG_DIR's
    `configs/triton_*` folders, any device name; [] where it is unset or holds none."""
    root = (os.environ if environ is None else environ).get("SGLANG_MOE_CONFIG_DIR")
    if not root:
        return []
    base = os.path.join(root, "configs")
    head = f"E={num_experts},N={inter},device_name="
    try:
        versions = sorted(d for d in os.listdir(base) if d.startswith("triton_"))
    except OSError:
        return []
    found = []
    for v in versions:
        try:
            names = sorted(os.listdir(os.path.join(base, v)))
        except OSError:
            continue
        found += [os.path.join(base, v, n) for n in names if n.startswith(head) and n.endswith(FP8_BLOCK_TAIL)]
    return found


def tuned_fallback_note(num_experts: int, inter: int, found: list, max_tokens_set: bool) -> str:
    """The startup warning for a layer whose Triton fallback loads a user configuration (`found`, from
    user_fp8_configs), or "" where there is none or SGLANG_SMALLM_MAX_TOKENS is set."""
    if not found or max_tokens_set:
        return ""
    return (f"sglang-smallm: SGLang's Triton fallback for E={num_experts} N={inter} loads {found[0]} "
            f"(SGLANG_MOE_CONFIG_DIR); the token caps were measured against the configurations SGLang ships, "
            f"and beside a tuned one the kernel was faster on the H200 only up to about 19 tokens at Qwen3.5 TP4 "
            f"and 24 at TP8. Fix: set SGLANG_SMALLM_MAX_TOKENS to the count where your configuration overtakes "
            f"the kernel (`sglang-smallm bench` with its fallback column times both with this configuration)")
