"""Opening a workspace and describing it for the front ends: what the dashboard's pages need to
know about a workspace without importing the pipeline or the input layers themselves.

- the workspace model and its checks: :class:`Workspace`, :func:`load_workspace`,
  :func:`validate_workspace` (its :class:`Problem` list), :data:`ROLES`, :data:`WORKSPACE_FILE`;
- the choices a new workspace or model offers: :data:`DATASET_KINDS`, :data:`ARCHITECTURES`,
  :data:`DEFAULT_TIME_LIMIT` (seconds per step of a trusted code checkpoint), the file suffixes
  a checkpoint or index file may have (:data:`CHECKPOINT_SUFFIXES`, :data:`INDEX_SUFFIXES`);
- :func:`load_bundle` (its dataset), :func:`content_hash` (what a link and the results store
  are keyed by), :func:`check_records` (findings trusted while a file is unchanged),
  :func:`layer_listing_key` / :func:`model_layer_infos` (a model's layers) and
  :func:`checkpoint_fractions` (a model's training checkpoints);
- :func:`weak_layer_advice`: what to try when a layer does not separate, in the words of the
  model's family (:mod:`sde_core.families`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sde_core.common.hashing import file_sha256, stable_hash
from sde_core.common.stamps import RecordedHashes, StampRecords
from sde_core.errors import SDEError
from sde_core.families.registry import family_of_entry
from sde_core.inputs.architectures import ARCHITECTURES
from sde_core.inputs.checkpoint_files import CHECKPOINT_SUFFIXES
from sde_core.inputs.data import DATASET_KINDS, DatasetBundle, load_dataset
from sde_core.inputs.indices import INDEX_SUFFIXES
from sde_core.inputs.isolation import DEFAULT_TIME_LIMIT
from sde_core.inputs.layers import LayerInfo
from sde_core.pipeline.model_inputs import entry_layer_infos
from sde_core.pipeline.sweeps import available_fractions
from sde_core.pipeline.workspace import (
    ROLES,
    WORKSPACE_FILE,
    Problem,
    Workspace,
    cache_path,
    workspace_hash,
)
from sde_core.pipeline.workspace_checks import validate_workspace
from sde_core.pipeline.workspace_load import load_workspace

__all__ = [
    "ARCHITECTURES",
    "CHECKPOINT_SUFFIXES",
    "DATASET_KINDS",
    "DEFAULT_TIME_LIMIT",
    "INDEX_SUFFIXES",
    "ROLES",
    "WORKSPACE_FILE",
    "DatasetBundle",
    "LayerInfo",
    "Problem",
    "Workspace",
    "check_records",
    "checkpoint_fractions",
    "content_hash",
    "layer_listing_key",
    "load_bundle",
    "load_workspace",
    "model_layer_infos",
    "validate_workspace",
    "weak_layer_advice",
]


def load_bundle(ws: Workspace) -> DatasetBundle:
    """The workspace's dataset (D_tr, D_te and what describes them)."""
    return load_dataset(ws.dataset_spec())


def content_hash(ws: Workspace, bundle: DatasetBundle) -> str:
    """The workspace's content hash: its data (``bundle``'s fingerprint), forget set and every
    checkpoint (64 hex digits; a link carries the first 16).

    A file's SHA-256 is read from the workspace's check record (:func:`check_records`)
    while the file's stamp is unchanged, and recorded when it is computed
    (:class:`~sde_core.common.stamps.RecordedHashes`): a new process does not re-read every
    checkpoint of a workspace of hundreds of models. Without a usable cache folder every file
    is hashed.
    """
    try:
        hashes: RecordedHashes | None = RecordedHashes(check_records(ws))
    except SDEError:  # a cache folder that leaves the workspace: hash every file
        hashes = None
    digest = workspace_hash(ws, data_fingerprint=bundle.fingerprint, file_hashes=hashes)
    if hashes is not None:
        hashes.flush()
    return digest


def check_records(ws: Workspace) -> StampRecords:
    """The workspace's record of findings trusted while a file is unchanged (``checks.json``
    in its cache folder: checkpoint digests, the results store's structural check).

    Raises:
        WorkspaceError: the cache folder resolves outside the allowed folders.
    """
    return StampRecords(cache_path(ws.root, "checks"))


def layer_listing_key(ws: Workspace, model: str) -> str:
    """What a model's layer listing depends on: its checkpoint (or activations file) content,
    architecture and trust — a key for caching :func:`model_layer_infos`."""
    entry = ws.model(model)
    file = ws.path(entry.activations or entry.checkpoint, must_exist=True)
    return stable_hash([file_sha256(file), entry.arch, entry.arch_kwargs, bool(entry.trusted)])


def model_layer_infos(ws: Workspace, model: str, input_shape: Sequence[int]) -> list[LayerInfo]:
    """The layers ``model`` offers (aliases first, each with its per-sample shape) for inputs of
    ``input_shape``, or the layers of its activations file."""
    return entry_layer_infos(ws, ws.model(model), input_shape)


def checkpoint_fractions(ws: Workspace, model: str) -> list[float]:
    """The fractions of training at which ``model`` has a checkpoint, sorted (1.0 is the final
    one; 0.0 when it records its initial weights)."""
    return available_fractions(ws.model(model))


def weak_layer_advice(ws: Workspace, model: str, layer: str) -> str:
    """What to try when the paper's reference test does not separate at ``layer`` of
    ``model``: its family's advice (the softmax ``output`` hint is a classifier's)."""
    family = family_of_entry(ws.model(model).arch, layer)
    at_strongest = layer == family.default_layer
    return family.advice["weak_output" if at_strongest else "weak_layer"]
