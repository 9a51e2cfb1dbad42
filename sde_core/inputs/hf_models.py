"""Hugging Face model folders (``save_pretrained`` / ``Trainer.save_model``) as models.

A folder holding ``config.json`` and ``model.safetensors`` (or shards) is loaded with
``transformers`` from local files only (``local_files_only=True``, nothing is downloaded) and
from its safetensors weights only. A folder whose weights exist only as pickles
(``pytorch_model.bin``) or whose ``config.json`` names custom model code (``auto_map``, what
``trust_remote_code`` would run) is code: it loads only with the trusted opt-in, like a
TorchScript archive (:func:`sde_core.inputs.checkpoint_files.inspect_checkpoint` tells which).

The loaded model is wrapped in :class:`HFHiddenStates`, whose layers are the hidden states of
the transformer, pooled over the tokens of each text:

- ``embeddings``: the input embeddings (token + position), ``(d_model,)`` per text;
- ``layer.0`` … ``layer.{N-1}``: the output of each of the ``N`` decoder blocks;
- ``final``: the last hidden state after the final normalisation (also the ``output`` alias);
- for a causal LM (a model with a language-model head), the output-level layers
  ``answer_logprob``, ``answer_topk`` and ``loss_profile`` of :mod:`sde_core.inputs.lm_outputs`.

Its input is one integer tensor ``(batch, 2, max_length)`` per batch: the token ids and the
attention mask (1 = a real token, 0 = padding) of the tokenised texts
(:mod:`sde_core.inputs.text_data`). Pooling is ``"mean"`` (the average over the non-padding
tokens) or ``"last"`` (the state of the last non-padding token, what a causal model has read the
whole text at); the evaluation setting ``pool`` chooses it (true: mean, false: last).

``transformers`` is an optional dependency (``pip install -e '.[llm]'``), imported only when a
folder is loaded, so the vision paths never import it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from sde_core.errors import CheckpointError
from sde_core.families.causal_lm import CAUSAL_LM
from sde_core.inputs.architectures import MAX_MODEL_BYTES
from sde_core.inputs.checkpoint_files import (
    CheckpointInfo,
    folder_code,
    inspect_checkpoint,
    untrusted_message,
)
from sde_core.inputs.lm_outputs import OUTPUT_LAYERS, output_representations

__all__ = [
    "POOLINGS",
    "HFHiddenStates",
    "hf_layer_names",
    "is_hf_folder",
    "load_hf_folder",
    "load_tokenizer",
    "pool_tokens",
    "save_hf_folder",
    "transformers_module",
]

#: ``arch`` of a Hugging Face model folder in a workspace (``--arch hf``).
#: How the hidden states of a text's tokens become one vector.
POOLINGS = ("mean", "last")
_INSTALL = "pip install -e '.[llm]' (transformers, tokenizers, datasets)"
log = logging.getLogger(__name__)


def transformers_module() -> Any:
    """The ``transformers`` package, imported on first use with its progress bars off.

    Raises:
        CheckpointError: it is not installed (the message says how to install it).
    """
    try:
        import transformers
    except ImportError:
        raise CheckpointError(
            f"reading a Hugging Face model folder needs the optional transformers package: "
            f"{_INSTALL}"
        ) from None
    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    return transformers


def is_hf_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder with a ``config.json`` (a ``save_pretrained`` folder)."""
    p = Path(path)
    return p.is_dir() and (p / "config.json").is_file()


def pool_tokens(hidden: torch.Tensor, mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per text from token states.

    Args:
        hidden: ``(batch, length, d)`` hidden states.
        mask: ``(batch, length)`` attention mask, 1 for real tokens (left or right padding).
        pooling: ``"mean"`` over the real tokens or ``"last"`` real token.

    Returns:
        float32 ``(batch, d)``.
    """
    if pooling == "mean":
        weights = mask.to(hidden.dtype).unsqueeze(-1)
        return ((hidden * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)).float()
    positions = torch.arange(mask.shape[1], device=mask.device).expand_as(mask)
    last = (positions * (mask > 0)).argmax(dim=1)
    return hidden[torch.arange(hidden.shape[0], device=hidden.device), last].float()


class _Tap(nn.Module):
    """An identity module: the place a forward hook reads a pooled hidden state from."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def _decoder_blocks(lm: nn.Module, n_layers: int) -> nn.ModuleList:
    """The model's ``n_layers`` transformer blocks (GPT-2 ``transformer.h``, Llama
    ``model.layers`` …): the first ``nn.ModuleList`` of that length."""
    for _, module in lm.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) == n_layers:
            return module
    raise CheckpointError(
        f"cannot find the {n_layers} transformer blocks of this {type(lm).__name__}: export its "
        "hidden states yourself (docs/bring-your-own.md, export_hidden.py)"
    )


