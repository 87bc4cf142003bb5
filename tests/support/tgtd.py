"""A real tgtd for the tests and benchmarks: Debian's target daemon on
loopback, with its own control socket and iSCSI port, started and stopped
by its pid.  The live initiators that log in to it are the kit's
(:mod:`cinder_forcedetach.conformance.initiator`).
"""

import os
import signal
import socket
import subprocess

import fixtures

from devbox.services import tgtd
from tests import fakes
from tests.support import waiting

TGTD_SOCKET_DIR = fakes.TGTD_SOCKET_DIR


class Tgtd(object):
    """One tgtd with its own control port and iSCSI port.

    On 127.0.0.1, or on a lab node (:mod:`devbox.netns`): *prefix* runs it
    there and *address* is the node's.  Its control socket is a file, so
    tgtadm reaches it from anywhere.
    """

    def __init__(self, log_dir, iothreads=None, address='127.0.0.1',
                 prefix=()):
        #: tgtd's I/O threads per LUN (``-t``; tgtd's default: 16)
        self.iothreads = iothreads
        self.address = address
        self.prefix = list(prefix)
        self.control_port = fakes.free_tgtd_control_port()
        # A node's ports are its own.
        self.port = 3260 if prefix else fakes.free_tcp_port()
        self.log_path = os.path.join(log_dir, 'tgtd-%d.log' % self.port)
        self.proc = None

    def tgtadm(self, *args, check=True):
        return tgtd.tgtadm(self.control_port, *args, check=check)

    def _listening(self):
        if self.prefix:     # out of reach: ask tgtd itself
            return ('Portal: %s:%d' % (self.address, self.port)) in \
                self.tgtadm('--op', 'show', '--mode', 'portal',
                            check=False).stdout
        with socket.socket() as s:
            return s.connect_ex((self.address, self.port)) == 0

    def start(self):
        with open(self.log_path, 'ab') as log:
            self.proc = subprocess.Popen(
                self.prefix + [
                    'tgtd', '-f', '-C', str(self.control_port), '--iscsi',
                    'portal=%s:%d' % (self.address, self.port)] + (
                    ['-t', str(self.iothreads)] if self.iothreads else []),
                stdout=log, stderr=subprocess.STDOUT)
        waiting.wait_for(
            lambda: self.proc.poll() is None and self._listening() and
            self.tgtadm('--op', 'show', '--mode', 'target',
                        check=False).returncode == 0, 10, 'tgtd')

    def stop(self):
        """Remove every target, then stop the daemon we started (by pid)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        out = self.tgtadm('--op', 'show', '--mode', 'target',
                          check=False).stdout
        for line in out.splitlines():
            if line.startswith('Target '):
                tid = line.split()[1].rstrip(':')
                self.tgtadm('--op', 'delete', '--mode', 'target', '--tid',
                            tid, '--force', check=False)
        self.tgtadm('--op', 'delete', '--mode', 'system', check=False)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=5)
        # tgtd leaves its control socket and lock file behind.
        for suffix in ('', '.lock'):
            path = os.path.join(TGTD_SOCKET_DIR, 'socket.%d%s' % (
                self.control_port, suffix))
            if os.path.exists(path):
                os.unlink(path)

    def kill(self):
        """Simulate the daemon going down (the test restarts it)."""
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=5)


class TgtdFixture(fixtures.Fixture):
    def __init__(self, **kwargs):
        super(TgtdFixture, self).__init__()
        self.kwargs = kwargs        # Tgtd's

    def _setUp(self):
        self.log_dir = self.useFixture(fixtures.TempDir()).path
        self.tgtd = Tgtd(self.log_dir, **self.kwargs)
        self.tgtd.start()
        self.addCleanup(self.tgtd.stop)
