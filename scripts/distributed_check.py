"""Multi-GPU training check: a tritonconv-converted ResNet trained under DistributedDataParallel
and under FSDP2 (``fully_shard``) gives the losses, gradients and parameters of one process
trained on the combined batch.

    torchrun --nproc_per_node=2 scripts/distributed_check.py                 # resnet50, DDP + FSDP2
    torchrun --nproc_per_node=2 scripts/distributed_check.py --model small --steps 2   # CPU smoke
    torchrun --nproc_per_node=2 scripts/distributed_check.py --benchmark --out $OUT

What it does, on every rank:

1. Builds the model from one seed (torchvision's ``resnet50(weights=None)`` when torchvision is
   importable, else a built-in ResNet-50 of the same architecture: bottleneck v1.5, 53
   convolutions, 25.6 M parameters; ``--model small``: a tiny ResNet-like net whose
   convolutions cover every algorithm of ``algo="auto"``), converts it with
   ``tritonconv.nn.convert`` (the number of convolutions swapped is printed), and broadcasts
   rank 0's parameters and buffers so every rank starts from exactly the same state.
2. Rank 0 alone trains the references on the combined batch: the truth, the same model with
   PyTorch's own convolutions in float64, and the converted model in fp32 in one process.
3. DDP (``--mode ddp``), then FSDP2 (``--mode fsdp2``; every residual block and the root
   sharded): each rank trains on its half of the same global batches.
4. Rank 0 measures each step's loss and gradients, and the final parameters, of every fp32
   run against the float64 run, prints a table, writes ``distributed_check.json`` to ``--out``
   (default ``$OUT`` if set) and every rank exits 1 on a failure.

fp32 means fp32: TF32 is off for cuBLAS, cuDNN and tritonconv's ``tl.dot``. The optimiser is SGD
with momentum and weight decay; the loss is the batch *mean* of the cross-entropy, so a rank's
gradient is the mean over its half and DDP's / FSDP2's averaging over ranks gives the mean over
the combined batch, which is what the reference computes.

**Normalisation.** Train-mode BatchNorm normalises each rank's half batch with that half's own
statistics, which are not the combined batch's, so DDP would not match one process even in exact
arithmetic. Of the ways out (SyncBatchNorm: CUDA only, and its own reduction; GroupNorm: a
different model; BatchNorm with fixed statistics) the default, ``--norm frozen_bn``, keeps
the model unchanged and uses fixed statistics: every BatchNorm's running mean and variance are
set once from a calibration batch (the same on every rank), then BatchNorm runs in eval mode:
a per-channel affine map whose weight and bias still train. Activations are normalised (a deep
ResNet without them grows large), and each sample's output depends on that sample alone, so
sharding the batch changes nothing but the order of floating-point sums. ``--norm groupnorm``
swaps BatchNorm for GroupNorm (also per sample) instead.

**Measure and tolerances.** A distributed run sums in another order than one process (half
batches, then the all-reduce or reduce-scatter), and a deep network amplifies that rounding: on
the H100 (session 14, ``benchmarks/probe_model_grads.py``) ResNet-50's fp32 parameter gradients
were 1.1e-1 (frozen BatchNorm) and 1.6e-2 (GroupNorm) from float64's with cuDNN's convolutions
and with ours alike, while cuDNN's batch-invariant kernels kept DDP within 2e-5 of one process.
So DDP against one process measures batch invariance, not correctness; each fp32 run is
measured against the float64 truth instead, as the models suite does:

* loss: ``|loss - loss64| / |loss64|``, the largest over the steps;
* gradients: for each parameter ``max|g - g64| / max|g64|``, the largest over all parameters and
  steps. Normalised by the tensor's largest gradient, not element by element: an element's
  relative error is meaningless where the gradient crosses 0. For the same reason a tensor's
  scale counts as at least 1e-3 of the largest gradient of any parameter (a bias followed by a
  normalisation that cancels it has a gradient of 0 in exact arithmetic);
* final parameters: the same measure.

A distributed run passes when each is at most ``--factor`` (2) times the one-process fp32
run's, or within ``--loss-rtol`` (1e-4), ``--grad-rtol`` (1e-3), ``--param-rtol`` (1e-4) where
that is larger. The distance to one process is printed beside, for information.

``--benchmark`` switches tritonconv to benchmark mode (``algo="auto"`` measures the algorithms
of every new call signature and records the winner on disk): every rank measures at once and
writes the one shared choice file (``$TRITONCONV_CACHE_DIR``, else a fresh folder under the
output folder); the file must afterwards be valid JSON holding the choices of every rank.
Ranks may then run different (equally correct) algorithms for a call; the comparison holds.

On a machine with two or more GPUs, rank 0 also runs, in a separate process (a failure there
cannot take the check down with it), tritonconv on ``cuda:1`` tensors while the current
device is ``cuda:0`` (``model.to("cuda:1")`` without ``torch.cuda.set_device``): the kernels
must run on the tensors' device and give F.conv2d's results. ``--no-cross-device`` skips it.

Backend: NCCL on CUDA; gloo on CPU, where tritonconv runs through Triton's interpreter (slow:
use ``--model small`` and the tiny default shapes; FSDP2 ran there too with torch 2.13, and
should it not, the error says so). With fewer GPUs than ranks, ranks share GPUs
(rank ``i`` on ``cuda:i % count``) over gloo, which PyTorch supports for DDP; FSDP2's
collectives on CUDA tensors may not be in gloo, so use ``--mode ddp`` there. Runs from source
(``src`` is put on the path).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
# On CPU tensors algo="auto" would run PyTorch's own convolution; the check is about
# tritonconv's kernels, so on CPU they run, in Triton's interpreter.
os.environ.setdefault("TRITONCONV_CPU_KERNELS", "1")

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.nn.functional as F  # noqa: E402
import triton  # noqa: E402
from torch import nn  # noqa: E402

import tritonconv  # noqa: E402  (before torchvision: it decides where the kernels run)
from tritonconv import choice  # noqa: E402

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # older torch: FSDP2 lived here
    try:
        from torch.distributed._composable.fsdp import fully_shard
    except ImportError:
        fully_shard = None

NUM_CLASSES = 10


# --------------------------------------------------------------------------------------------
# models
# --------------------------------------------------------------------------------------------


def norm_layer(kind: str):
    if kind == "groupnorm":
        # 32 groups as in the GroupNorm paper (every ResNet-50 width is a multiple of 64); the
        # small net's 16 and 32 channels get 4 groups
        return lambda channels: nn.GroupNorm(32 if channels >= 64 else 4, channels)
    return nn.BatchNorm2d


class Bottleneck(nn.Module):
    """ResNet-50's block (v1.5: the stride on the 3x3 convolution)."""

    def __init__(self, inplanes, planes, stride, norm):
        super().__init__()
        width, out = planes, planes * 4
        self.conv1 = nn.Conv2d(inplanes, width, 1, bias=False)
        self.bn1 = norm(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = norm(width)
        self.conv3 = nn.Conv2d(width, out, 1, bias=False)
        self.bn3 = norm(out)
        self.downsample = None
        if stride != 1 or inplanes != out:
            self.downsample = nn.Sequential(
                nn.Conv2d(inplanes, out, 1, stride, bias=False), norm(out)
            )

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class ResNet50(nn.Module):
    """ResNet-50 as torchvision builds it (used when torchvision is not installed)."""

    def __init__(self, norm, num_classes):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = norm(64)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, inplanes = [], 64
        for planes, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            stage = []
            for i in range(blocks):
                stage.append(Bottleneck(inplanes, planes, stride if i == 0 else 1, norm))
                inplanes = planes * 4
            layers.append(nn.Sequential(*stage))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(2048, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class SmallBlock(nn.Module):
    """A residual block whose convolutions cover every algorithm ``algo="auto"`` picks."""

    def __init__(self, cin, cout, stride, norm):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)  # implicit GEMM
        self.bn1 = norm(cout)
        self.dw = nn.Conv2d(cout, cout, 3, 1, 1, groups=cout, bias=False)  # depthwise
        self.bn2 = norm(cout)
        self.grouped = nn.Conv2d(cout, cout, 3, 1, 1, groups=cout // 4)  # direct (4 per group)
        self.bn3 = norm(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), norm(cout))

    def forward(self, x):
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.dw(y)))
        y = self.bn3(self.grouped(y))
        return F.relu(y + (x if self.downsample is None else self.downsample(x)))