class HFHiddenStates(nn.Module):
    """A ``transformers`` model whose pooled hidden states are addressable layers.

    Input: an integer tensor ``(batch, 2, length)`` (token ids, attention mask); a float tensor
    holding the same integers is accepted (the extraction casts inputs to the model's dtype).
    Output: the pooled ``final`` hidden state, float32 ``(batch, d)``.

    Attributes:
        lm: the wrapped ``transformers`` model (a causal LM when the folder is one).
        pooling: ``"mean"`` or ``"last"`` (see :func:`pool_tokens`).
        layer_names: ``embeddings``, ``layer.0`` … ``layer.{N-1}``, ``final`` and, for a
            causal LM, the output-level layers (:data:`~sde_core.inputs.lm_outputs.OUTPUT_LAYERS`).
    """

    def __init__(self, lm: nn.Module, n_layers: int) -> None:
        super().__init__()
        self.lm = lm
        self.embeddings = _Tap()
        self.layer = nn.ModuleList(_Tap() for _ in range(n_layers))
        self.final = _Tap()
        self.pooling = "mean"
        self.blocks = [_decoder_blocks(lm, n_layers)]  # a list: not a second registration
        heads = getattr(lm, "get_output_embeddings", None)
        self.output_layers = OUTPUT_LAYERS if callable(heads) and heads() is not None else ()
        for name in self.output_layers:
            self.add_module(name, _Tap())
        self.layer_names = (
            "embeddings", *(f"layer.{i}" for i in range(n_layers)), "final", *self.output_layers
        )  # fmt: skip
        # what sde_core.inputs.activations lists and resolves (not the wrapped model's modules)
        self.sde_exposed_modules = self.layer_names
        self.sde_layer_refs = {"output": "final"}
        self.sde_arch = CAUSAL_LM.arch
        self.sde_arch_kwargs: dict[str, Any] = {}

    def set_pooling(self, pooling: str) -> None:
        """Choose how token states are pooled (``"mean"`` or ``"last"``).

        Raises:
            CheckpointError: another value.
        """
        if pooling not in POOLINGS:
            raise CheckpointError(f"pooling must be one of {list(POOLINGS)}, got {pooling!r}")
        self.pooling = pooling

    @staticmethod
    def split_inputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(batch, 2, length)`` → token ids and attention mask (see :meth:`read_inputs`)."""
        ids, mask, _ = HFHiddenStates.read_inputs(x)
        return ids, mask

    @staticmethod
    def read_inputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(batch, 2, length)`` → token ids and attention mask, both int64 ``(batch, length)``,
        and the bool answer tokens (the mask channel's value 2; any value > 0 is a real token).

        A row without any real token (a dry run on zeros) gets its first position unmasked, so
        attention and pooling stay finite; columns that are padding in every row are dropped
        (they change no real token's state, and cost time).

        Raises:
            CheckpointError: a tensor of another shape.
        """
        if x.dim() != 3 or x.shape[1] != 2:
            raise CheckpointError(
                f"a language model takes (batch, 2, length) token ids and masks, got "
                f"{tuple(x.shape)}: use a text dataset (kind = 'text')"
            )
        ids = x[:, 0].round().long() if x.is_floating_point() else x[:, 0].long()
        raw = x[:, 1].round().long() if x.is_floating_point() else x[:, 1].long()
        answer, mask = raw == 2, (raw > 0).long()
        mask[mask.sum(dim=1) == 0, 0] = 1
        keep = mask.any(dim=0)  # drop the columns that are padding in every row
        return ids[:, keep], mask[:, keep], answer[:, keep]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Run the model once; every tap sees its pooled ``(batch, d)`` state."""
        ids, mask, answer = self.read_inputs(x)
        states: list[torch.Tensor] = []

        def keep(_m: nn.Module, _a: tuple, out: Any) -> None:
            states.append(out[0] if isinstance(out, tuple | list) else out)

        handles = [block.register_forward_hook(keep) for block in self.blocks[0]]
        try:
            out = self.lm(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        finally:
            for handle in handles:
                handle.remove()
        hidden = out.hidden_states
        self.embeddings(pool_tokens(hidden[0], mask, self.pooling))
        for tap, state in zip(self.layer, states, strict=True):
            tap(pool_tokens(state, mask, self.pooling))
        taps = [getattr(self, name) for name in self.output_layers]
        if any(tap._forward_hooks for tap in taps):  # computed only when a layer is read
            reps = output_representations(out.logits, ids, mask, answer, self.pooling)
            for name, tap in zip(self.output_layers, taps, strict=True):
                tap(reps[name])
        return self.final(pool_tokens(hidden[-1], mask, self.pooling))

    def token_losses(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Next-token negative log-likelihood of each text (nats).

        Returns:
            ``(summed, counts)``: float32 ``(batch,)`` sums of the NLL over the predicted tokens
            (every real token after the first) and int64 ``(batch,)`` their numbers. Gradients
            flow through ``summed`` when grad mode is on.

        Raises:
            CheckpointError: the wrapped model has no language-model head.
        """
        ids, mask = self.split_inputs(x)
        logits = getattr(self.lm(input_ids=ids, attention_mask=mask), "logits", None)
        if logits is None:
            raise CheckpointError(
                f"{type(self.lm).__name__} has no language-model head: losses need a causal LM"
            )
        targets = ids[:, 1:]
        valid = (mask[:, 1:] > 0) & (mask[:, :-1] > 0)
        nll = nn.functional.cross_entropy(
            logits[:, :-1].float().transpose(1, 2), targets, reduction="none"
        )
        return (nll * valid).sum(dim=1), valid.sum(dim=1)


