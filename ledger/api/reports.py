"""HTML reports: a picture of a ledger's runs (:meth:`evidence_ledger.Ledger.report`) or of
a proof bundle (:func:`report_bundle`), written to one self-contained HTML file.

The page is drawn by :mod:`evidence_ledger.views.report_html` from the model of
:mod:`evidence_ledger.views.report_model`; this module checks the arguments and the output
path, reads the evidence and writes the file (atomically; never over an existing file
unless asked, never into a ledger directory).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from evidence_ledger import __version__
from evidence_ledger.api.keys import verifier_keys as verifier_key_strings
from evidence_ledger.api.offline import Evidence, verify_bundle
from evidence_ledger.bundle.verify import Selection
from evidence_ledger.format.errors import StorageError, UsageError
from evidence_ledger.storage.files import refuse_inside
from evidence_ledger.storage.fsutil import close_fd
from evidence_ledger.storage.ledger_dir import Ledger as LedgerDirectory
from evidence_ledger.verify.records import Report
from evidence_ledger.views.report_bundle import bundle_report
from evidence_ledger.views.report_html import render_html
from evidence_ledger.views.report_ledger import Progress, ledger_report, pick_run
from evidence_ledger.views.report_model import ReportModel

__all__ = ["ReportFile", "report_bundle", "report_ledger"]


@dataclass(frozen=True)
class ReportFile:
    """An HTML report, written.

    Attributes:
        path: the file.
        size: its size (bytes).
        model: what it shows (``model.ok``: no violation shown).
    """

    path: Path
    size: int
    model: ReportModel

    def to_json(self) -> dict[str, Any]:
        """``{"out", "bytes", "ok", "selection", "runs", "calls", "entries", "left_out",
        "violations", "unlisted", "elsewhere", "values", "checkpoint"}`` (see
        :meth:`~evidence_ledger.views.report_model.ReportModel.summary`)."""
        return {"out": str(self.path), "bytes": self.size, **self.model.summary()}


def report_ledger(
    book: LedgerDirectory,
    verify: Callable[[Sequence[str]], Report],
    out: str | os.PathLike[str],
    *,
    run_id: str | None,
    call_id: str | None,
    whole_log: bool,
    verifier_keys: str | Sequence[str],
    values: bool,
    force: bool,
    progress: Progress | None,
) -> ReportFile:
    """The body of :meth:`evidence_ledger.Ledger.report` (``verify``: its ``verify``,
    given the verifier keys)."""
    selection = _selection(call_id, run_id, whole_log)
    target = _target(out, force)
    refuse_inside(book.directory, target, "the report")
    keys = verifier_key_strings(verifier_keys)
    report = verify(keys)
    if selection.mode == "run" and selection.run_id is not None:
        selection = Selection("run", pick_run(report, selection.run_id))
    model = ledger_report(book, report, selection, keys, values=values,
                          made_at=time.time_ns(), progress=progress)
    return _write(target, model, force, private=values)


def report_bundle(
    bundle: Evidence,
    verifier_keys: str | Sequence[str],
    out: str | os.PathLike[str],
    *,
    values: bool = True,
    force: bool = False,
) -> ReportFile:
    """Write the HTML report of a proof bundle, from what the bundle alone carries: its
    entries (a timeline per run), its payloads (a bundle of digests only shows each value
    as "value not included"), its signed verdict and its checkpoint. The bundle is verified
    first, as :func:`evidence_ledger.verify_bundle` does.

    Args:
        bundle: the bundle file's path, or its bytes.
        verifier_keys: the ledger's C2SP verifier key strings.
        out: the HTML file to write.
        values: show the payloads the bundle carries (False: no payload byte is written).
        force: replace ``out`` if it exists.

    Returns:
        The report written.

    Raises:
        BundleError: (an EvidenceError, exit 1) for a bundle that is not authentic.
        UsageError: for no or a malformed key, a file that is no bundle's, an existing
            ``out`` (unless ``force``) or ``out`` naming the bundle itself.
        StorageError: if the file cannot be written.
    """
    target = _target(out, force)
    if not isinstance(bundle, bytes) and target.exists() and \
            os.path.samefile(target, bundle):
        raise UsageError(f"refusing the report {target}: it is the bundle itself")
    verified = verify_bundle(bundle, verifier_keys)
    name = Path(bundle).name if not isinstance(bundle, bytes) else "(bytes)"
    model = bundle_report(verified, name, values=values, made_at=time.time_ns())
    return _write(target, model, force, private=values and verified.payloads is not None)


def _selection(call_id: str | None, run_id: str | None, whole_log: bool) -> Selection:
    """What a ledger's report shows: a call (optionally in a run), a run, or all.

    Raises:
        UsageError: for none, or ``whole_log`` with a call or run.
    """
    for value, name in ((call_id, "call_id"), (run_id, "run_id")):
        if value is not None and not isinstance(value, str):
            raise TypeError(f"{name} is a str, not {type(value).__name__}")
        if value == "":
            raise UsageError(f"--{name.replace('_', '-')} is empty")
    if whole_log and (call_id is not None or run_id is not None):
        raise UsageError("--all shows the whole log (whole_log); drop --call-id and --run-id")
    if whole_log:
        return Selection("all")
    if call_id is not None:
        return Selection("call", run_id, call_id)
    if run_id is not None:
        return Selection("run", run_id)
    raise UsageError("say what to show: --run-id ID, --call-id ID [--run-id R], or --all "
                     "(run_id, call_id or whole_log)")


def _target(out: str | os.PathLike[str], force: bool) -> Path:
    """The output path, checked before anything is read.

    Raises:
        UsageError: if it exists (unless ``force``, and then only a regular file is
            replaced: never a device, FIFO, socket or symlink), is a directory, or its
            directory does not exist.
    """
    target = Path(out)
    if target.is_dir():
        raise UsageError(f"{target} is a directory; --out names the HTML file to write")
    if (force and target.is_symlink()) or (target.exists() and not target.is_file()):
        raise UsageError(f"{target} is not a regular file; --force replaces only a report "
                         "file written before")
    if not force and (target.exists() or target.is_symlink()):
        raise UsageError(f"{target} exists; choose another --out, or pass --force to "
                         "replace it")
    if not target.parent.is_dir():
        raise UsageError(f"cannot write {target}: no directory {target.parent}")
    return target


def _write(target: Path, model: ReportModel, force: bool, *, private: bool) -> ReportFile:
    """Render ``model`` and write it to ``target`` atomically (temporary file, fsync,
    rename; ``force``: over an existing file, else never), mode 0600 when it holds
    values (``private``), else 0644 (less the umask).

    Raises:
        UsageError: if ``target`` appeared meanwhile (unless ``force``).
        StorageError: if it cannot be written.
    """
    data = render_html(model, __version__).encode("utf-8")
    tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW,
                     0o600 if private else 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            close_fd(fd)
        if force:
            os.replace(tmp, target)
        else:
            os.link(tmp, target)  # fails if the target appeared meanwhile
    except FileExistsError as exc:
        raise UsageError(f"{target} exists; choose another --out, or pass --force") from exc
    except OSError as exc:
        raise StorageError(f"cannot write {target}: {exc.strerror or exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    return ReportFile(target, len(data), model)