class SmallNet(nn.Module):
    def __init__(self, norm, num_classes):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, 1, 1, bias=False)  # 3 input channels: im2col + GEMM
        self.bn = norm(16)
        self.block1 = SmallBlock(16, 16, 1, norm)
        self.block2 = SmallBlock(16, 32, 2, norm)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        x = F.relu(self.bn(self.stem(x)))
        x = self.block2(self.block1(x))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


BLOCKS = (Bottleneck, SmallBlock)


def build_model(name: str, norm: str) -> tuple[nn.Module, str]:
    """The unconverted model and a description of where it came from."""
    layer = norm_layer(norm)
    if name == "small":
        return SmallNet(layer, NUM_CLASSES), "built-in small ResNet"
    try:
        import torchvision
    except ImportError:
        return ResNet50(layer, NUM_CLASSES), "built-in ResNet-50 (torchvision not installed)"
    model = torchvision.models.resnet50(weights=None, norm_layer=layer, num_classes=NUM_CLASSES)
    return model, f"torchvision {torchvision.__version__} resnet50(weights=None)"


def is_block(module: nn.Module) -> bool:
    return isinstance(module, BLOCKS) or type(module).__name__ in ("Bottleneck", "BasicBlock")


def zero_init_residual(model: nn.Module) -> None:
    """Each residual block's last normalisation scaled to 0 (torchvision's
    ``zero_init_residual``): every block starts as its shortcut. Without it the random-init
    ResNet-50 is chaotic: its fp32 gradients were 1e-2..1e-1 from float64's (cuDNN's as ours)
    and one SGD step at lr 0.005 took the loss from 2.3 to 77 (session 14, on 2 H100s)."""
    for block in filter(is_block, model.modules()):
        last = getattr(block, "bn3", None) or block.bn2
        nn.init.zeros_(last.weight)


