"""An interrupt that arrives inside one long native call (onnx's shape inference, an onnxruntime session, the ILP
solver): Python would run its handler only once the call returns, minutes later, so ``timeout N eqsat ...`` did not
bound the run (a Longformer import held SIGTERM for minutes). The command line's watchdog ends the process with exit
130 a grace period after the signal. The native call here is a C ``read`` of a pipe nobody writes to, restarted by
the kernel after the signal's C handler (SA_RESTART): it never returns on its own."""

from __future__ import annotations

import signal
import subprocess
import sys
import time

import pytest
from paths import REPO

CHILD = """
import ctypes, os, signal, sys
import eqsat.app.cli as cli
from eqsat.app import watchdog
watchdog.GRACE = 1.0
libc = ctypes.CDLL(None)

def native(args, quiet_after_interrupt=False):
    read, _write = os.pipe()
    signal.siginterrupt(signal.SIGTERM, False)  # the read is restarted after the handler: it never returns
    print("ready", flush=True)
    libc.read(read, ctypes.create_string_buffer(1), 1)
    return 0

cli._run = native
sys.exit(cli.main(["info", "model.onnx"], process=True))
"""


@pytest.mark.timing
def test_a_sigterm_inside_a_long_native_call_ends_the_run_with_130():
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, cwd=REPO)
    try:
        assert child.stdout.readline().strip() == "ready"
        time.sleep(0.2)
        start = time.monotonic()
        child.send_signal(signal.SIGTERM)
        _, err = child.communicate(timeout=60)
    finally:
        child.kill()
    assert child.returncode == 130, err[-2000:]
    assert "interrupted" in err and "no output was written" in err
    assert time.monotonic() - start < 30  # the grace period (1 s here), not the native call's end (never)
