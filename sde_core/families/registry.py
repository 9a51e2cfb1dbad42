"""The one table of model families and the look-ups the library uses.

Adding a family: one module in :mod:`sde_core.families` defining it, one line in
:data:`FAMILIES` (before the classifier, which takes every model no other family detects).
"""

from __future__ import annotations

from pathlib import Path

from sde_core.families.base import Family
from sde_core.families.causal_lm import CAUSAL_LM
from sde_core.families.classifier import CLASSIFIER
from sde_core.families.denoiser import DENOISER
from sde_core.families.signal_regressor import SIGNAL_REGRESSOR

__all__ = [
    "FAMILIES",
    "family_by_arch",
    "family_named",
    "family_of",
    "family_of_arch",
    "family_of_entry",
    "folder_family",
]

#: Every model family, in the order they are asked; the classifier, the default, is last.
FAMILIES: tuple[Family, ...] = (
    DENOISER,
    CAUSAL_LM,
    SIGNAL_REGRESSOR,
    CLASSIFIER,
)


def family_of(model: object) -> Family:
    """The family of a loaded model: the first of :data:`FAMILIES` that detects it."""
    return next(f for f in FAMILIES if f.detects(model))


def family_named(name: str) -> Family:
    """The family called ``name``.

    Raises:
        KeyError: no family has that name.
    """
    for f in FAMILIES:
        if f.name == name:
            return f
    raise KeyError(f"no model family {name!r}; known: {[f.name for f in FAMILIES]}")


def family_by_arch(arch: str | None) -> Family | None:
    """The family whose whole route a workspace ``arch`` names (``"hf"``: a causal language
    model folder), or None when ``arch`` is an architecture of the registry (or empty)."""
    if not arch:
        return None
    return next((f for f in FAMILIES if f.arch == arch), None)


def family_of_arch(arch: str | None) -> Family | None:
    """The family a workspace ``arch`` belongs to without loading the model: the one whose
    route it names (``"hf"``) or that brought it to the registry (``"signal_mlp"``); None for
    the built-in registry's architectures (or an empty ``arch``)."""
    named = family_by_arch(arch)
    if named is not None or not arch:
        return named
    return next((f for f in FAMILIES if any(a.name == arch for a in f.architectures)), None)


def folder_family(arch: str | None, folder: Path) -> Family | None:
    """The family of a model given as a folder: the one its ``arch`` names, else the first
    that recognises the folder's files; None when the folder holds no model."""
    return family_by_arch(arch) or next((f for f in FAMILIES if f.detects_folder(folder)), None)


def family_of_entry(arch: str | None, layer: str) -> Family:
    """The family of a workspace model known by its ``arch`` and an evaluated ``layer``,
    without loading it: the family its ``arch`` names or belongs to (:func:`family_of_arch`),
    else one probed at noise levels when the layer names one (``denoised@0.5``), else the
    classifier."""
    named = family_of_arch(arch)
    if named is not None:
        return named
    if "@" in layer:  # <layer>@<σ_t>: the naming of a family probed at noise levels (method §14)
        return next(f for f in FAMILIES if f.probes_at_noise_levels)
    return CLASSIFIER
