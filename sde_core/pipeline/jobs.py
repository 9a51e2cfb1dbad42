"""Training and unlearning as self-contained jobs (for :mod:`sde_core.pipeline.engine`).

Each job reads the workspace's files, writes its checkpoints into the workspace folder (storage
every worker can read and write on a cluster) and *returns* the new
:class:`~sde_core.pipeline.workspace.ModelEntry`; the driver alone adds it to ``workspace.toml``
(atomically). A job never overwrites a file the workspace refers to: its default output is
``models/<name>`` unless another entry uses it, then ``models/<name>-2`` and so on
(:func:`~sde_core.pipeline.workspace_write.fresh_model_path`), so replacing a model that fails
half-way loses nothing. Models are built with their entry's ``arch_kwargs`` and ``trusted``.
The arguments are plain, picklable values, so the same job runs in this process or on a Ray
worker.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from sde_core.pipeline.workspace import CheckpointRef, ModelEntry, check_model_name

__all__ = ["random_model_job", "train_model_job", "unlearn_model_job"]

#: ``progress(epoch, total_epochs, loss)`` (local engine only).
EpochProgress = Callable[[int, int, float], None]


def random_model_job(
    workspace_root: str,
    name: str,
    arch: str,
    arch_kwargs: Mapping[str, Any],
    seed: int,
    out: str | None = None,
) -> ModelEntry:
    """Save a freshly initialised model (the negative control, role ``random``)."""
    import torch

    from sde_core.common.hashing import file_sha256
    from sde_core.inputs.architectures import build_model
    from sde_core.learning.training import save_weights
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.pipeline.workspace_write import fresh_model_path, relative_to_workspace

    check_model_name(name)
    ws = load_workspace(workspace_root, validate=False)
    torch.manual_seed(seed)
    model = build_model(arch, **arch_kwargs)
    folder = ws.path(out or fresh_model_path(ws, f"models/{name}"))
    path = save_weights(model, folder / "init.safetensors", arch=arch)
    return ModelEntry(
        name=name, role="random", arch=arch, checkpoint=relative_to_workspace(ws, path),
        method="init", arch_kwargs=dict(getattr(model, "sde_arch_kwargs", arch_kwargs)),
        seed=seed, seconds=0.0, sha256=file_sha256(path),
    )  # fmt: skip


def train_model_job(
    workspace_root: str,
    name: str,
    arch: str,
    arch_kwargs: Mapping[str, Any],
    config: Mapping[str, Any],
    role: str = "original",
    out: str | None = None,
    resume: bool = True,
    progress: EpochProgress | None = None,
) -> tuple[ModelEntry, float]:
    """Train ``arch`` on the workspace's D_tr with a
    :class:`~sde_core.learning.training.TrainConfig`.

    Writes ``init.safetensors`` and the checkpoints at the configured fractions of training
    under ``out`` (default ``models/<name>``); resumes from ``resume.pt`` when present.

    Returns:
        ``(entry, final_loss)``.
    """
    import torch

    from sde_core.common.hashing import file_sha256
    from sde_core.inputs.architectures import build_model
    from sde_core.inputs.data import load_dataset
    from sde_core.learning.training import TrainConfig, train
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.pipeline.workspace_write import fresh_model_path, relative_to_workspace

    check_model_name(name)
    ws = load_workspace(workspace_root, validate=False)
    cfg = TrainConfig.from_dict(dict(config))
    bundle = load_dataset(ws.dataset_spec())
    torch.manual_seed(cfg.seed)
    model = build_model(arch, **arch_kwargs)
    result = train(
        model, bundle.train, cfg, ws.path(out or fresh_model_path(ws, f"models/{name}")),
        progress=progress, resume=resume, arch=arch,
    )  # fmt: skip
    assert result.final_path is not None and result.init_path is not None
    recipe = cfg.to_dict()
    recipe.pop("device")
    entry = ModelEntry(
        name=name, role=role, arch=arch,
        checkpoint=relative_to_workspace(ws, result.final_path), method="train",
        arch_kwargs=dict(getattr(model, "sde_arch_kwargs", arch_kwargs)),
        hyperparameters=recipe, seed=cfg.seed,
        seconds=round(result.seconds, 3), sha256=file_sha256(result.final_path),
        init_checkpoint=relative_to_workspace(ws, result.init_path),
        checkpoints=[
            CheckpointRef(f, relative_to_workspace(ws, p))
            for f, p in sorted(result.checkpoints.items()) if f < 1.0
        ],
    )  # fmt: skip
    return entry, float(result.losses[-1])


def unlearn_model_job(
    workspace_root: str,
    method: str,
    name: str,
    params: Mapping[str, Any],
    original: str | None = None,
    device: str = "cpu",
    out: str | None = None,
    time_limit: float | None = None,
    save_every: int | None = None,
) -> ModelEntry:
    """Unlearn D_f from the workspace's original (or named) model with a registered method.

    Retrain reuses the original's recorded training recipe; Unroll takes θ_0 from the
    original's ``init_checkpoint`` when the workspace has it. A trusted code checkpoint is read
    in a child process within ``time_limit`` seconds; only its weights come back.

    ``save_every=N`` keeps the model after every N-th epoch of an epoch-based method
    (:data:`~sde_core.learning.unlearning.EPOCH_METHODS`) as ``models/<name>-epochs/
    epoch_<e>.safetensors``, recorded in the entry's ``checkpoints`` at fraction e / epochs (the
    last epoch is the entry's own checkpoint), so the checkpoint sweep and the Curves view
    (:mod:`sde_core.pipeline.curves`) evaluate the run step by step.
    """
    from sde_core.common.hashing import file_sha256
    from sde_core.errors import TrainingError
    from sde_core.families.causal_lm import CAUSAL_LM
    from sde_core.families.registry import family_of
    from sde_core.inputs.architectures import build_model
    from sde_core.inputs.data import load_dataset
    from sde_core.inputs.indices import load_index_file
    from sde_core.learning.training import TrainConfig, save_weights
    from sde_core.learning.unlearning import EPOCH_METHODS, UnlearnData, unlearn
    from sde_core.pipeline.model_inputs import entry_bundle, load_entry_model
    from sde_core.pipeline.workspace_load import load_workspace
    from sde_core.pipeline.workspace_write import fresh_model_path, relative_to_workspace

    check_model_name(name)
    if save_every is not None:
        from sde_core.common.validation import check_int
        from sde_core.errors import SettingsError

        save_every = check_int(save_every, "--save-every", minimum=1, error=SettingsError)
        if method not in EPOCH_METHODS:
            raise SettingsError(
                f"--save-every keeps a checkpoint every N epochs, and {method!r} has no epochs "
                f"to keep; use one of {', '.join(sorted(EPOCH_METHODS))} or drop --save-every"
            )
    ws = load_workspace(workspace_root, validate=False)
    source = ws.model(original) if original else ws.original()
    bundle = load_dataset(ws.dataset_spec())
    forget = load_index_file(
        ws.path(ws.forget_indices, what="forget_indices", must_exist=True),
        len(bundle.train_labels),
    )
    model = load_entry_model(ws, source, time_limit=time_limit)
    bundle = entry_bundle(ws, source, bundle)  # a language model: its own tokenizer's tokens
    arch = getattr(model, "sde_arch", None)
    if arch is None:
        raise TrainingError(
            f"model {source.name!r} is not built from a registered architecture (a TorchScript "
            "archive?): unlearning needs its weights in a registry architecture"
        )
    arch_kwargs = dict(getattr(model, "sde_arch_kwargs", source.arch_kwargs))
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    recipe = {k: v for k, v in source.hyperparameters.items() if k in fields}
    init = source.init_checkpoint
    init_state = load_entry_model(ws, source, init, time_limit).state_dict() if init else None
    data = UnlearnData.from_forget(
        bundle.train, forget, num_classes=bundle.num_classes or None,
        train_config=TrainConfig.from_dict({**recipe, "device": device}) if recipe else None,
        init_state=init_state,
        model_factory=lambda: build_model(arch, **arch_kwargs),
        device=device,
    )  # fmt: skip
    kept: list[CheckpointRef] = []
    if save_every is not None:
        steps = fresh_model_path(ws, f"models/{name}-epochs")

        def keep(epoch: int, epochs: int, current: Any) -> None:
            if epoch % save_every or epoch == epochs:  # the last epoch is the entry itself
                return
            at = ws.path(f"{steps}/epoch_{epoch:03d}.safetensors")
            saved = save_weights(copy.deepcopy(current).cpu(), at, arch=arch,
                                 arch_kwargs=arch_kwargs)  # fmt: skip
            kept.append(CheckpointRef(epoch / epochs, relative_to_workspace(ws, Path(saved))))

        data.on_epoch = keep
    result = unlearn(method, model, data, **dict(params))
    path: Path
    if family_of(model) is CAUSAL_LM:  # a Hugging Face model folder: save one, with its tokenizer
        from sde_core.inputs.hf_models import HFHiddenStates, save_hf_folder

        target = ws.path(out or fresh_model_path(ws, f"models/{name}"))
        tokenizer = ws.path(source.checkpoint, what=f"model {source.name!r} checkpoint")
        unlearned = result.model.cpu()
        if not isinstance(unlearned, HFHiddenStates):
            raise TrainingError(f"method {method!r} did not return a language model")
        path = save_hf_folder(unlearned, target, tokenizer_from=tokenizer)
    else:
        target = ws.path(out or fresh_model_path(ws, f"models/{name}.safetensors"))
        path = Path(save_weights(result.model.cpu(), target, arch=arch, arch_kwargs=arch_kwargs))
    hyper = result.params_dict()
    return ModelEntry(
        name=name, role="retrained" if method == "retrain" else "unlearned", arch=arch,
        checkpoint=relative_to_workspace(ws, Path(path)), method=method,
        arch_kwargs=source.arch_kwargs or arch_kwargs, hyperparameters=hyper,
        seed=hyper.get("seed"), seconds=round(result.seconds, 3), sha256=file_sha256(path),
        checkpoints=kept,
    )  # fmt: skip
