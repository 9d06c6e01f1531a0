"""The files of a saved model folder (``contrastfit train``'s output), named once: the model's
record, its head's weights, the encoder's sub-folder and the format's version. Standard library
only, below :mod:`contrastfit.modeling` (which writes and reads them) and :mod:`contrastfit.hub`
(which uploads them)."""

__all__ = ["CONFIG_NAME", "ENCODER_DIR", "FORMAT_VERSION", "HEAD_NAME"]

CONFIG_NAME = "contrastfit.json"
HEAD_NAME = "head.safetensors"
ENCODER_DIR = "encoder"
FORMAT_VERSION = 1
