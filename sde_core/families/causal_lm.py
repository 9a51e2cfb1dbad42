"""The causal language-model family: a Hugging Face ``transformers`` model folder (issue 26).

Detected from the ``arch`` of its route (``"hf"``), from the loaded wrapper
(:class:`~sde_core.inputs.hf_models.HFHiddenStates` carries that ``arch``) or from a folder
that ``save_pretrained`` wrote (``config.json`` and weights). Its layers are the pooled hidden
states ``embeddings``, ``layer.<i>``, ``final`` (the wrapper's ``sde_layer_refs``) and the
output-level layers of :mod:`sde_core.inputs.lm_outputs` (method §7.2); it trains
with the next-token negative log-likelihood and is unlearned by the ``llm_*`` methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from sde_core.families.base import ArchitectureEntry, BehaviourMeasure

__all__ = ["CAUSAL_LM", "CausalLMFamily"]


@dataclass(frozen=True)
class CausalLMFamily:
    """The causal language-model family (see :class:`sde_core.families.base.Family`)."""

    name: str = "causal_lm"
    label: str = "causal language model"
    #: the workspace ``arch`` of a Hugging Face model folder
    arch: str | None = "hf"
    architectures: tuple[ArchitectureEntry, ...] = ()
    default_layer: str = "final"
    prediction_layer: str | None = None
    probes_at_noise_levels: bool = False
    has_class_outputs: bool = False
    output_aliases: Mapping[str, str] | None = None  # the wrapper's own sde_layer_refs
    objective: str = "next_token_nll"
    objective_by: str = "sde_core.learning.llm_unlearning.causal_lm_losses"
    methods: frozenset[str] | None = frozenset({"llm_retrain", "llm_ga", "llm_gd", "llm_npo"})
    refusals: Mapping[str, str] = field(default_factory=dict)
    behaviour: tuple[BehaviourMeasure, ...] = (
        BehaviourMeasure(
            "token_loss", "mean next-token loss per text on its answer (else the whole text) "
            "on D_f against D_te and against the retrained model (nats per token)",
            "sde_core.learning.lm_behaviour.lm_text_scores",
        ),
        BehaviourMeasure(
            "likelihood_attack", "AUC of the loss, zlib-ratio, Min-K% and whole-text loss "
            "attacks on D_f vs D_te (DeLong interval), and against the retrained model",
            "sde_core.stats.auc.delong_auc",
        ),
        BehaviourMeasure(
            "behaviour_check", "conflicting evidence: SDE says forgotten, the loss attack says "
            "the model still knows D_f better than the retrained model does",
            "sde_core.pipeline.evaluation.behaviour.behaviour_conflict",
        ),
    )  # fmt: skip
    input_views: tuple[str, ...] = ("texts",)
    #: what REPRODUCTION.md ("Language models: output-level layers") measured; every verdict on
    #: a language model carries it (sde_core.viz.verdicts)
    verdict_note: str = (
        "SDE on this family disagrees with behaviour in our measurements: on the bundled facts "
        "demo no layer we tried — the hidden states at every depth, averaged or at the last "
        "token, nor the output-level layers answer_logprob, answer_topk, answer_dist and "
        "loss_profile — gives verdicts that match the forget set's loss gap and likelihood "
        "attack (gradient ascent and NPO read 'not forgotten' on layer.3 while their forget-set "
        "loss looks like unseen data; the output-level layers withhold nearly every verdict); "
        "judge a language model by its loss and attack on D_f against unseen data "
        "(REPRODUCTION.md, "
        "'Language models: output-level layers')."
    )
    advice: Mapping[str, str] = field(
        default_factory=lambda: {
            "weak_layer": "Try another layer (a middle `layer.<i>` or `final`), another σ, a "
            "larger subset size n or more splits K.",
            "weak_output": "Try another layer (a middle `layer.<i>`), another σ, a larger "
            "subset size n or more splits K.",
            "output_size": "hidden size {n}",
        }
    )

    def detects(self, model: object) -> bool:
        """Whether ``model`` is a loaded model folder (it carries this family's ``arch``)."""
        return getattr(model, "sde_arch", None) == self.arch

    def detects_folder(self, folder: Path) -> bool:
        """Whether a folder holds a ``transformers`` model (``config.json`` + weights), as
        ``save_pretrained`` / ``trainer.save_model`` write it."""
        if not (folder / "config.json").is_file():
            return False
        return any(folder.glob("*.safetensors")) or any(folder.glob("pytorch_model*.bin"))


#: The causal language-model family.
CAUSAL_LM = CausalLMFamily()
