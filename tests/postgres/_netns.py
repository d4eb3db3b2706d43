"""Separate hosts on one machine: network namespaces the test creates, a PostgreSQL server in one of them.

A :class:`Lab` is a "server" namespace holding a bridge on a private /24 and, per host, a namespace of
its own wired to the bridge by a veth pair; names carry this process's pid, so concurrent runs never
meet, and :meth:`Lab.remove` deletes them all (the processes still inside are ours, and are killed).
A host is partitioned by taking its bridge port down: its packets vanish as on a cut cable, neither
side gets an error from the network, each must notice on its own. :class:`NetnsServer` is a throwaway
PostgreSQL cluster listening on the server namespace's address (trust for the subnet) and on a Unix
socket, through which the test process itself (in no namespace of the lab) inspects the server.
:class:`Child` is a process run on a host (``ip netns exec``) that reports progress on stdout lines:
the test waits for those lines, never for a guessed time.

Namespaces need root and iproute2; :func:`unavailable` says why they cannot be created, if so.
"""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Sequence

from _postgres import ThrowawayCluster

from .conftest import server_bindir

SUBNET = "10.213.7"
"""The lab's private /24 (it exists only inside the lab's namespaces)."""
SERVER_ADDRESS = f"{SUBNET}.1"
PORT = 5432
GUARD_S = 180.0
"""How long a wait for a child's report may last before the test is declared hung (a guard, not a timing)."""


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise AssertionError(f"`ip {' '.join(args)}` failed ({done.returncode}): {done.stderr.strip()}")


def unavailable() -> str | None:
    """Why network namespaces cannot be created here, or ``None`` when they can (one is tried)."""
    if os.geteuid() != 0:
        return "creating network namespaces needs root"
    if shutil.which("ip") is None:
        return "iproute2's `ip` command is not installed (apt-get install iproute2)"
    probe = f"agentlog-probe-{os.getpid()}"
    done = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return f"`ip netns add` failed: {done.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


class Lab:
    """A server namespace with a bridge, and host namespaces wired to it (see the module docstring)."""

    def __init__(self) -> None:
        self._prefix = f"agentlog-{os.getpid()}"
        self.server_ns = f"{self._prefix}-server"
        self._namespaces: list[str] = []
        self.addresses: dict[str, str] = {}
        self._add_namespace(self.server_ns)
        _ip("-n", self.server_ns, "link", "add", "br0", "type", "bridge")
        _ip("-n", self.server_ns, "addr", "add", f"{SERVER_ADDRESS}/24", "dev", "br0")
        _ip("-n", self.server_ns, "link", "set", "br0", "up")

    def _add_namespace(self, name: str) -> None:
        _ip("netns", "add", name)
        self._namespaces.append(name)
        _ip("-n", name, "link", "set", "lo", "up")

    def namespace(self, host: str) -> str:
        return f"{self._prefix}-{host}"

    def add_host(self, host: str) -> str:
        """A host namespace named ``host`` wired to the bridge; returns its address."""
        ns = self.namespace(host)
        address = f"{SUBNET}.{len(self.addresses) + 2}"
        self._add_namespace(ns)
        _ip("-n", ns, "link", "add", "eth0", "type", "veth", "peer", "name", self._port(host), "netns", self.server_ns)
        _ip("-n", ns, "addr", "add", f"{address}/24", "dev", "eth0")
        _ip("-n", ns, "link", "set", "eth0", "up")
        _ip("-n", self.server_ns, "link", "set", self._port(host), "master", "br0")
        _ip("-n", self.server_ns, "link", "set", self._port(host), "up")
        self.addresses[host] = address
        return address

    @staticmethod
    def _port(host: str) -> str:
        return f"p-{host}"[:15]

    def partition(self, host: str) -> None:
        """Cut ``host`` off: its bridge port goes down, every packet to or from it is lost."""
        _ip("-n", self.server_ns, "link", "set", self._port(host), "down")

    def heal(self, host: str) -> None:
        _ip("-n", self.server_ns, "link", "set", self._port(host), "up")

    def remove(self) -> None:
        """Delete every namespace of the lab, killing what still runs inside (only our processes can)."""
        for ns in reversed(self._namespaces):
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self._namespaces.clear()


class NetnsServer(ThrowawayCluster):
    """A throwaway PostgreSQL cluster run inside the lab's server namespace (as the ``postgres`` user)."""

    def __init__(self, lab: Lab) -> None:
        super().__init__(
            server_bindir(),
            prefix="agentlog-netns-pg-",
            listen=SERVER_ADDRESS,
            port=PORT,
            command=("ip", "netns", "exec", lab.server_ns),
            hba=(f"host all all {SUBNET}.0/24 trust",),
        )
        self.dsn = f"postgresql://postgres@{SERVER_ADDRESS}:{PORT}/postgres"
        """The DSN the hosts use (over the lab's network)."""
        self.local_dsn = f"postgresql://postgres@/postgres?host={self.root}&port={PORT}"
        """The DSN the test process uses (the server's Unix socket: no network, never partitioned)."""


class Child:
    """A process on one host of the lab: commands on its stdin, one report per stdout line."""

    def __init__(self, lab: Lab, host: str, argv: Sequence[str], env: dict[str, str] | None = None) -> None:
        self.host = host
        self._stderr = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", lab.namespace(host), *argv],  # ip execs the command: same pid
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=env,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))
        self._lines.put(None)

    def stderr(self) -> str:
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def send(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()

    def line(self) -> str:
        """The child's next report (a hung or dead child fails the test, showing its stderr)."""
        try:
            line = self._lines.get(timeout=GUARD_S)
        except queue.Empty:
            raise AssertionError(
                f"host {self.host}: no report within {GUARD_S:g} s; stderr:\n{self.stderr()}"
            ) from None
        if line is None:
            self._lines.put(None)
            self.proc.wait()
            raise AssertionError(
                f"host {self.host}: exited ({self.proc.returncode}) before reporting; stderr:\n{self.stderr()}"
            )
        return line

    def expect(self, prefix: str) -> list[str]:
        """The fields of the next report, which must start with ``prefix``."""
        line = self.line()
        assert line.split(" ", 1)[0] == prefix, f"host {self.host}: expected {prefix!r}, got {line!r}"
        return line.split(" ")[1:]

    def interrupt(self) -> list[str]:
        """SIGINT (Ctrl-C), then every line it still reports before it exits (with code 0)."""
        self.proc.send_signal(signal.SIGINT)
        rest: list[str] = []
        while True:
            try:
                line = self._lines.get(timeout=GUARD_S)
            except queue.Empty:
                raise AssertionError(f"host {self.host}: still running {GUARD_S:g} s after SIGINT") from None
            if line is None:
                self._lines.put(None)
                break
            rest.append(line)
        assert self.proc.wait() == 0, f"host {self.host}: exit code {self.proc.returncode}; stderr:\n{self.stderr()}"
        return rest

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()

    def close(self) -> None:
        self.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                try:
                    stream.close()
                except OSError:
                    pass
        self._stderr.close()
