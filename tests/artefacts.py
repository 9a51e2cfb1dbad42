"""Checkpoints in their REAL on-disk forms, as the public unlearning code bases write them.

Each writer saves exactly what the reference code saves — the same dict keys, containers,
prefixes, value types (NumPy scalars included), pruning reparametrisation and file names — so
tests exercise the artefacts users bring, not look-alikes. The reference *models* below are
independent re-implementations of the state-dict layout and forward computation of the
reference architectures (written for these tests; no code is copied).

References (GitHub):

- OPTML-Group/Unlearn-Saliency (SalUn), ``Classification/``: ``main_train.py`` (training
  checkpoints), ``unlearn/impl.py::save_unlearn_checkpoint`` and ``utils.py::save_checkpoint``
  (unlearned checkpoints, ``<method>checkpoint.pth.tar``), ``evaluation/SVC_MIA.py`` (NumPy
  scores), ``models/ResNet.py`` (CIFAR ResNet-18 with ``normalize``), ``models/ResNets.py``
  (``resnet20s`` …), ``utils.py::setup_model_dataset`` (``model.normalize = ...``).
- OPTML-Group/Unlearn-Sparse: ``main_imp.py`` (iterative magnitude pruning checkpoints),
  ``pruner/pruner.py::pruning_model`` (global L1 unstructured pruning of every ``Conv2d``
  weight with ``torch.nn.utils.prune``), ``main_forget.py`` (unlearning a pruned model).
- torchvision: ``torch.save(model.state_dict(), path)`` of a ``torchvision.models`` classifier,
  optionally wrapped in ``torch.nn.DataParallel`` (``module.`` prefix).
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
import torchvision
from torch import nn
from torch.nn.utils import prune
from torchvision.models.resnet import BasicBlock, ResNet

__all__ = [
    "CIFAR10_MEAN",
    "CIFAR10_STD",
    "prune_conv_weights_l1",
    "reference_cifar_resnet18",
    "reference_resnet_s",
    "salun_evaluation_result",
    "save_dataparallel_state_dict",
    "save_salun_main_train",
    "save_sparse_main_imp",
    "save_torchvision_state_dict",
    "save_unlearn_checkpoint",
    "set_batchnorm_statistics",
]

CIFAR10_MEAN = (0.4914, 0.4822, 0.4465)
CIFAR10_STD = (0.2470, 0.2435, 0.2616)


# ------------------------------------------------------------------------------- models


class _ChannelNormalize(nn.Module):
    """Buffers ``mean``/``std`` (shape ``(C,)``), as ``NormalizeByChannelMeanStd``."""

    def __init__(self, mean: tuple[float, ...], std: tuple[float, ...]) -> None:
        super().__init__()
        self.register_buffer("mean", torch.tensor(mean))
        self.register_buffer("std", torch.tensor(std))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.sub(self.mean[None, :, None, None]).div(self.std[None, :, None, None])


class _Lambda(nn.Module):
    """A parameter-free module applying a function (the option-A shortcut is one)."""

    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


class _ResNetSBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        if stride == 1 and cin == cout:
            self.shortcut: nn.Module = nn.Sequential()
        else:
            pad = cout // 4
            self.shortcut = _Lambda(lambda x: F.pad(x[:, :, ::2, ::2], (0, 0, 0, 0, pad, pad)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + self.shortcut(x))


class _ReferenceResNetS(nn.Module):
    """``ResNets(BasicBlock, [n, n, n])`` of ``models/ResNets.py``: normalize, 16-channel stem,
    three stages of n option-A blocks, ``avg_pool2d`` over the whole map, head ``fc``."""

    def __init__(self, n: int, num_classes: int, head: str, normalize: bool) -> None:
        super().__init__()
        if normalize:
            self.normalize = _ChannelNormalize(CIFAR10_MEAN, CIFAR10_STD)
        self.conv1 = nn.Conv2d(3, 16, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(16)
        width = 16
        for i, (planes, stride) in enumerate(((16, 1), (32, 2), (64, 2)), start=1):
            blocks = []
            for s in [stride] + [1] * (n - 1):
                blocks.append(_ResNetSBlock(width, planes, s))
                width = planes
            setattr(self, f"layer{i}", nn.Sequential(*blocks))
        self.head_name = head
        setattr(self, head, nn.Linear(64, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if hasattr(self, "normalize"):
            x = self.normalize(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = F.avg_pool2d(out, out.size()[3]).view(out.size(0), -1)
        return getattr(self, self.head_name)(out)


def reference_resnet_s(
    depth: int = 20, num_classes: int = 10, head: str = "fc", normalize: bool = True
) -> nn.Module:
    """``resnet{depth}s(num_classes)`` as Unlearn-Sparse / SalUn define it (``head="fc"``,
    normalize inside); ``head="linear", normalize=False`` is the original
    ``akamaster/pytorch_resnet_cifar10`` layout."""
    torch.manual_seed(depth)
    return _ReferenceResNetS((depth - 2) // 6, num_classes, head, normalize)


class _ReferenceCifarResNet18(ResNet):
    """SalUn ``models/ResNet.py`` ``resnet18(num_classes)`` with ``imagenet=False`` and the
    ``normalize`` module ``setup_model_dataset`` assigns: torchvision blocks, 3×3 stride-1 stem,
    no max-pool, normalisation first in ``forward``."""

    def __init__(self, num_classes: int) -> None:
        super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=num_classes)
        self.normalize = _ChannelNormalize(CIFAR10_MEAN, CIFAR10_STD)
        self.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        self.maxpool = nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self._forward_impl(self.normalize(x))


def reference_cifar_resnet18(num_classes: int = 10) -> nn.Module:
    """SalUn's CIFAR ResNet-18 (see :class:`_ReferenceCifarResNet18`)."""
    torch.manual_seed(18)
    return _ReferenceCifarResNet18(num_classes)


