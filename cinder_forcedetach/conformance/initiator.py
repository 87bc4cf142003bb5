#    Licensed under the Apache License, Version 2.0 (the "License"); you may
#    not use this file except in compliance with the License. You may obtain
#    a copy of the License at
#
#         http://www.apache.org/licenses/LICENSE-2.0
#
#    Unless required by applicable law or agreed to in writing, software
#    distributed under the License is distributed on an "AS IS" BASIS, WITHOUT
#    WARRANTIES OR CONDITIONS OF ANY KIND, either express or implied. See the
#    License for the specific language governing permissions and limitations
#    under the License.

"""A live iSCSI initiator for the kit: qemu-io over libiscsi.

The tgt probe (:class:`~.probe.TgtProbe`) logs each attached host in with
one, so that a host's access is a real session on the target, not only an
ACL entry: a driver that unbinds the ACL and leaves the session is caught.
Our functional tests use the same class (``tests/functional/fixtures.py``
imports it from here).  It needs ``qemu-io`` built with libiscsi (Debian's
``qemu-utils`` + ``qemu-block-extra``).  The CHAP password goes through a
0600 secret file, never on a command line.
"""

import os
import re
import select
import shutil
import subprocess
import tempfile
import time

# One line of ``read -v``: "00001000:  a7 a7 ... a7  ................".
_DUMP_LINE = re.compile(r'^([0-9a-f]{8}):  ((?:[0-9a-f]{2} ){1,16})')


def parse_dump(output, offset, length):
    """The bytes of qemu-io's ``read -v`` *output*, or None if incomplete.

    Only a dump of exactly *length* bytes from *offset* counts.
    """
    data = bytearray()
    for line in (output or '').splitlines():
        match = _DUMP_LINE.match(line)
        if not match:
            continue
        if int(match.group(1), 16) != offset + len(data):
            return None
        data += bytes.fromhex(match.group(2))
    return bytes(data) if len(data) == length else None


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
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT)
        except BaseException:
            shutil.rmtree(self._dir)
            raise
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

    def read_bytes(self, offset=0, length=4096, timeout=5):
        """The bytes the target returns, or None (no answer, I/O error)."""
        out = self._command('read -v %d %d' % (offset, length), timeout)
        if out is None or 'read ' not in out:
            return None
        return parse_dump(out, offset, length)

    @property
    def alive(self):
        return self.proc.poll() is None

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except (OSError, ValueError):
                pass
        if os.path.isdir(self._dir):
            shutil.rmtree(self._dir)
