"""User-facing warnings, for every layer above :mod:`mmsgg_eval.functional` (which stays free of MMEngine)."""
import logging
import warnings


def warn_user(message: str) -> None:
    """A user-facing warning: through ``warnings`` (tests, notebooks) and the runner's log."""
    from mmengine.logging import print_log
    warnings.warn(message, UserWarning, stacklevel=3)
    print_log(message, logger='current', level=logging.WARNING)