def _weights_bytes(folder: Path) -> int:
    """float32 bytes of every tensor the folder's safetensors files describe (headers only);
    for pickled weights alone, twice their files' size (float16 files double in float32)."""
    from safetensors import safe_open

    if not any(folder.glob("*.safetensors")):
        return 2 * sum(p.stat().st_size for p in folder.glob("pytorch_model*.bin"))
    total = 0
    for file in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(str(file), framework="pt") as fh:
                for key in fh.keys():  # noqa: SIM118 - safe_open is not a mapping
                    numel = 1
                    for size in fh.get_slice(key).get_shape():
                        numel *= int(size)
                    total += 4 * numel
        except Exception as exc:  # SafetensorError, OSError: not a safetensors file
            first = str(exc).strip().split("\n")[0][:160]
            raise CheckpointError(
                f"{folder.name}/{file.name} is not a readable safetensors file "
                f"({type(exc).__name__}: {first}); re-save the model folder with save_pretrained"
            ) from None
    return total


def _config_bytes(transformers: Any, config: Any, remote: bool) -> int:
    """float32 bytes of the model ``config`` describes, built on the meta device (no memory)."""
    with torch.device("meta"):
        try:
            probe = transformers.AutoModelForCausalLM.from_config(config, trust_remote_code=remote)
        except ValueError:  # not a causal LM (e.g. an encoder): its base model
            probe = transformers.AutoModel.from_config(config, trust_remote_code=remote)
    return 4 * sum(p.numel() for p in probe.parameters())


def _check_config_size(
    transformers: Any, config: Any, path: Path, weights: int, budget: int, remote: bool
) -> None:
    """Refuse a folder whose ``config.json`` describes a model over the budget, or far larger
    than its weights, before anything is allocated: loading it would fill the missing weights
    with random ones (a 7-billion-parameter default configuration next to a tiny weights file
    needs 28 GB)."""
    need = _config_bytes(transformers, config, remote)
    if need > budget:
        raise CheckpointError(
            f"{path.name}/config.json describes a model of {need / 2**30:.1f} GiB of float32 "
            f"weights, over the {budget / 2**30:.1f} GiB budget (SDE_MAX_MODEL_BYTES); export "
            "its hidden states on a larger machine (docs/bring-your-own.md)"
        )
    if weights and need > 2 * weights:
        raise CheckpointError(
            f"{path.name}/config.json describes {need // 4:,} parameters but its weights hold "
            f"{weights // 4:,}: the folder is incomplete or its config belongs to another model; "
            "re-save it with save_pretrained"
        )