def freeze_batchnorm(model: nn.Module) -> None:
    """BatchNorm in eval mode (fixed statistics) inside a model that is otherwise training."""
    for m in model.modules():
        if isinstance(m, nn.modules.batchnorm._BatchNorm):
            m.eval()


def calibrate(model: nn.Module, x: torch.Tensor) -> None:
    """Set every BatchNorm's running statistics to those of ``x`` (one forward, train mode)."""
    bns = [m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative average: after one batch, that batch's statistics
    with torch.no_grad():
        model.train()(x)
    for m in bns:
        m.momentum = 0.1


def count_converted(model: nn.Module) -> int:
    return sum(isinstance(m, tritonconv.nn._Converted) for m in model.modules())


# --------------------------------------------------------------------------------------------
# data, training and comparison
# --------------------------------------------------------------------------------------------


def global_batch(step: int, args, device, dtype=torch.float32) -> tuple[torch.Tensor, torch.Tensor]:
    """The combined batch of ``step``: the same on every rank."""
    g = torch.Generator().manual_seed(1000 + step)
    x = torch.randn(args.batch, 3, args.size, args.size, generator=g)
    y = torch.randint(0, NUM_CLASSES, (args.batch,), generator=g)
    return x.to(device, dtype), y.to(device)


def local_part(t: torch.Tensor, rank: int, world: int) -> torch.Tensor:
    return t.chunk(world)[rank]


def plain(t: torch.Tensor) -> torch.Tensor:
    """A full, ordinary tensor (FSDP2's sharded DTensors are gathered: a collective)."""
    if hasattr(t, "full_tensor"):
        t = t.full_tensor()
    return t.detach().clone()


def rel_error(a: torch.Tensor, ref: torch.Tensor, floor: float = 0.0) -> float:
    """``max|a - ref| / max(max|ref|, floor)`` in float64 (0 when both are 0)."""
    a, ref = a.double(), ref.double()
    scale = max(ref.abs().max().item(), floor)
    err = (a - ref).abs().max().item()
    if scale == 0:
        return 0.0 if err == 0 else math.inf
    return err / scale


#: A tensor whose values are all below this fraction of the largest value of any tensor is
#: compared against that fraction instead (its own scale is rounding noise: a conv bias before
#: a normalisation that cancels it has a gradient of exactly 0 in exact arithmetic).
FLOOR = 1e-3


def worst(named: dict[str, torch.Tensor], ref: dict[str, torch.Tensor]) -> tuple[float, str]:
    """The largest :func:`rel_error` over the tensors of ``ref``, and which tensor it was."""
    missing = set(ref) - set(named)
    if missing:
        return math.inf, f"missing: {sorted(missing)[0]}"
    floor = FLOOR * max(t.abs().max().item() for t in ref.values())
    errors = {name: rel_error(named[name].cpu(), t.cpu(), floor) for name, t in ref.items()}
    name = max(errors, key=errors.get)
    return errors[name], name


def make_optimizer(model: nn.Module, args):
    return torch.optim.SGD(
        model.parameters(), lr=args.lr, momentum=0.9, weight_decay=args.weight_decay
    )


def set_train_mode(model: nn.Module, norm: str) -> None:
    model.train()
    if norm == "frozen_bn":
        freeze_batchnorm(model)


def strip(name: str) -> str:
    return name.removeprefix("module.")


def train(model, args, device, rank, world, distributed: bool, on_step=None, dtype=torch.float32):
    """``args.steps`` SGD steps; returns the per-step global losses. ``on_step(step, loss,
    grads)`` sees each step's loss and full gradients (on rank 0; None elsewhere)."""
    optimizer = make_optimizer(model, args)
    set_train_mode(model, args.norm)
    losses = []
    for step in range(args.steps):
        x, y = global_batch(step, args, device, dtype)
        if distributed:
            x, y = local_part(x, rank, world), local_part(y, rank, world)
        optimizer.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y)  # mean over this process's samples
        loss.backward()
        loss = loss.detach().clone()
        if distributed:  # the combined batch's mean: equal halves, so the mean of the means
            dist.all_reduce(loss)
            loss /= world
        grads = {strip(n): plain(p.grad) for n, p in model.named_parameters() if p.grad is not None}
        losses.append(loss.item())
        if on_step is not None and rank == 0:
            on_step(step, loss.item(), grads)
        optimizer.step()
    return losses


