"""The write-behind scheduler without room for its thread: a typed error, and the next schedule retries.

A thread needs address space for its stack; under a tight ``ulimit -v`` starting one fails with a bare
``RuntimeError``. The scheduler reports it as ``RESOURCE_EXHAUSTED``, queues nothing, and keeps no
half-made thread, so a later schedule (with room again) starts the thread and fires its deadlines.
Run in a child process: the limit is the process's own.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

CHILD = textwrap.dedent(
    """
    import json, os, resource, threading, time
    from agentlog.errors import ResourceExhaustedError
    from agentlog.persistence.write_behind import Scheduler

    class Target:
        fired = threading.Event()
        def deadline_reached(self, when):
            Target.fired.set()

    scheduler = Scheduler()
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as handle:
        used = int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (used + (1 << 20), hard))
    try:
        scheduler.schedule(time.monotonic(), Target())
        first = "started"
    except ResourceExhaustedError as err:
        first = err.code
    resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
    queued = len(scheduler._heap)
    scheduler.schedule(time.monotonic(), Target())
    print(json.dumps({"first": first, "queued_after_failure": queued, "fired": Target.fired.wait(10)}))
    """
)


def test_a_thread_that_cannot_start_is_resource_exhausted_and_the_next_schedule_starts_it() -> None:
    done = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {
        "first": "RESOURCE_EXHAUSTED",
        "queued_after_failure": 0,
        "fired": True,
    }
