"""Optuna's storage on the project's database: the one place that opens it.

Optuna keeps its tables beside ours under the same URL (db.py); whatever reads or writes a
study opens it here, so how (an RDBStorage, how long its engine lives) is decided once. An
in-memory study (a throwaway for importances, a benchmark) needs none of this.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import optuna
from optuna.samplers import BaseSampler
from optuna.storages import BaseStorage, RDBStorage


def open_storage(url: str) -> RDBStorage:
    """Optuna's storage at `url`; creates or migrates Optuna's own tables where needed."""
    return RDBStorage(url)


@contextmanager
def reading(url: str) -> Iterator[RDBStorage]:
    """The storage for a few reads; its connections are closed after."""
    storage = open_storage(url)
    try:
        yield storage
    finally:
        storage.engine.dispose()


def load_study(url: str, name: str) -> optuna.Study:
    """The study `name` at `url`; KeyError where there is none."""
    return optuna.load_study(study_name=name, storage=open_storage(url))


def create_or_load_study(storage: BaseStorage, name: str, sampler: BaseSampler) -> optuna.Study:
    """The maximising study `name`, created, or loaded where it exists (a resumed campaign's:
    it continues with `sampler`, which starts afresh)."""
    return optuna.create_study(study_name=name, storage=storage, direction="maximize",
                               sampler=sampler, load_if_exists=True)


def has_study(storage: BaseStorage, name: str) -> bool:
    return name in optuna.study.get_all_study_names(storage)