def final_parameters(model) -> dict[str, torch.Tensor]:
    return {strip(n): plain(p) for n, p in model.named_parameters()}


def fresh_model(args, state, device, exact: bool = False) -> nn.Module:
    """The model from ``state``, converted (unless ``--convs torch``); ``exact``: the float64
    truth, PyTorch's own convolutions in float64."""
    model, _ = build_model(args.model, args.norm)
    if args.convs == "tritonconv" and not exact:
        tritonconv.nn.convert(model, args.algo)
    model.load_state_dict(state)
    return model.to(device, torch.float64 if exact else None)


def errors_against(run: dict, truth: dict) -> dict:
    """Each step's loss and gradient error, and the final parameters' error, of ``run`` (a
    dict of losses, grads, params) against ``truth``."""
    record = {"loss_rel_err": [], "grad_err": [], "grad_worst": []}
    for loss, grads, true_loss, true_grads in zip(
        run["losses"], run["grads"], truth["losses"], truth["grads"]
    ):
        record["loss_rel_err"].append(abs(loss - true_loss) / abs(true_loss))
        err, name = worst(grads, true_grads)
        record["grad_err"].append(err)
        record["grad_worst"].append(name)
    record["param_err"], record["param_worst"] = worst(run["params"], truth["params"])
    return record


def trained(model, args, device, rank, world, distributed, dtype=torch.float32) -> dict:
    """Train; on rank 0 the losses, each step's gradients and the final parameters."""
    run = {"grads": []}
    run["losses"] = train(
        model, args, device, rank, world, distributed,
        lambda step, loss, grads: run["grads"].append(grads), dtype,
    )  # fmt: skip
    run["params"] = final_parameters(model)  # a collective under FSDP2: every rank
    return run


def shard(model: nn.Module, mesh) -> nn.Module:
    """FSDP2: every residual block is a unit, then the root (the stem, the head)."""
    for module in list(model.modules()):
        if is_block(module):
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def run_mode(mode, args, state, device, rank, world, reference) -> dict:
    """Train under DDP or FSDP2 on this rank's half of each batch; on rank 0, compare each
    step's loss and gradients and the final parameters with the reference."""
    model = fresh_model(args, state, device)
    if mode == "ddp":
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[device.index] if args.cuda else None
        )
    else:
        from torch.distributed.device_mesh import init_device_mesh

        model = shard(model, init_device_mesh(device.type, (world,)))
    run = trained(model, args, device, rank, world, True)
    if rank != 0:
        return {}
    record = errors_against(run, reference["exact"])
    record["losses"] = run["losses"]
    record["vs_one_process"] = errors_against(run, reference["one"])
    return record


# --------------------------------------------------------------------------------------------
# cross-device check (its own process, no process group)
# --------------------------------------------------------------------------------------------


