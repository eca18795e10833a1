"""A private broker per test (dry-run or the given backend), started from
the allot binary the repository built ($ALLOT_BIN, else target/release or
target/debug), on a socket in a private temporary directory, stopped and
cleaned afterwards."""

import os
import pathlib
import shutil
import signal
import sys
import subprocess
import tempfile
import time

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def allot_bin() -> str:
    env = os.environ.get("ALLOT_BIN")
    if env:
        return env
    for kind in ("release", "debug"):
        p = ROOT / "target" / kind / "allot"
        if p.exists():
            return str(p)
    pytest.fail("no allot binary: build it (cargo build --release) or set ALLOT_BIN")


class Broker:
    def __init__(self, backend: str = "dry-run"):
        self.dir = tempfile.mkdtemp(prefix="allot-py-")
        os.chmod(self.dir, 0o700)
        self.socket = os.path.join(self.dir, "allot.sock")
        self.log = open(os.path.join(self.dir, "log"), "w")
        self.proc = subprocess.Popen(
            [allot_bin(), "daemon", "--socket", self.socket, "--backend", backend,
             "--tick-ms", "50", "--cgroup-name", f"allot-py-{os.getpid()}"],
            stdin=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 10
        while not os.path.exists(self.socket):
            if time.time() > deadline or self.proc.poll() is not None:
                log = self.read_log()
                self.stop()
                raise RuntimeError("the broker did not start: " + log)
            time.sleep(0.02)

    def read_log(self) -> str:
        with open(os.path.join(self.dir, "log")) as f:
            return f.read()

    def stop(self) -> None:
        try:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
        finally:
            self.log.close()
            shutil.rmtree(self.dir, ignore_errors=True)


class Neighbour:
    """Another process holding a cell (one process may hold one cell):
    a Python child that registers, says so, and leaves when its stdin
    closes."""

    def __init__(self, socket: str, name: str = "neighbour"):
        code = (
            "import allot, sys\n"
            f"c = allot.Cell({name!r}, socket={socket!r}, fallback=False)\n"
            "print('in', c.id, flush=True)\n"
            "sys.stdin.read()\n"
            "c.close()\n"
        )
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("in "):
            self.proc.kill()
            raise RuntimeError(f"the neighbour did not register: {line!r}")

    def leave(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(10)


@pytest.fixture
def neighbour(broker):
    made = []

    def make(name: str = "neighbour") -> Neighbour:
        n = Neighbour(broker.socket, name)
        made.append(n)
        return n

    yield make
    for n in made:
        try:
            n.leave()
        except Exception:
            n.proc.kill()


@pytest.fixture
def broker():
    b = Broker()
    yield b
    b.stop()
