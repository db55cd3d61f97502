"""The run store: one directory per run.

::

    RUN_DIR/
      run.sqlite        WAL mode: candidates, verdicts, lineage, events, meta
      manifest.json     package versions, device, config, seeds (rewritten on resume, history kept)
      problem.py        the problem exactly as it was when the run started (resume judges against this)
      candidates/       every evaluated candidate's source, NNNNN_<id>.py
      run.lock          held (flock) by the one driver writing this run

The driver is the only writer: a second driver on the same run is refused. Each evaluation -- candidate,
verdict, lineage and the plugins' records -- is committed in one transaction, so a run killed at any
moment holds only whole evaluations and ``--resume`` neither loses nor repeats one. The generations of a step
that never reached evaluation are committed together as ``dropped`` events (:meth:`RunStore.record_dropped`);
:meth:`RunStore.summary` counts them by reason and says why the run stopped in those terms.
"""

from __future__ import annotations

import fcntl
import glob
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ksmith_core.errors import RunStoreError
from ksmith_core.model import Candidate, Status, Verdict, thaw

SCHEMA_VERSION = 1
DB_NAME = "run.sqlite"
MANIFEST_NAME = "manifest.json"
DROPPED = "dropped"  # the event kind of a generation that never reached evaluation

# Reasons whose label does not read well as its words in summaries ("no_edit_block" reads "no edit block").
DROP_WORDS = {"over_budget": "past the budget", "no_selection": "no parent to select"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
    id TEXT PRIMARY KEY,
    seq INTEGER NOT NULL UNIQUE,
    island INTEGER NOT NULL,
    parent_ids TEXT NOT NULL,
    edit TEXT NOT NULL,
    edit_kind TEXT NOT NULL,
    proposer TEXT NOT NULL,
    meta TEXT NOT NULL,
    source_file TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS verdicts (
    candidate_id TEXT PRIMARY KEY REFERENCES candidates(id),
    status TEXT NOT NULL,
    correct INTEGER NOT NULL,
    speedup REAL,
    speedup_vs_compile REAL,
    runtime_ms REAL,
    eval_seconds REAL NOT NULL,
    verdict TEXT NOT NULL,
    created REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS lineage (
    child TEXT NOT NULL REFERENCES candidates(id),
    parent TEXT NOT NULL,
    PRIMARY KEY (child, parent)
);
CREATE TABLE IF NOT EXISTS events (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    ts REAL NOT NULL,
    kind TEXT NOT NULL,
    candidate_id TEXT,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS events_kind ON events(kind);
"""


def default_runs_root() -> Path:
    return Path(os.environ.get("KSMITH_RUNS_DIR", "ksmith-runs"))


class RunStore:
    """Reads and (for the driver) writes one run directory."""

    def __init__(self, path: Path, conn: sqlite3.Connection, lock_fd: int | None) -> None:
        self.path = path
        self._conn = conn
        self._lock_fd = lock_fd

    # -- opening -------------------------------------------------------------------------------------------

    @classmethod
    def create(
        cls, path: Path, problem_source: str, meta: dict[str, Any], manifest: dict[str, Any]
    ) -> RunStore:
        path = Path(path)
        if (path / DB_NAME).exists():
            raise RunStoreError(f"run directory {path} already holds a run; use --resume to continue it")
        if path.is_dir() and any(path.iterdir()):
            raise RunStoreError(f"run directory {path} exists and is not empty; give a new directory")
        (path / "candidates").mkdir(parents=True, exist_ok=True)
        (path / "problem.py").write_text(problem_source, encoding="utf-8")
        store = cls._connect(path, writable=True)
        with store._conn:
            for key, value in {**meta, "schema_version": SCHEMA_VERSION, "created": time.time()}.items():
                store._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))
        store.write_manifest(manifest)
        return store

    @classmethod
    def open(cls, path: Path, writable: bool = False) -> RunStore:
        path = Path(path)
        if not (path / DB_NAME).is_file():
            raise RunStoreError(f"no run at {path} (expected {path / DB_NAME})")
        return cls._connect(path, writable)

    @classmethod
    def _connect(cls, path: Path, writable: bool) -> RunStore:
        lock_fd = None
        if writable:
            lock_fd = os.open(path / "run.lock", os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(lock_fd)
                raise RunStoreError(f"run {path} is being written by another ksmith process") from None
        try:
            uri = f"file:{path / DB_NAME}" + ("" if writable else "?mode=ro")
            conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
            conn.row_factory = sqlite3.Row
            if writable:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=NORMAL")
                conn.executescript(_SCHEMA)
            conn.execute("SELECT count(*) FROM meta").fetchone()
        except sqlite3.DatabaseError as exc:
            if lock_fd is not None:
                os.close(lock_fd)
            raise RunStoreError(f"run database {path / DB_NAME} is unreadable: {exc}") from exc
        return cls(path, conn, lock_fd)

    def close(self) -> None:
        self._conn.close()
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def __enter__(self) -> RunStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- meta and manifest ---------------------------------------------------------------------------------

    def meta(self) -> dict[str, Any]:
        return {
            row["key"]: json.loads(row["value"]) for row in self._conn.execute("SELECT key, value FROM meta")
        }

    def set_meta(self, key: str, value: Any) -> None:
        with self._conn:
            self._conn.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(value)))

    def manifest(self) -> dict[str, Any]:
        path = self.path / MANIFEST_NAME
        return json.loads(path.read_text()) if path.exists() else {}

    def write_manifest(self, manifest: dict[str, Any]) -> None:
        tmp = self.path / (MANIFEST_NAME + ".tmp")
        tmp.write_text(json.dumps(manifest, indent=2, sort_keys=True, default=str))
        os.replace(tmp, self.path / MANIFEST_NAME)

    @property
    def problem_path(self) -> Path:
        return self.path / "problem.py"

    # -- writing -------------------------------------------------------------------------------------------

    def record_evaluation(
        self, candidate: Candidate, verdict: Verdict, records: list[dict[str, Any]] = ()
    ) -> int:
        """Store a candidate, its verdict, lineage and plugin records atomically; returns its sequence number."""
        now = time.time()
        with self._conn:
            seq = self._conn.execute("SELECT coalesce(max(seq), 0) + 1 FROM candidates").fetchone()[0]
            rel = f"candidates/{seq:05d}_{candidate.id}.py"
            # The file lands before the commit; an orphan file after a crash is harmless and overwritten.
            (self.path / rel).write_text(candidate.source, encoding="utf-8")
            self._conn.execute(
                "INSERT INTO candidates VALUES (?,?,?,?,?,?,?,?,?,?)",
                (
                    candidate.id,
                    seq,
                    candidate.island,
                    json.dumps(list(candidate.parent_ids)),
                    candidate.edit,
                    candidate.edit_kind,
                    candidate.proposer,
                    json.dumps(thaw(candidate.meta)),
                    rel,
                    now,
                ),
            )
            self._conn.executemany(
                "INSERT OR IGNORE INTO lineage VALUES (?, ?)",
                [(candidate.id, p) for p in candidate.parent_ids],
            )
            self._conn.execute(
                "INSERT INTO verdicts VALUES (?,?,?,?,?,?,?,?,?)",
                (
                    candidate.id,
                    verdict.status.value,
                    int(verdict.correct),
                    verdict.speedup,
                    verdict.speedup_vs_compile,
                    verdict.runtime_ms,
                    verdict.eval_seconds,
                    json.dumps(verdict.to_dict()),
                    now,
                ),
            )
            for record in records:
                self._insert_event(record.get("kind", "record"), record, candidate.id, now)
        return seq

    def record_event(self, kind: str, data: dict[str, Any], candidate_id: str | None = None) -> None:
        with self._conn:
            self._insert_event(kind, data, candidate_id, time.time())

    def record_dropped(self, drops: list[dict[str, Any]]) -> None:
        """Store one step's dropped generations, one ``dropped`` event each, in one transaction."""
        if not drops:
            return
        now = time.time()
        with self._conn:
            for drop in drops:
                self._insert_event(DROPPED, drop, drop.get("candidate_id"), now)

    def _insert_event(self, kind: str, data: dict[str, Any], candidate_id: str | None, ts: float) -> None:
        self._conn.execute(
            "INSERT INTO events (ts, kind, candidate_id, data) VALUES (?,?,?,?)",
            (ts, kind, candidate_id, json.dumps(data, default=str)),
        )

    # -- reading -------------------------------------------------------------------------------------------

    def has_candidate(self, candidate_id: str) -> bool:
        return (
            self._conn.execute("SELECT 1 FROM candidates WHERE id = ?", (candidate_id,)).fetchone()
            is not None
        )

    def count_evaluations(self) -> int:
        return self._conn.execute("SELECT count(*) FROM verdicts").fetchone()[0]

    def eval_seconds(self) -> float:
        return float(self._conn.execute("SELECT coalesce(sum(eval_seconds), 0) FROM verdicts").fetchone()[0])

    def evaluations(self) -> Iterator[tuple[int, Candidate, Verdict]]:
        """Every stored evaluation in the order it was made."""
        rows = self._conn.execute(
            "SELECT c.*, v.verdict AS verdict_json FROM candidates c JOIN verdicts v ON v.candidate_id = c.id "
            "ORDER BY c.seq"
        ).fetchall()
        for row in rows:
            yield (
                row["seq"],
                self._candidate_from_row(row),
                Verdict.from_dict(json.loads(row["verdict_json"])),
            )

    def _candidate_from_row(self, row: sqlite3.Row) -> Candidate:
        source = (self.path / row["source_file"]).read_text(encoding="utf-8")
        return Candidate(
            id=row["id"],
            source=source,
            parent_ids=tuple(json.loads(row["parent_ids"])),
            island=row["island"],
            edit=row["edit"],
            edit_kind=row["edit_kind"],
            proposer=row["proposer"],
            meta=json.loads(row["meta"]),
        )

    def get(self, candidate_id: str) -> tuple[Candidate, Verdict] | None:
        row = self._conn.execute(
            "SELECT c.*, v.verdict AS verdict_json FROM candidates c JOIN verdicts v ON v.candidate_id = c.id "
            "WHERE c.id = ? OR c.id LIKE ?",
            (candidate_id, candidate_id + "%"),
        ).fetchone()
        if row is None:
            return None
        return self._candidate_from_row(row), Verdict.from_dict(json.loads(row["verdict_json"]))

    def best(self) -> tuple[Candidate, Verdict] | None:
        """The accepted candidate with the highest speedup (earliest on ties), leaving out any whose latest
        re-validation failed (:meth:`failed_revalidation`)."""
        failed = self.failed_revalidation()
        rows = self._conn.execute(
            "SELECT candidate_id FROM verdicts WHERE status = 'ok' "
            "ORDER BY coalesce(speedup, 0) DESC, created ASC LIMIT ?",
            (len(failed) + 1,),
        )
        found = next((row["candidate_id"] for row in rows if row["candidate_id"] not in failed), None)
        return None if found is None else self.get(found)

    def revalidations(self) -> dict[str, dict[str, Any]]:
        """The latest ``revalidation`` event of each re-validated candidate, by candidate id."""
        return {
            event["candidate_id"]: event for event in self.events("revalidation") if event["candidate_id"]
        }

    def failed_revalidation(self) -> set[str]:
        """Candidates accepted once whose latest re-validation (fresh seeds, inputs and process) was not."""
        return {cid for cid, event in self.revalidations().items() if event.get("status") != Status.OK.value}

    def status_counts(self) -> dict[str, int]:
        rows = self._conn.execute("SELECT status, count(*) AS n FROM verdicts GROUP BY status")
        return {row["status"]: row["n"] for row in rows}

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        query = "SELECT seq, ts, kind, candidate_id, data FROM events"
        rows = self._conn.execute(
            query + (" WHERE kind = ?" if kind else "") + " ORDER BY seq", (kind,) if kind else ()
        )
        return [
            {
                "seq": r["seq"],
                "ts": r["ts"],
                "kind": r["kind"],
                "candidate_id": r["candidate_id"],
                **json.loads(r["data"]),
            }
            for r in rows
        ]

    def dropped(self) -> dict[str, Any]:
        """Generations that never reached evaluation: ``total``, ``by_reason`` (most frequent first) and
        the ``latest`` detail of each reason, read from the ``dropped`` events."""
        counts: dict[str, int] = {}
        latest: dict[str, str] = {}
        for event in self.events(DROPPED):
            reason = str(event.get("reason") or "unspecified")
            counts[reason] = counts.get(reason, 0) + 1
            if event.get("detail"):
                latest[reason] = str(event["detail"])
        by_reason = dict(sorted(counts.items(), key=lambda item: (-item[1], item[0])))
        return {"total": sum(counts.values()), "by_reason": by_reason, "latest": latest}

    def summary(self) -> dict[str, Any]:
        """What ``ksmith show --json`` prints."""
        meta = self.meta()
        best = self.best()
        best_json = None
        if best is not None:
            cand, verdict = best
            best_json = {
                "id": cand.id,
                "status": verdict.status.value,
                "speedup": verdict.speedup,
                "speedup_vs_compile": verdict.speedup_vs_compile,
                "runtime_ms": verdict.runtime_ms,
                "reference_ms": verdict.reference_ms,
                "interpreted": verdict.interpreted,
                "device": verdict.device,
            }
        finished = self.events("run_end")
        summary = {
            "run": self.path.name,
            "path": str(self.path),
            "problem": meta.get("problem"),
            "proposer": meta.get("config", {}).get("proposer"),
            "budget": meta.get("config", {}).get("budget"),
            "evaluations": self.count_evaluations(),
            "eval_seconds": round(self.eval_seconds(), 3),
            "statuses": self.status_counts(),
            "best": best_json,
            # Accepted, then failed the run's re-validation: set aside, never the best.
            "failed_revalidation": sorted(self.failed_revalidation()),
            "finished": bool(finished),
            "stop_reason": finished[-1].get("reason") if finished else None,
            "created": meta.get("created"),
            "dropped": self.dropped(),
        }
        summary["stop_explanation"] = stop_explanation(
            summary["stop_reason"], finished[-1].get("detail") if finished else None, summary["dropped"]
        )
        summary["where_to_look"] = where_to_look(summary, meta.get("seed_id"))
        return summary


def drop_words(reason: str) -> str:
    """A drop reason as words: ``no_edit_block`` -> "no edit block"."""
    return DROP_WORDS.get(reason, reason.replace("_", " "))


def dropped_text(by_reason: dict[str, int]) -> str:
    """``32 dropped: 20 no edit block, 11 edit not applied, 1 duplicate`` ("" when nothing was dropped)."""
    total = sum(by_reason.values())
    if not total:
        return ""
    return f"{total} dropped: " + ", ".join(f"{n} {drop_words(reason)}" for reason, n in by_reason.items())


def stop_explanation(reason: str | None, detail: str | None, dropped: dict[str, Any]) -> str:
    """Why a run stopped, with what never reached evaluation: ``stopped: exhausted (no new candidate in 8
    steps in a row) -- 32 dropped: 20 no edit block, 11 edit not applied, 1 duplicate``."""
    text = f"stopped: {reason}" if reason else "not finished (still running, or killed)"
    if detail:
        text += f" ({detail})"
    drops = dropped_text(dropped.get("by_reason") or {})
    return f"{text} -- {drops}" if drops else text


def where_to_look(summary: dict[str, Any], seed_id: str | None) -> list[str]:
    """For a run that found nothing (nothing accepted, or nothing beat the seed): what happened and where
    the details are. Empty for a run that found a better kernel, or has no evaluation yet."""
    run, evaluations, best = summary["path"], summary["evaluations"], summary["best"]
    if not evaluations or (best is not None and best["id"] != seed_id):
        return []
    failed = sum(n for status, n in summary["statuses"].items() if status != "ok")
    lines = []
    set_aside = summary.get("failed_revalidation") or []
    if best is None and set_aside:
        lines.append(
            f"{len(set_aside)} accepted candidates failed their re-validation on fresh inputs and were set "
            f"aside ({', '.join(set_aside)}): `ksmith report {run}` shows each re-validation"
        )
    elif best is None:
        lines.append(
            f"no candidate was accepted ({failed} of {evaluations} evaluations failed): "
            f"`ksmith report {run}` shows the latest error of each status"
        )
    elif evaluations > 1:
        why = f"{failed} failed, the rest were slower" if failed else "all were slower"
        lines.append(
            f"no candidate beat the seed ({evaluations - 1} evaluated after it: {why}): "
            f"`ksmith report {run}` shows the failures and the lineage"
        )
    else:
        lines.append("no candidate beat the seed: none was evaluated after it")
    dropped = summary["dropped"]
    if dropped["total"]:
        lines.append(
            f"{dropped['total']} generations never reached evaluation: `ksmith show {run}` gives the latest "
            f"detail of each reason; each is a `{DROPPED}` event in {DB_NAME} (`ksmith -v evolve` logs them)"
        )
    return lines


def resolve_run(spec: str, root: Path | None = None) -> Path:
    """A run given as a directory path or as a run id under the runs root."""
    as_path = Path(spec)
    if (as_path / DB_NAME).is_file():
        return as_path
    root = root or default_runs_root()
    under_root = root / spec
    if (under_root / DB_NAME).is_file():
        return under_root
    # A run id may be given by its prefix; a path (anything with a separator) is only ever itself.
    is_id = os.sep not in spec and "/" not in spec and not glob.has_magic(spec)
    matches = [p for p in root.glob(f"{spec}*") if (p / DB_NAME).is_file()] if is_id and root.is_dir() else []
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        raise RunStoreError(f"run id {spec!r} is ambiguous: {', '.join(sorted(m.name for m in matches))}")
    raise RunStoreError(f"no run {spec!r} (looked for {as_path / DB_NAME} and under {root})")


def list_runs(root: Path | None = None) -> list[dict[str, Any]]:
    root = root or default_runs_root()
    if not root.is_dir():
        return []
    runs = []
    for path in sorted(root.iterdir()):
        if not (path / DB_NAME).is_file():
            continue
        try:
            with RunStore.open(path) as store:
                runs.append(store.summary())
        except RunStoreError as exc:
            runs.append({"run": path.name, "path": str(path), "error": str(exc)})
    return runs


def run_started(path: Path) -> float:
    """When a run started (its first session in the manifest; the directory's age if that is unreadable)."""
    try:
        sessions = json.loads((path / MANIFEST_NAME).read_text()).get("sessions") or []
        return float(sessions[0]["started"])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return path.stat().st_mtime


def remove_run(path: Path) -> None:
    """Delete a run directory, unless a driver is writing it: the run's lock is taken first (without
    waiting), so a run in progress is never removed. Raises :class:`RunStoreError` if it is held."""
    import shutil

    path = Path(path)
    if not (path / DB_NAME).is_file():
        raise RunStoreError(f"no run at {path} (expected {path / DB_NAME})")
    lock_fd = os.open(path / "run.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunStoreError(f"run {path.name} is being written (its lock is held); not removed") from None
        shutil.rmtree(path)
    finally:
        os.close(lock_fd)