def cross_device_check() -> dict:
    """tritonconv on cuda:1 tensors while the current device is cuda:0."""
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.cuda.set_device(0)
    device = torch.device("cuda", 1)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(2, 32, 12, 12, generator=g).to(device).requires_grad_()
    cases = {}
    for algo in ("implicit_gemm", "im2col_gemm", "direct", "depthwise"):
        groups = 32 if algo == "depthwise" else 1
        w = torch.randn(32, 32 // groups, 3, 3, generator=g).to(device).requires_grad_()
        try:
            y = tritonconv.conv2d(x, w, padding=1, groups=groups, algo=algo)
            gx, gw = torch.autograd.grad(y.square().sum(), (x, w))
            ref = F.conv2d(x.double(), w.double(), padding=1, groups=groups)
            rx, rw = torch.autograd.grad(ref.square().sum(), (x, w))
            torch.cuda.synchronize(device)
            errors = [rel_error(y, ref), rel_error(gx, rx), rel_error(gw, rw)]
            cases[algo] = {"error": max(errors), "ok": max(errors) < 1e-4}
        except Exception as exc:  # a CUDA error here is the finding
            cases[algo] = {"error": None, "ok": False, "exception": f"{type(exc).__name__}: {exc}"}
            break  # a CUDA error poisons the context: later cases would only repeat it
    return {"ok": all(c["ok"] for c in cases.values()), "cases": cases}


def run_cross_device(timeout: int) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _TORCHRUN_VARS}
    command = [sys.executable, str(Path(__file__).resolve()), "--cross-device-only"]
    try:
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"timed out after {timeout} s"}
    for line in reversed(done.stdout.splitlines()):
        if line.startswith("CROSS_DEVICE "):
            return json.loads(line.removeprefix("CROSS_DEVICE "))
    tail = (done.stdout + done.stderr)[-2000:]
    return {"ok": False, "error": f"exit code {done.returncode}", "output": tail}


_TORCHRUN_VARS = {
    "RANK",
    "LOCAL_RANK",
    "WORLD_SIZE",
    "LOCAL_WORLD_SIZE",
    "GROUP_RANK",
    "ROLE_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
}


# --------------------------------------------------------------------------------------------
# main
# --------------------------------------------------------------------------------------------


