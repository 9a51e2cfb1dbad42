"""The texts that differ by model family (classifier, language model, denoiser), in one
place so they can move into a model-family seam; the family comes from
:func:`sde_core.services.answer.model_family`."""

from __future__ import annotations

__all__ = ["behaviour_missing", "layer_advice"]


def layer_advice(family: str, layer: str) -> str:
    """What to try when the paper's reference test does not separate at ``layer``."""
    rest = "another σ, a larger subset size n or more splits K"
    if family == "classifier":
        if layer == "output":
            return f"Try {rest} (this layer, the softmax `output`, is usually the strongest)."
        return f"Try another layer (the softmax `output` is usually strongest), {rest}."
    if family == "denoiser":
        return (
            f"Try another layer or another noise level σ_t (the denoised output at a low "
            f"σ_t, e.g. `denoised@0.5`, method §14), {rest}."
        )
    return f"Try another layer (a later hidden state usually separates better), {rest}."


def behaviour_missing(family: str) -> str:
    """The cell shown where a classifier's accuracy or attack column has no value."""
    if family == "language model":
        return "n/a (language model)"
    if family == "denoiser":
        return "n/a (denoiser)"
    return "n/a"
