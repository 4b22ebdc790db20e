"""What the command lines share: the user errors they print as one line (exit status 1, no traceback), that
line's text, and the argparse types and options common to ``tools/test.py`` and ``python -m mmsgg_eval.eval``."""
import argparse
import pickle

#: Exceptions a command line prints as one message (anything else is a bug and keeps its traceback).
USER_ERRORS = (ValueError, OSError, KeyError, SyntaxError, pickle.UnpicklingError)


def _int_at_least(text: str, minimum: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f'must be a {what}, got {text!r}') from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f'must be a {what} (>= {minimum}), got {value}')
    return value


def positive_int_arg(text: str) -> int:
    """argparse ``type=`` of a count option: an integer >= 1, else an error naming the option (exit status 2)."""
    return _int_at_least(text, 1, 'positive integer')


def non_negative_int_arg(text: str) -> int:
    """argparse ``type=`` of a count that may be 0: an integer >= 0, else an error naming the option."""
    return _int_at_least(text, 0, 'non-negative integer')


def add_save_state_argument(parser: argparse.ArgumentParser) -> None:
    """``--save-state DIR`` of both command lines (offline and ``tools/test.py``)."""
    parser.add_argument('--save-state', metavar='DIR',
                        help='write every metric\'s evaluation state (reduced rows, settings, GT hash) into DIR '
                             '(main rank), to merge shards or summarise again with python -m mmsgg_eval.eval '
                             '--from-state DIR')


def add_per_image_argument(parser: argparse.ArgumentParser) -> None:
    """``--per-image PATH`` of both command lines (offline and ``tools/test.py``)."""
    parser.add_argument('--per-image', metavar='PATH',
                        help='write per-image results (JSON lines: per-image R@K, GT relations with their '
                             'first-hit ranks, top predictions and the GT relations they hit) to PATH')


def add_bootstrap_argument(parser: argparse.ArgumentParser) -> None:
    """``--bootstrap N`` of both command lines (offline and ``tools/test.py``)."""
    parser.add_argument('--bootstrap', type=positive_int_arg, metavar='N',
                        help='95%% bootstrap interval of every key from N resamples of the images (reports, '
                             'tables, metrics.json; docs/metrics.md)')


def check_environment() -> None:
    """The settings the command lines read from the environment, checked before any work: a bad
    ``MMSGG_EVAL_NUM_THREADS`` is a ValueError naming it (:func:`mmsgg_eval.functional.threads.get_setting`)."""
    from mmsgg_eval.functional.threads import get_setting
    get_setting()


def cli_message(err: BaseException) -> str:
    """The one-line text of a user error (an input file's own ``cli_message`` when it has one)."""
    if hasattr(err, 'cli_message'):
        return err.cli_message()
    if isinstance(err, KeyError) and err.args:
        return str(err.args[0])
    return str(err) or type(err).__name__