def parse_args(argv=None):
    cuda = torch.cuda.is_available() and not tritonconv.INTERPRETER
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=("resnet50", "small"), default=None,
                   help="default: resnet50 on CUDA, small on CPU")  # fmt: skip
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", choices=("ddp", "fsdp2", "both"), default="both")
    p.add_argument("--norm", choices=("frozen_bn", "groupnorm"), default="frozen_bn")
    p.add_argument("--batch", type=int, default=None,
                   help="global batch (split over the ranks); default 8 on CUDA, 4 on CPU")  # fmt: skip
    p.add_argument("--size", type=int, default=None,
                   help="image side; default 224 (resnet50) or 32 (small) on CUDA, 16 on CPU")  # fmt: skip
    p.add_argument("--residual-init", choices=("zero", "default"), default="zero",
                   help="zero: each block's last normalisation starts at 0 (a well-conditioned "
                   "start; see zero_init_residual)")  # fmt: skip
    p.add_argument("--algo", default="auto", help="tritonconv algorithm of every convolution")
    p.add_argument(
        "--convs",
        choices=("tritonconv", "torch"),
        default="tritonconv",
        help="torch: leave PyTorch's convolutions in (cuDNN on the GPU), the same "
        "check of the same model as a baseline for the measured errors",
    )
    p.add_argument("--backend", choices=("auto", "nccl", "gloo"), default="auto",
                   help="auto: nccl with a GPU per rank, else gloo (ranks sharing a GPU)")  # fmt: skip
    p.add_argument("--lr", type=float, default=0.005)
    p.add_argument("--weight-decay", type=float, default=1e-4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--factor", type=float, default=2.0,
                   help="a distributed run may be this many times further from float64 than "
                   "one process")  # fmt: skip
    p.add_argument("--loss-rtol", type=float, default=1e-4)
    p.add_argument("--grad-rtol", type=float, default=1e-3)
    p.add_argument("--param-rtol", type=float, default=1e-4)
    p.add_argument("--benchmark", action="store_true",
                   help="tritonconv benchmark mode, every rank writing one shared choice file")  # fmt: skip
    p.add_argument("--no-cross-device", action="store_true",
                   help="skip the cuda:1-tensors-while-on-cuda:0 check")  # fmt: skip
    p.add_argument("--out", default=os.environ.get("OUT"),
                   help="folder for distributed_check.json (default $OUT, if set)")  # fmt: skip
    p.add_argument("--cross-device-only", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.cuda = cuda
    if args.model is None:
        args.model = "resnet50" if cuda else "small"
    if args.batch is None:
        args.batch = 8 if cuda else 4
    if args.size is None:
        args.size = (224 if args.model == "resnet50" else 32) if cuda else 16
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.cross_device_only:
        print("CROSS_DEVICE " + json.dumps(cross_device_check()), flush=True)
        return 0
    started = time.perf_counter()
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False

    if "RANK" not in os.environ:
        print("run me under torchrun: torchrun --nproc_per_node=2 " + " ".join(sys.argv))
        return 2
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", rank))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    if args.cuda:
        gpus = torch.cuda.device_count()
        device = torch.device("cuda", local_rank % gpus)
        torch.cuda.set_device(device)
        backend = args.backend
        if backend == "auto":  # NCCL wants one GPU per rank; ranks sharing a GPU use gloo
            backend = "nccl" if local_world <= gpus else "gloo"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if backend == "nccl":
        dist.init_process_group("nccl", device_id=device)
    else:
        dist.init_process_group("gloo")
    if args.batch % world:
        raise SystemExit(f"--batch {args.batch} must split evenly over {world} ranks")

    def say(*text):
        if rank == 0:
            print(*text, flush=True)

    cache_dir = None
    if args.benchmark:
        cache_dir = [os.environ.get("TRITONCONV_CACHE_DIR")]
        if rank == 0 and cache_dir[0] is None:
            parent = args.out or tempfile.gettempdir()
            Path(parent).mkdir(parents=True, exist_ok=True)
            cache_dir[0] = tempfile.mkdtemp(prefix="tritonconv-choices-", dir=parent)
        dist.broadcast_object_list(cache_dir, src=0)
        cache_dir = cache_dir[0]
        os.environ["TRITONCONV_CACHE_DIR"] = cache_dir
        choice.forget_measurements()
        tritonconv.set_benchmark(True)

    # --- one initial state for everybody --------------------------------------------------
    torch.manual_seed(args.seed)
    model, origin = build_model(args.model, args.norm)
    if args.residual_init == "zero":
        zero_init_residual(model)
    convs = sum(isinstance(m, nn.modules.conv._ConvNd) for m in model.modules())
    model.to(device)
    if args.convs == "tritonconv":
        tritonconv.nn.convert(model, args.algo)
        # what algo="auto" runs for each convolution on a rank's batch (before the
        # calibration, which resets the statistics this forward pass moves)
        example = torch.zeros(args.batch // world, 3, args.size, args.size, device=device)
        algos = Counter(layer.choice.algo for layer in tritonconv.explain_model(model, example))
    else:
        algos = Counter({"PyTorch's own (--convs torch: the harness's baseline)": convs})
    swapped = count_converted(model)
    if args.norm == "frozen_bn":
        g = torch.Generator().manual_seed(999)
        calibrate(model, torch.randn(args.batch, 3, args.size, args.size, generator=g).to(device))
    state = model.state_dict()
    seeded_diff = 0.0
    for t in state.values():  # rank 0's state everywhere (and how far the seeded ones were)
        before = t.clone()
        dist.broadcast(t, src=0)
        if t.is_floating_point():
            seeded_diff = max(seeded_diff, (before - t).abs().max().item())
    seeded = torch.tensor(seeded_diff, dtype=torch.float64, device=device)
    dist.all_reduce(seeded, op=dist.ReduceOp.MAX)
    state = {k: v.detach().clone() for k, v in state.items()}
    del model

    say(f"tritonconv distributed check: {world} ranks, backend {dist.get_backend()}, "
        f"device {torch.cuda.get_device_name(device) if args.cuda else 'cpu (Triton interpreter)'}")  # fmt: skip
    say(f"torch {torch.__version__}, triton {triton.__version__}; model {origin}, "
        f"norm {args.norm}, residual init {args.residual_init}, {args.steps} steps, global "
        f"batch {args.batch} x 3 x {args.size} x {args.size}, {args.batch // world} per rank, "
        f"algo {args.algo!r}"
        f"{', benchmark mode, choices in ' + cache_dir if cache_dir else ''}")  # fmt: skip
    say(f"converted: {swapped} of {convs} convolutions swapped for tritonconv modules; they run "
        + ", ".join(f"{algo} {n}" for algo, n in algos.most_common()))  # fmt: skip
    say(f"initial state: seeded init identical on every rank up to {seeded.item():.3g} "
        f"(rank 0's then broadcast)")  # fmt: skip

    # --- the reference: one process, the combined batch ------------------------------------
    # (and the truth they are all measured against: the same training in float64)
    reference = {}
    if rank == 0:
        t0 = time.perf_counter()
        exact = fresh_model(args, state, device, exact=True)
        reference["exact"] = trained(exact, args, device, 0, 1, False, torch.float64)
        del exact
        model = fresh_model(args, state, device)
        reference["one"] = trained(model, args, device, 0, 1, False)
        reference["one"].update(errors_against(reference["one"], reference["exact"]))
        reference["seconds"] = time.perf_counter() - t0
        del model
        say(f"reference (1 process, batch {args.batch}, float64 and fp32): "
            f"{reference['seconds']:.1f} s")  # fmt: skip
    dist.barrier()

    # --- the distributed runs ----------------------------------------------------------------
    results = {}
    modes = ["ddp", "fsdp2"] if args.mode == "both" else [args.mode]
    for mode in modes:
        if mode == "fsdp2" and fully_shard is None:
            results[mode] = {"skipped": "FSDP2 (fully_shard) is not in this torch"}
            say(f"fsdp2: SKIPPED: {results[mode]['skipped']}")
            continue
        t0 = time.perf_counter()
        try:
            record = run_mode(mode, args, state, device, rank, world, reference)
        except Exception as exc:
            if args.cuda or mode != "fsdp2":
                raise
            # FSDP2 over gloo on CPU is not what the check is about (CPU is a smoke test)
            why = f"FSDP2 failed on CPU over gloo (torch {torch.__version__}): {exc!r}"
            results[mode] = {"skipped": why}
            print(f"rank {rank}: fsdp2: SKIPPED on CPU only: {why}", flush=True)
            continue
        record["seconds"] = time.perf_counter() - t0
        results[mode] = record
        dist.barrier()
        say(f"{mode}: {record['seconds']:.1f} s")

    # --- the shared choice file (benchmark mode) ---------------------------------------------
    cache_report = None
    if cache_dir is not None:
        dist.barrier()
        if rank == 0:
            cache_report = check_choice_file(choice.cache_file())

    # --- verdict ------------------------------------------------------------------------------
    status = torch.zeros(1, device=device)
    if rank == 0:
        cross = None
        if args.cuda and torch.cuda.device_count() >= 2 and not args.no_cross_device:
            cross = run_cross_device(timeout=300)
        failures = report(args, reference, results, cache_report, cross)
        if "aten" in algos:  # PyTorch's own CPU convolution: tritonconv's kernels untested
            failures.append(f"{algos['aten']} convolutions ran PyTorch's convolution (aten)")
            print(f"RESULT: FAIL: {failures[-1]}, not tritonconv's kernels")
        summary = {
            "passed": not failures,
            "failures": failures,
            "world_size": world,
            "backend": dist.get_backend(),
            "device": torch.cuda.get_device_name(device) if args.cuda else "cpu (interpreter)",
            "torch": torch.__version__,
            "triton": triton.__version__,
            "model": origin,
            "convs": convs,
            "convs_swapped": swapped,
            "algorithms": dict(algos),
            "norm": args.norm,
            "steps": args.steps,
            "global_batch": args.batch,
            "size": args.size,
            "algo": args.algo,
            "lr": args.lr,
            "tolerances": {
                "factor": args.factor,
                "loss": args.loss_rtol,
                "grad": args.grad_rtol,
                "param": args.param_rtol,
            },
            "float64_losses": reference["exact"]["losses"],
            "one_process": {
                k: v for k, v in reference["one"].items() if k not in ("grads", "params")
            },
            "modes": results,
            "choice_cache": cache_report,
            "cross_device": cross,
            "seconds": time.perf_counter() - started,
        }
        if args.out:
            Path(args.out).mkdir(parents=True, exist_ok=True)
            path = Path(args.out) / "distributed_check.json"
            path.write_text(json.dumps(summary, indent=1, default=str))
            print(f"wrote {path}")
        status.fill_(1.0 if failures else 0.0)
    dist.broadcast(status, src=0)
    dist.destroy_process_group()
    return int(status.item())


def check_choice_file(path: Path) -> dict:
    """The shared choice file after every rank wrote to it: valid JSON, no stray temporaries."""
    stray = sorted(p.name for p in path.parent.glob("*.tmp"))
    try:
        entries = json.loads(path.read_text())
        ok = isinstance(entries, dict) and len(entries) > 0 and not stray
        return {"file": str(path), "entries": len(entries), "valid": ok, "stray": stray}
    except (OSError, ValueError) as exc:
        return {"file": str(path), "valid": False, "error": str(exc), "stray": stray}


def report(args, reference, results, cache_report, cross) -> list[str]:
    """Print the table and summary; return the failures (empty: passed).

    Every fp32 run is measured against the float64 run of the same training: a distributed
    run passes when it is no further from float64 than ``--factor`` times the one-process
    fp32 run (that run's distance is the model's own fp32 sensitivity, which a deep network
    amplifies far past fp32's rounding), or within the ``--*-rtol`` allowances."""
    failures = []
    one = reference["one"]
    modes = [m for m in results if "skipped" not in results[m]]
    print()
    header = f"{'step':>4} {'float64 loss':>14} | {'1 process':>9} loss err   grad err"
    for m in modes:
        header += f" | {m:>5} loss err   grad err (vs 1 proc.)"
    print(header)
    for step, loss in enumerate(reference["exact"]["losses"]):
        line = f"{step:>4} {loss:>14.7f} | {one['loss_rel_err'][step]:>18.2e} {one['grad_err'][step]:>10.2e}"
        for m in modes:
            r = results[m]
            line += (
                f" | {r['loss_rel_err'][step]:>14.2e} {r['grad_err'][step]:>10.2e} "
                f"({r['vs_one_process']['grad_err'][step]:.1e})"
            )
        print(line)
    print("(errors against the float64 run; grad err: max over parameters of max|g - g64| / "
          "max(max|g64|, 1e-3 G), G the largest |g64| of any parameter)")  # fmt: skip
    print()
    one_loss, one_grad = max(one["loss_rel_err"]), max(one["grad_err"])
    print(f"1 process (fp32, batch {args.batch}): loss err {one_loss:.2e}, grad err {one_grad:.2e} "
          f"(worst {one['grad_worst'][one['grad_err'].index(one_grad)]}), final params err "
          f"{one['param_err']:.2e}")  # fmt: skip
    for m in modes:
        r = results[m]
        checks = (
            ("loss err", max(r["loss_rel_err"]), one_loss, args.loss_rtol),
            ("grad err", max(r["grad_err"]), one_grad, args.grad_rtol),
            ("param err", r["param_err"], one["param_err"], args.param_rtol),
        )
        parts = []
        for what, err, base, floor in checks:
            limit = max(args.factor * base, floor)
            parts.append(f"{what} {err:.2e} (limit {limit:.2e})")
            if not math.isfinite(err) or err > limit:
                failures.append(f"{m}: {what} {err:.2e} > {limit:.2e}")
        print(f"{m}: " + ", ".join(parts))
    for m, r in results.items():
        if "skipped" in r:
            print(f"{m}: SKIPPED ({r['skipped']})")
            if args.cuda:
                failures.append(f"{m}: skipped on CUDA")
    if not all(math.isfinite(v) for v in reference["exact"]["losses"]):
        failures.append("the float64 run's loss is not finite (lower --lr)")
    if cache_report is not None:
        print(f"shared choice file: {cache_report}")
        if not cache_report["valid"]:
            failures.append(f"choice file not valid: {cache_report}")
    if cross is not None:
        print(f"cross-device (cuda:1 tensors, current device cuda:0): {json.dumps(cross)}")
        if not cross["ok"]:
            failures.append("cross-device: tritonconv on cuda:1 tensors with current device cuda:0")
    print()
    if failures:
        print("RESULT: FAIL: " + "; ".join(failures))
    else:
        print(f"RESULT: PASS ({', '.join(modes)} as close to float64 as one process on the "
              "combined batch)")  # fmt: skip
    return failures


if __name__ == "__main__":
    sys.exit(main())
