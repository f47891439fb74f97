"""``CheckpointError``, the error of every check on an MXFP8 checkpoint: its configuration, its
files and its tensors."""


class CheckpointError(ValueError):
    """A checkpoint or its configuration is not a valid MXFP8 checkpoint for the model."""

    # Users import it from mxlinear.checkpoints; tracebacks and pickles name it there too.
    __module__ = "mxlinear.checkpoints"
