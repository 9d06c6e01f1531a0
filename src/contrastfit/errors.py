"""User-facing errors.

Everything the user can get wrong (a data set name, a column, a file, a model) raises
:class:`ContrastfitError` with a one-line message that names the offending file, column or value.
The CLI prints it as ``contrastfit: error: <message>`` and exits with status 2, without a traceback.
"""


class ContrastfitError(Exception):
    """A problem with the user's input or environment, explained in one line."""


class DataError(ContrastfitError, ValueError):
    """Bad or missing data: unknown data set, missing column, empty file, bad encoding, ..."""


class ModelError(ContrastfitError, ValueError):
    """Unknown model name, unreadable model folder, or a run folder that is not a contrastfit model."""


class ConfigError(ContrastfitError, ValueError):
    """Invalid method, hyper-parameter or experiment configuration."""
