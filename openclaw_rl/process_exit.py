"""Leaving a process that has used a Temporal client."""

from __future__ import annotations

import atexit
import os
import sys
import threading


def exit_past_the_temporal_bridge(code: object) -> None:
    """Exit without the interpreter's teardown once the Temporal SDK's bridge is loaded: its Rust threads can still
    release the GIL while Python finalizes, and the process then aborts (`Fatal Python error: PyGILState_Release`,
    exit 134) after its work is done (temporalio/sdk-python#300; 2 of 25 `train start` runs here). What the teardown
    would do for us is done first: other threads joined, atexit handlers run (record writers flush), streams flushed."""
    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
        code = 1
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and not thread.daemon:
            thread.join()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code or 0)
