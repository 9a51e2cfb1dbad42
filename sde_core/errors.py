"""Exception hierarchy of :mod:`sde_core`.

Every error the library raises on bad *input* derives from :class:`SDEError`, itself a
:class:`ValueError`, so callers can catch one type. Messages name the problem and the fix, e.g.
``"subset has 3 rows; a split-half test needs at least 4 (two per half): use a larger subset"``.
Programming errors (bugs) are not wrapped: they surface as ordinary Python exceptions.
"""

from __future__ import annotations

__all__ = [
    "ActivationError",
    "CheckpointError",
    "DataError",
    "EngineError",
    "ExportError",
    "InputError",
    "PathError",
    "PlanError",
    "SDEError",
    "SettingsError",
    "SigningError",
    "StoreError",
    "TrainingError",
    "WorkspaceError",
]


class SDEError(ValueError):
    """Base class of every input error raised by :mod:`sde_core`."""


class InputError(SDEError):
    """An array or scalar argument is malformed (shape, dtype, NaN/inf, range)."""


class PathError(InputError):
    """A path is malformed or leaves the allowed folders (see :mod:`sde_core.common.paths`)."""


class CheckpointError(SDEError):
    """A checkpoint file cannot be loaded safely or does not match the architecture."""


class DataError(SDEError):
    """A dataset, index file or forget set is missing, malformed or inconsistent."""


class ActivationError(SDEError):
    """A layer name is unknown or activations cannot be extracted/cached."""


class WorkspaceError(SDEError):
    """A ``workspace.toml`` or one of the files it names is invalid."""


class SettingsError(SDEError):
    """Evaluation settings (layer, sigma, subset size, splits, ...) are invalid."""


class TrainingError(SDEError):
    """Training or unlearning parameters are invalid."""


class StoreError(SDEError):
    """The results store cannot be opened or a stored run is inconsistent."""


class PlanError(SDEError):
    """An experiment plan file is invalid."""


class EngineError(SDEError):
    """A job graph is invalid, a job failed for good, or the cluster cannot be reached."""


class ExportError(SDEError):
    """A figure cannot be rendered to an image file on the server."""


class SigningError(SDEError):
    """A signing key cannot be read, or a report's signature file is missing or malformed."""
