"""The soak's scheduler canary: sleeps 5 ms at a time until STOP (Unix seconds) and logs every
sleep that ended more than 2 ms late as `START_US LATE_US`, so the judge can tell a call made
late by the library from one made late by a machine that ran nothing for that long.

Usage: python canary.py LOG STOP"""

from __future__ import annotations

import sys
import time


def main() -> None:
    path, stop = sys.argv[1], float(sys.argv[2])
    with open(path, "a", buffering=1) as out:
        while time.time() < stop:
            t0, m0 = time.time_ns() // 1000, time.perf_counter_ns()
            time.sleep(0.005)
            late = (time.perf_counter_ns() - m0) // 1000 - 5000
            if late > 2000:
                out.write(f"{t0} {late}\n")


if __name__ == "__main__":
    main()