def _num_layers(config: Any) -> int:
    for name in ("num_hidden_layers", "n_layer", "num_layers"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    raise CheckpointError(
        f"{type(config).__name__} names no number of layers (num_hidden_layers): not a "
        "transformer model folder"
    )


def _remote_code(folder: Path) -> bool:
    try:
        return "auto_map" in json.loads((folder / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def load_hf_folder(
    folder: str | Path, *, trusted: bool = False, max_bytes: int | None = None
) -> HFHiddenStates:
    """Load a Hugging Face model folder as an :class:`HFHiddenStates` (eval mode, float32, CPU).

    Args:
        folder: the folder ``save_pretrained`` or ``Trainer.save_model`` wrote.
        trusted: allow pickled ``.bin`` weights and custom model code (``trust_remote_code``).
        max_bytes: memory budget of the float32 weights (default ``MAX_MODEL_BYTES``).

    Raises:
        CheckpointError: not a model folder, code without ``trusted``, over the budget,
            ``transformers`` missing, or a folder it cannot read.
    """
    path = Path(folder)
    info: CheckpointInfo = inspect_checkpoint(path)
    if info.format != "hf-folder":
        raise CheckpointError(f"{path} is not a Hugging Face model folder (no config.json)")
    if info.is_code and not trusted:
        raise CheckpointError(untrusted_message(info))
    budget = MAX_MODEL_BYTES if max_bytes is None else int(max_bytes)
    need = _weights_bytes(path)
    if need > budget:
        raise CheckpointError(
            f"{path.name} holds {need / 2**30:.1f} GiB of float32 weights, over the "
            f"{budget / 2**30:.1f} GiB budget (SDE_MAX_MODEL_BYTES); export its hidden states "
            "on a larger machine (docs/bring-your-own.md)"
        )
    transformers = transformers_module()
    remote = bool(trusted and _remote_code(path))
    safetensors_only = any(path.glob("*.safetensors"))
    options = {"local_files_only": True, "trust_remote_code": remote}
    try:
        config = transformers.AutoConfig.from_pretrained(path, **options)
        _check_config_size(transformers, config, path, need, budget, remote)
        load = {"use_safetensors": safetensors_only, "dtype": torch.float32, **options}
        try:
            lm = transformers.AutoModelForCausalLM.from_pretrained(path, **load)
        except ValueError:  # not a causal LM (e.g. an encoder): its base model
            lm = transformers.AutoModel.from_pretrained(path, **load)
    except CheckpointError:
        raise
    except Exception as exc:  # transformers raises many types for a broken folder
        first = str(exc).strip().split("\n")[0][:240]
        raise CheckpointError(
            f"cannot load the model folder {path.name} ({type(exc).__name__}: {first}); "
            "re-save it with save_pretrained"
        ) from None
    model = HFHiddenStates(lm.float().eval(), _num_layers(config))
    return model.eval()


def hf_layer_names(model: nn.Module) -> tuple[str, ...]:
    """The addressable layers of an :class:`HFHiddenStates` (empty for any other model)."""
    return tuple(getattr(model, "layer_names", ())) if isinstance(model, HFHiddenStates) else ()


def load_tokenizer(folder: str | Path) -> Any:
    """The tokenizer saved in a model folder (local files only), with a padding token.

    A tokenizer without one (GPT-2's) pads with its end-of-text token; the attention mask keeps
    padding out of every pooled state and loss.

    Raises:
        DataError: no tokenizer files in the folder, or ``transformers`` missing.
    """
    from sde_core.errors import DataError

    path = Path(folder)
    try:
        transformers = transformers_module()
    except CheckpointError as exc:
        raise DataError(str(exc)) from None
    if not path.is_dir():
        raise DataError(
            f"tokenizer folder {path} does not exist: set options.tokenizer to the model folder "
            "holding tokenizer.json / tokenizer_config.json"
        )
    try:
        code = folder_code(path)
    except CheckpointError as exc:
        raise DataError(str(exc)) from None
    if code:
        raise DataError(
            f"the tokenizer folder {path} was not loaded: it holds code that transformers "
            f"would run (trust_remote_code): {', '.join(code[:4])}. Nothing in it was run; a "
            "tokenizer's own code never runs here. Point options.tokenizer at a folder with a "
            "standard tokenizer: tokenizer.json and a tokenizer_config.json without auto_map, "
            "and no .py files (save the fast tokenizer with save_pretrained where you trust "
            "its code, then delete auto_map and the .py files)"
        )
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            path, local_files_only=True, trust_remote_code=False
        )
    except Exception as exc:  # transformers raises many types for a missing tokenizer
        first = str(exc).strip().split("\n")[0][:200]
        raise DataError(
            f"cannot load a tokenizer from {path} ({type(exc).__name__}: {first}): the folder "
            "needs the tokenizer files save_pretrained writes (tokenizer.json, "
            "tokenizer_config.json)"
        ) from None
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise DataError(
                f"the tokenizer in {path} has neither a padding nor an end-of-text token: add "
                "a pad_token to its tokenizer_config.json"
            )
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def save_hf_folder(
    model: HFHiddenStates, folder: str | Path, tokenizer_from: str | Path | None = None
) -> Path:
    """Write the wrapped model as a ``save_pretrained`` folder (safetensors), with the
    tokenizer files of ``tokenizer_from`` when given. Returns the folder.

    Raises:
        CheckpointError: ``model`` is not an :class:`HFHiddenStates`.
    """
    if not isinstance(model, HFHiddenStates):
        raise CheckpointError(f"save_hf_folder needs an HFHiddenStates, got {type(model).__name__}")
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    save: Callable[..., Any] = model.lm.save_pretrained  # type: ignore[assignment]
    save(out, safe_serialization=True)
    if tokenizer_from is not None:
        load_tokenizer(tokenizer_from).save_pretrained(out)
    return out
