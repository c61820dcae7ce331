"""tritonconv: convolution-layer primitives written in Triton, drop-in for torch.nn.functional.

Importing the package first decides where kernels run (``_runtime``: compiled on CUDA, Triton's
interpreter on CPU when no GPU is visible); that must happen before any kernel is defined.
"""

from . import _runtime  # noqa: I001  (must come first: it sets up Triton's interpreter)
from . import nn
from .functional import (
    CONV_ALGOS,
    causal_conv1d,
    causal_conv1d_update,
    conv1d,
    conv2d,
    conv2d_workspace,
    conv3d,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
    crop,
    explain,
    fold,
    unfold,
)
from .geometry import TritonConvError
from .caches import clear_caches
from .nn import explain_model
from .choice import Choice, set_benchmark, tune
from .ops.conv_gemm import (
    DEFAULT_WORKSPACE_LIMIT,
    WorkspacePlan,
    get_workspace_limit,
    set_workspace_limit,
)
from .warmup import WarmupReport, warmup

INTERPRETER = _runtime.INTERPRETER

__all__ = [
    "CONV_ALGOS",
    "DEFAULT_WORKSPACE_LIMIT",
    "INTERPRETER",
    "Choice",
    "TritonConvError",
    "WarmupReport",
    "WorkspacePlan",
    "causal_conv1d",
    "causal_conv1d_update",
    "clear_caches",
    "conv1d",
    "conv2d",
    "conv2d_workspace",
    "conv3d",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "crop",
    "explain",
    "explain_model",
    "fold",
    "get_workspace_limit",
    "nn",
    "set_benchmark",
    "set_workspace_limit",
    "tune",
    "unfold",
    "warmup",
]
__version__ = "0.1.0"
