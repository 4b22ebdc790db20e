"""Errors raised when a saved-data file does not follow its format.

Every message names the file and the line (text formats) or record (pickled formats), the sample when it is
known, the field, and what was expected. The offline CLI prints these as one line without a traceback.
"""
import pickle
from typing import Any, Optional, Sequence


def describe(path: str, line: Optional[int] = None, record: Optional[int] = None) -> str:
    """``'preds.jsonl:12'`` (1-based line) or ``'preds.pkl record #5'`` (0-based record) or ``'preds.pkl'``."""
    if line is not None:
        return f'{path}:{line}'
    if record is not None:
        return f'{path} record #{record}'
    return str(path)


class InputFileError(ValueError):
    """A file (or one of its lines / records) that does not follow its format.

    ``where`` is the location (see :func:`describe`); ``sample`` the sample identity when known (e.g.
    ``'sample_idx=3'``); ``field`` the offending field; ``problem`` what is wrong and what was expected.
    """

    def __init__(self, where: str, problem: str, sample: Optional[str] = None, field: Optional[str] = None):
        self.where, self.problem, self.sample, self.field = where, problem, sample, field
        head = where + (f' ({sample})' if sample else '')
        super().__init__(f'{head}: ' + (f'`{field}` ' if field else '') + problem)

    def cli_message(self) -> str:
        """The message as the command line prints it (some errors name a command-line flag instead)."""
        return str(self)


class TruncatedStreamError(InputFileError):
    """A prediction stream without its closing record (copied while written, disk full, killed writer)."""


class MissingSamplesError(InputFileError):
    """The predictions do not cover the dataset (``missing``: the sorted dataset indices without a prediction)."""

    def __init__(self, where: str, missing: Sequence[int], dataset_length: int, show: int = 10,
                 remedy: Optional[str] = None):
        self.missing = list(missing)
        self.dataset_length = int(dataset_length)
        first = ', '.join(str(i) for i in self.missing[:show]) + (', ...' if len(self.missing) > show else '')
        remedy = remedy or ('pass --allow-missing (allow_missing=True) to score them as empty predictions '
                            '(recall 0)')
        super().__init__(
            where, f'{len(self.missing)} of the {self.dataset_length} dataset samples have no prediction '
                   f'(first sample_idx: {first}); evaluate the full dataset, or {remedy}')


class UnsafePickleError(pickle.UnpicklingError):
    """Safe loading refused a pickle that needs code outside the allow-list (``what``: the refused global)."""

    def __init__(self, path: Optional[str], detail: str):
        self.path, self.detail = path, detail
        super().__init__(self._message('pass unsafe=True'))

    def _message(self, how: str) -> str:
        where = f'{self.path}: ' if self.path else ''
        return f'{where}{self.detail}; if you trust the file, {how} (it can run arbitrary code)'

    def cli_message(self) -> str:
        return self._message('rerun with --unsafe-load')

    def located(self, path: str) -> 'UnsafePickleError':
        """The same error naming ``path`` (raised by an unpickler that does not know the file)."""
        return UnsafePickleError(path, self.detail) if self.path is None else self


def value_repr(value: Any, limit: int = 60) -> str:
    """Short JSON-like rendering of a user value for messages (``null`` for None)."""
    text = 'null' if value is None else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + '...'
