"""Peak resident memory of this process over a block of code: what a technique reports as ``peak_rss_mb``."""
from __future__ import annotations

import os
import threading


class PeakRSS:
    """Peak resident memory (MB) of this process while the block runs, sampled every 0.2 s."""

    def __enter__(self):
        import psutil

        self._p, self.peak_mb, self._stop = psutil.Process(os.getpid()), 0.0, threading.Event()

        def loop():
            while not self._stop.is_set():
                self.peak_mb = max(self.peak_mb, self._p.memory_info().rss / 2 ** 20)
                self._stop.wait(0.2)
        self._t = threading.Thread(target=loop, daemon=True)
        self._t.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()
        self.peak_mb = max(self.peak_mb, self._p.memory_info().rss / 2 ** 20)
