"""One Optuna study shared by several processes (``contrastfit experiment CONFIG --search optuna`` started
more than once, on one machine or on many): where its trials live and how many each process runs.

``search.storage`` (:func:`open_storage`):

* none: the SQLite file ``OUTPUT/optuna.sqlite3``, for the processes of one machine;
* ``journal`` or ``journal:PATH``: Optuna's journal file (``optuna.storages.JournalStorage`` on a
  ``JournalFileBackend``; ``journal`` alone is ``OUTPUT/optuna.journal``): one append-only file that
  Optuna locks itself, also on NFS, so processes on every machine that sees a shared folder can share it
  without a database server;
* any other value, a database URL (``sqlite:///FILE``, ``postgresql://USER@HOST/DB``,
  ``mysql+pymysql://...``): Optuna's RDB storage (the driver's package must be installed).

Every process runs trials until the study holds ``search.trials`` of them, finished or running
(:func:`run_trials`): it counts them and asks Optuna for the next trial under a lock (an Optuna
``JournalFileOpenLock`` beside a journal, which holds on NFS; a lock file beside the default SQLite file;
a database URL has none, so two processes asking at the same instant may add one trial more than
``trials``). Each trial records the host and process that runs it (``user_attrs["contrastfit_runner"]``);
a trial left running by a process of this host that died is marked failed and its place goes to a new
trial, so a killed process loses no trial. A running trial of another host counts as alive (its process
cannot be checked from here), as a claim in the results store does.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from pathlib import Path
from typing import Any, Callable, Iterator

from .store import file_lock, pid_alive

__all__ = ["RUNNER_ATTR", "next_trial", "open_storage", "run_trials"]

#: The user attribute of a trial naming the process that runs it: ``{"host", "pid", "started"}``.
RUNNER_ATTR = "contrastfit_runner"


def open_storage(spec: str | None, out: Path) -> tuple[Any, str, Callable[[], Any]]:
    """``search.storage`` as ``(what optuna.create_study takes, its description, the budget lock)``: the
    lock is a function returning the context manager :func:`next_trial` holds while it counts the trials
    and asks for one (a null one for a database URL)."""
    if spec is None:
        path = (Path(out) / "optuna.sqlite3").resolve()
        return f"sqlite:///{path}", f"sqlite:///{path}", lambda: file_lock(f"{path}.trials.lock")
    if spec == "journal" or spec.startswith("journal:"):
        import optuna
        from optuna.storages.journal import JournalFileBackend, JournalFileOpenLock

        path = Path(spec.partition(":")[2] or Path(out) / "optuna.journal").expanduser().absolute()
        path.parent.mkdir(parents=True, exist_ok=True)

        @contextlib.contextmanager
        def lock() -> Iterator[None]:
            budget = JournalFileOpenLock(f"{path}.trials")  # an O_EXCL lock file, as Optuna's journal uses on NFS
            budget.acquire()
            try:
                yield
            finally:
                budget.release()

        return optuna.storages.JournalStorage(JournalFileBackend(str(path))), f"journal:{path}", lock
    return spec, spec, contextlib.nullcontext


def _alive(trial: Any) -> bool:
    """Whether a running trial's process may still run it: one of another host, or one recorded before
    trials named their process, counts as alive; one of this host whose process is gone does not."""
    runner = trial.user_attrs.get(RUNNER_ATTR)
    if not isinstance(runner, dict) or runner.get("host") != socket.gethostname():
        return True
    return pid_alive(runner.get("pid"), since=runner.get("started"))


def next_trial(study: Any, trials: int, lock: Callable[[], Any]) -> Any:
    """This process's next trial of ``study``, or None when the study holds ``trials`` finished or running
    ones. A running trial whose process of this host is gone is marked failed first (its place goes to a
    new trial); a running trial that names no process (left by an older contrastfit) is not counted, as
    before trials named theirs."""
    import optuna

    states = optuna.trial.TrialState
    with lock():
        used = 0
        for t in study.get_trials(deepcopy=False, states=(states.COMPLETE, states.RUNNING, states.WAITING)):
            if t.state == states.RUNNING and not _alive(t):
                print(f"trial {t.number}: its process ({t.user_attrs[RUNNER_ATTR]['pid']}) is gone; marked failed, "
                      "a new trial takes its place", flush=True)
                study.tell(t.number, state=states.FAIL, skip_if_finished=True)
            elif t.state != states.RUNNING or RUNNER_ATTR in t.user_attrs:
                used += 1
        if used >= trials:
            return None
        trial = study.ask()
        trial.set_user_attr(RUNNER_ATTR, {"host": socket.gethostname(), "pid": os.getpid(), "started": time.time()})
        return trial


def run_trials(study: Any, objective: Callable[[Any], float], trials: int, lock: Callable[[], Any]) -> int:
    """Run ``objective`` on this process's trials (:func:`next_trial`) until the study holds ``trials``;
    a trial whose objective raises is told failed and the error propagates. Returns the number run here."""
    import optuna

    ran = 0
    while (trial := next_trial(study, trials, lock)) is not None:
        try:
            value = objective(trial)
        except BaseException:
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
            raise
        study.tell(trial, value)
        ran += 1
        print(f"trial {trial.number}: {value:.4f} with {trial.params}", flush=True)
    return ran