def set_batchnorm_statistics(model: nn.Module, shape: tuple[int, ...], seed: int = 0) -> None:
    """Give BatchNorm layers non-trivial running statistics (one train-mode forward pass)."""
    gen = torch.Generator().manual_seed(seed)
    model.train()
    with torch.no_grad():
        model(torch.rand((4, *shape), generator=gen))
    model.eval()


# ------------------------------------------------------------------------------- writers


def _sgd_state(model: nn.Module) -> tuple[dict, dict]:
    """Optimizer and scheduler state dicts after one real SGD step, as the training loops
    (momentum 0.9, weight decay 5e-4, MultiStepLR milestones [91, 136], gamma 0.1).

    The model's parameters and buffers are restored after the step: the caller's model (and so
    the weights saved next to these states) keeps its weights and BatchNorm statistics."""
    before = copy.deepcopy(model.state_dict())
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=5e-4)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=[91, 136], gamma=0.1)
    model.train()
    out = model(torch.rand(4, 3, 32, 32))
    F.cross_entropy(out, torch.arange(4) % out.shape[1]).backward()
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    model.eval()
    model.load_state_dict(before)
    return optimizer.state_dict(), scheduler.state_dict()


def save_salun_main_train(model: nn.Module, save_dir: Path, epochs: int = 1) -> Path:
    """``main_train.py``: ``save_checkpoint({'result', 'epoch', 'state_dict', 'best_sa',
    'optimizer', 'scheduler'}, is_SA_best, pruning=0, save_path)`` writes
    ``0checkpoint.pth.tar`` and copies the best one to ``0model_SA_best.pth.tar``.

    Returns the ``0model_SA_best.pth.tar`` path (what ``main_forget.py --mask`` reads).
    """
    save_dir.mkdir(parents=True, exist_ok=True)
    optimizer, scheduler = _sgd_state(model)
    all_result = {"train_ta": [], "test_ta": [], "val_ta": []}
    for epoch in range(epochs):
        all_result["train_ta"].append(40.0 + 10 * epoch)  # AverageMeter.avg: Python floats
        all_result["val_ta"].append(35.0 + 10 * epoch)
        state = {
            "result": all_result,
            "epoch": epoch + 1,
            "state_dict": model.state_dict(),
            "best_sa": max(all_result["val_ta"]),
            "optimizer": optimizer,
            "scheduler": scheduler,
        }
        filepath = save_dir / "0checkpoint.pth.tar"
        torch.save(state, filepath)
        shutil.copyfile(filepath, save_dir / "0model_SA_best.pth.tar")
    return save_dir / "0model_SA_best.pth.tar"


