"""A killed ``evolve run SPEC`` or ``evolve job SPEC --once`` resumes without applying any feedback twice.

Each trial kills the real command (``apps.cli.main`` in its own process, a fake model that takes a
while per answer) with SIGKILL several times at seeded random moments, restarts it each time, lets
the last start finish, and compares the memories (id, Q, visits) with an uninterrupted run of the
same spec; it also checks that each memory's visits equal the applied feedback rows whose recall
selected it (``tests.reliability.crash.visit_mismatches``) and the file's integrity.

``tests/apps/test_cli_crash.py`` asserts on ``kill_and_resume``; ``bench/reliability_crash_cli.py`` reports it.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from connectors import HashEmbedder, make_engine
from evolve.jobs.job import job_history
from memory import MemoryStore
from tests.reliability.crash import integrity_ok, visit_mismatches

ROOT = Path(__file__).resolve().parents[2]
ENTRY = "import sys; from apps.cli import main; sys.exit(main(sys.argv[1:]))"
ROUNDS = 2
TASKS = [
    {"id": f"{place}-{n}", "prompt": f"What is the door code of the {place} number {n}?", "answer": code}
    for place in ("harbor", "summit", "quarry")
    for n, code in ((1, "4471"), (2, "9310"))
]  # the model always answers 4471 (a reply that depends on call order would differ after a restart)


def write_spec(folder: Path, *, delay: float) -> Path:
    """A run of ``ROUNDS`` rounds over six tasks, a scripted model answering after ``delay`` seconds."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))
    spec = folder / "spec.toml"
    spec.write_text(
        f"""
[run]
name = "crash"
database = "sqlite:///{folder / "runs.db"}"
batch_size = 1
rounds = {ROUNDS}

[model]
chat = "fake/scripted"
options = {{ replies = ["4471"], delay = {delay} }}

[embedder]
name = "hash"

[environment]
tasks = "tasks.jsonl"

[memory]
k2 = 2
"""
    )
    return spec


def evolve(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", ENTRY, *args], cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def memory_state(folder: Path) -> list[tuple[str, float, int]]:
    with MemoryStore(f"sqlite:///{folder / 'runs.db'}", embedder=HashEmbedder()) as store:
        return sorted((it.id, round(it.q, 12), it.visits) for it in store.items())


def finish(command: str, spec: Path, rounds: int = ROUNDS) -> int:
    """Run (or resume) to the end: ``run`` once, ``job --once`` until ``rounds`` jobs are done; the
    number of rounds done."""
    if command == "run":
        done = evolve("run", str(spec), "--quiet")
        if done.returncode:
            raise RuntimeError(f"evolve run failed: {done.stderr[-2000:]}")
        return ROUNDS
    engine = make_engine(f"sqlite:///{spec.parent / 'runs.db'}")
    try:
        for _ in range(4 * rounds):
            history = job_history(engine)
            started = max([rounds, *(j.round or 0 for j in history)])  # a killed job's round is finished too
            if (finished := sum(j.status == "done" for j in history)) >= started:
                return finished
            done = evolve("job", str(spec), "--once", "--quiet", "--lease-ttl", "1")
            if done.returncode:
                raise RuntimeError(f"evolve job failed: {done.stderr[-2000:]}")
            if done.stdout.startswith("skipped"):
                time.sleep(1.1)  # the killed job's lease has not expired yet
    finally:
        engine.dispose()
    raise RuntimeError(f"evolve job did not finish {rounds} rounds")


def kill_and_resume(command: str, folder: Path, *, kills: int, seed: int) -> dict[str, int]:
    """Kill ``evolve <command>`` ``kills`` times at random moments, resume it, compare with a reference."""
    rng = random.Random(seed)
    spec = write_spec(folder / "killed", delay=0.25)
    extra = ["--once", "--lease-ttl", "1"] if command == "job" else []
    landed = 0
    for _ in range(kills):
        args = [sys.executable, "-c", ENTRY, command, str(spec), "--quiet", *extra]
        proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.5, 3.0))  # start-up takes under a second; a round about 1.5 s more
        landed += proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        time.sleep(1.1 if command == "job" else 0)  # lets the dead job's lease expire
    rounds = finish(command, spec)  # a job killed after its round was done counts that round
    reference = write_spec(folder / "reference", delay=0.0)
    finish(command, reference, rounds)
    got, want = memory_state(spec.parent), memory_state(reference.parent)
    engine = make_engine(f"sqlite:///{spec.parent / 'runs.db'}")
    with engine.connect() as conn:
        mismatches = visit_mismatches(conn)
    engine.dispose()
    return {
        "kills": kills,
        "kills_mid_run": landed,
        "memories": len(want),
        "memories_differing_from_reference": len(set(got) ^ set(want)),
        "visit_mismatches": mismatches,
        "integrity_failures": 0 if integrity_ok(f"sqlite:///{spec.parent / 'runs.db'}") else 1,
    }
