"""Real processes for functional tests: tgtd, and live qemu-io initiators.

Nothing here is a mock: tgtd is Debian's target daemon on loopback with its
own control socket and port, and :class:`QemuIoInitiator` is qemu-io with
libiscsi holding a real iSCSI session, CHAP password passed through a 0600
secret file so it never appears on a command line.
"""

import os
import select
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import fixtures

from tests import fakes

TGTD_SOCKET_DIR = fakes.TGTD_SOCKET_DIR


def _wait(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise RuntimeError('timed out waiting for %s' % what)


class Tgtd(object):
    """One tgtd on 127.0.0.1, with its own control port and iSCSI port."""

    def __init__(self, log_dir):
        self.control_port = fakes.free_tgtd_control_port()
        self.port = fakes.free_tcp_port()
        self.log_path = os.path.join(log_dir, 'tgtd-%d.log' % self.port)
        self.proc = None

    def tgtadm(self, *args, check=True):
        return subprocess.run(
            ('tgtadm', '-C', str(self.control_port), '--lld', 'iscsi') + args,
            capture_output=True, text=True, check=check)

    def _listening(self):
        with socket.socket() as s:
            return s.connect_ex(('127.0.0.1', self.port)) == 0

    def start(self):
        with open(self.log_path, 'ab') as log:
            self.proc = subprocess.Popen(
                ['tgtd', '-f', '-C', str(self.control_port), '--iscsi',
                 'portal=127.0.0.1:%d' % self.port],
                stdout=log, stderr=subprocess.STDOUT)
        _wait(lambda: self.proc.poll() is None and self._listening() and
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
    def _setUp(self):
        self.log_dir = self.useFixture(fixtures.TempDir()).path
        self.tgtd = Tgtd(self.log_dir)
        self.tgtd.start()
        self.addCleanup(self.tgtd.stop)


class QemuIoInitiator(object):
    """A live userspace iSCSI initiator: qemu-io over libiscsi.

    The session stays logged in between commands; ``write``/``read``
    return True on success, False on an I/O error, and None when the
    initiator gets no answer within *timeout* (libiscsi keeps retrying a
    refused reconnect).
    """

    PROMPT = b'qemu-io> '

    def __init__(self, portal, iqn, initiator, username=None, password=None,
                 lun=1):
        self._dir = tempfile.mkdtemp(prefix='qemu-io-')
        opts = ['driver=iscsi', 'transport=tcp', 'portal=%s' % portal,
                'target=%s' % iqn, 'lun=%d' % lun,
                'initiator-name=%s' % initiator]
        cmd = ['qemu-io']
        if username:
            secret = os.path.join(self._dir, 'chap')
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, password.encode())
            os.close(fd)
            cmd += ['--object', 'secret,id=chap0,file=%s' % secret]
            opts += ['user=%s' % username, 'password-secret=chap0']
        cmd += ['--image-opts', ','.join(opts)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.output = b''
        self.opened = self._command(None, timeout=10)

    def _command(self, line, timeout):
        """Send *line*; return its output, or None on timeout/exit."""
        self.output = b''
        if line is not None and self.proc.poll() is not None:
            # Exited (e.g. its login was refused): under eventlet a write
            # to its closed pipe spins instead of failing.
            return None
        if line is not None:
            self.proc.stdin.write(line.encode() + b'\n')
            self.proc.stdin.flush()
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready, _w, _x = select.select([fd], [], [], 0.05)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self.output += chunk
                if self.output.endswith(self.PROMPT):
                    return self.output.decode(errors='replace')
        return None

    def write(self, pattern, offset=0, length=4096, timeout=5):
        out = self._command('write -P 0x%02x %d %d' % (pattern, offset,
                                                       length), timeout)
        return None if out is None else 'wrote ' in out

    def read(self, pattern, offset=0, length=4096, timeout=5):
        out = self._command('read -P 0x%02x %d %d' % (pattern, offset,
                                                      length), timeout)
        return None if out is None else (
            'read ' in out and 'Pattern verification failed' not in out)

    @property
    def alive(self):
        return self.proc.poll() is None

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        if os.path.isdir(self._dir):
            shutil.rmtree(self._dir)