def salun_evaluation_result(seed: int = 0) -> dict:
    """An ``evaluation_result`` as ``main_forget.py`` fills it: ``accuracy`` (Python floats per
    loader) and the ``SVC_MIA`` dicts, whose five scores are ``numpy.float64`` (``np.mean`` of
    ``clf.predict(X).mean()`` values, as ``SVC_fit_predict`` returns them)."""
    rng = np.random.default_rng(seed)

    def svc_scores() -> dict:
        keys = ("correctness", "confidence", "entropy", "m_entropy", "prob")
        return {k: np.mean([(rng.random(50) > 0.4).mean()]) for k in keys}

    return {
        "accuracy": {"retain": 99.1, "forget": 94.2, "val": 93.5, "test": 93.0},
        "SVC_MIA_forget_efficacy": svc_scores(),
        "SVC_MIA_training_privacy": svc_scores(),
    }


def save_unlearn_checkpoint(
    model: nn.Module, evaluation_result: dict | None, save_dir: Path, unlearn: str
) -> Path:
    """``unlearn/impl.py::save_unlearn_checkpoint`` (SalUn and Unlearn-Sparse): ``{'state_dict',
    'evaluation_result'}`` to ``<unlearn>checkpoint.pth.tar`` and the evaluation result alone to
    ``<unlearn>eval_result.pth.tar``. Returns the checkpoint path."""
    save_dir.mkdir(parents=True, exist_ok=True)
    state = {"state_dict": model.state_dict(), "evaluation_result": evaluation_result}
    torch.save(state, save_dir / f"{unlearn}checkpoint.pth.tar")
    torch.save(evaluation_result, save_dir / f"{unlearn}eval_result.pth.tar")
    return save_dir / f"{unlearn}checkpoint.pth.tar"


def prune_conv_weights_l1(model: nn.Module, rate: float) -> None:
    """``pruner.pruning_model(model, px)``: global L1 unstructured pruning of every ``Conv2d``
    weight (``weight`` becomes ``weight_orig`` × buffer ``weight_mask``)."""
    targets = tuple((m, "weight") for m in model.modules() if isinstance(m, nn.Conv2d))
    prune.global_unstructured(targets, pruning_method=prune.L1Unstructured, amount=rate)


def save_sparse_main_imp(model: nn.Module, save_dir: Path, state: int = 1) -> Path:
    """``main_imp.py`` after pruning round ``state``: ``save_checkpoint({'state', 'result',
    'epoch', 'state_dict', 'best_sa', 'optimizer', 'scheduler', 'init_weight'}, ...)`` to
    ``<state>checkpoint.pth.tar`` (the state dict holds ``weight_orig``/``weight_mask``)."""
    save_dir.mkdir(parents=True, exist_ok=True)
    init_weight = {
        k.replace("_orig", ""): v.clone()
        for k, v in model.state_dict().items()
        if not k.endswith("_mask")
    }
    optimizer, scheduler = _sgd_state(model)
    document = {
        "state": state,
        "result": {"train_ta": [50.0], "test_ta": [], "val_ta": [45.0]},
        "epoch": 1,
        "state_dict": model.state_dict(),
        "best_sa": 45.0,
        "optimizer": optimizer,
        "scheduler": scheduler,
        "init_weight": init_weight,
    }
    path = save_dir / f"{state}checkpoint.pth.tar"
    torch.save(document, path)
    return path


def save_torchvision_state_dict(name: str, num_classes: int, path: Path) -> nn.Module:
    """``torch.save(torchvision.models.<name>(num_classes=k).state_dict(), path)``; returns the
    model (eval mode, non-trivial BatchNorm statistics)."""
    torch.manual_seed(0)
    model = torchvision.models.get_model(name, weights=None, num_classes=num_classes)
    set_batchnorm_statistics(model, (3, 64, 64))
    torch.save(model.state_dict(), path)
    return model


def save_dataparallel_state_dict(model: nn.Module, path: Path) -> None:
    """``torch.save(nn.DataParallel(model).state_dict(), path)``: every key gets ``module.``."""
    torch.save(nn.DataParallel(model).state_dict(), path)
