"""Model families: what differs between a classifier, a denoiser and a causal language model.

Everything the library asks about a model's kind is answered by its family
(:class:`~.base.Family`): how it is detected (from the loaded module, its ``arch`` or a model
folder), how its layers are named and probed, its training objective, which unlearning methods
apply, its behaviour measures, how its inputs are shown and the advice the dashboard gives for
it. One module per family (e.g. :mod:`~.classifier`, :mod:`~.denoiser`, :mod:`~.causal_lm`)
and one table, :data:`~.registry.FAMILIES`, with the look-ups
(:func:`~.registry.family_of`, :func:`~.registry.family_by_arch`,
:func:`~.registry.folder_family`). A new family is one module here plus one line in that
table. Import each name from the module that defines it.
"""
