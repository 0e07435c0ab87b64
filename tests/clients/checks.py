"""What every client script here shares: PASS/FAIL lines and the `N passed, M failed` summary."""
from __future__ import annotations

import asyncio

PASSED = 0
FAILED = 0


def check(name: str, ok: bool, detail: str = "") -> None:
    global PASSED, FAILED
    PASSED += ok
    FAILED += not ok
    print(f"{'PASS' if ok else 'FAIL'} {name}{(': ' + detail) if detail else ''}", flush=True)


def report(run, seconds: float = 60) -> int:
    """Run the coroutine `run` under a time limit, count any exception as a failure, print the
    summary and return the exit status (1 if anything failed)."""
    try:
        asyncio.run(asyncio.wait_for(run, seconds))
    except BaseException as e:  # noqa: BLE001 - report and count any failure
        check("run", False, f"{type(e).__name__}: {e}")
    print(f"{PASSED} passed, {FAILED} failed")
    return 1 if FAILED else 0
