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

What a command got is an :class:`Outcome`, from what qemu-io and libiscsi
print (libiscsi's own log is on: ``LIBISCSI_DEBUG=1``, errors only, so a
session that tgtd cut says why).  Seen with Debian 12's qemu-io 7.2 and
libiscsi 1.19 against tgtd 1.0.85 (functional tests' ``Tgtd``), the
initiator holding a live session and its control write answered
(``wrote 4096/4096 bytes at offset 0``), then:

* ACL entry unbound and the session closed (``tgtadm --op unbind --mode
  target`` + ``--op delete --mode conn``), or the target deleted
  (``--op delete --mode target --force``): the next write gets no answer;
  libiscsi reconnects and tgtd refuses each login, which libiscsi logs
  and retries for ever (backoff 1, 2, 3... s; long lines folded here)::

    libiscsi:1 Failed to log in to target. Status: Target not found(515)
      [iqn...]
    libiscsi:1 reconnect try 1 failed, waiting 1 seconds [iqn...]

  -> :attr:`Outcome.RECONNECT_REFUSED`.  A new qemu-io with the same
  initiator name exits at open::

    qemu-io: can't open: iSCSI: Failed to connect to LUN : Failed to log
      in to target. Status: Target not found(515)

  -> :attr:`Outcome.LOGIN_REFUSED`.
* With CHAP, as our driver exports: the target taken offline, its
  sessions closed, the target and its CHAP account deleted: the first
  re-login gets ``Status: Target error(768)``, each later one a reset::

    libiscsi:1 read from socket failed, errno:104 [iqn...]
    libiscsi:1 reconnect try 4 failed, waiting 4 seconds [iqn...]

  (-> RECONNECT_REFUSED: tgtd accepts the TCP connection and resets the
  login).  Some tries fail with no line before them (tries 2 and 3 of
  one session; a CI run saw only such tries for 38 s): tgtd closed the
  login's connection, the one failure libiscsi does not log (-> also
  RECONNECT_REFUSED, when one try line follows another).  A new qemu-io
  exits at open with ``iscsi_service: socket error Connection reset by
  peer(104)`` (-> LOGIN_REFUSED).  Upstream's TgtAdm
  export (target and account deleted): a new qemu-io's open gets only
  ``can't open: iSCSI: Failed to connect to LUN : iscsi_service failed
  with : iscsi_service_reconnect_if_loggedin. Can not reconnect right
  now.`` with no socket error before it: tgtd closed the login (->
  LOGIN_REFUSED; with ``Connection refused(111)`` before it, tgtd is
  down: not a refusal).
* Target taken offline (``--op update --mode target --name state --value
  offline``) and the session closed: the same, with ``Status: Target
  error(768)``.  Offline alone, session left open: the session's commands
  get no answer and nothing is printed (-> :attr:`Outcome.TIMED_OUT`);
  only a new login is refused (``Target error(768)``).
* The LUN deleted (``--op delete --mode logicalunit``), target kept::

    qemu-io: iSCSI WRITE10/16 failed at lba 0: SENSE
      KEY:ILLEGAL_REQUEST(5) ASCQ:LOGICAL_UNIT_NOT_SUPPORTED(0x2500)
    write failed: Operation not supported

  -> :attr:`Outcome.IO_ERROR`, detail the errno text and the sense.
* Only the session closed, ACL kept: libiscsi logs back in at once; the
  write lands after ``iSCSI CheckCondition: SENSE KEY:UNIT_ATTENTION(6)
  ASCQ:BUS_RESET(0x2900)`` (-> :attr:`Outcome.WROTE`: not a cut).
* tgtd killed: ``iscsi_service: socket error Connection refused(111)
  while connecting`` and ``reconnect try N failed``: no target refused
  anything (-> :attr:`Outcome.TIMED_OUT`, the text in ``output``).
* A stopped (SIGSTOP) or hung qemu-io prints nothing: TIMED_OUT; a killed
  one: :attr:`Outcome.PROCESS_GONE`.
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


#: What each of the tgt refusals leaves in libiscsi's log or qemu-io's.
_LOGIN_REFUSAL = re.compile(
    r'Failed to log in to target\. Status: ([^\[\n]*[^\[\n ])')
#: tgtd resets a CHAP login it has no target or account for (TCP accepted,
#: then ECONNRESET); a daemon that is down refuses the TCP connection (111).
_LOGIN_RESET = re.compile(
    r'(read from socket failed, errno:104|socket error Connection reset by '
    r'peer\(104\))')
#: A new login whose connection tgtd closed (no RST): qemu-io's open fails
#: with only this (the upstream TgtAdm export, target and account deleted).
_OPEN_HANGUP = ("can't open: iSCSI: Failed to connect to LUN : "
                "iscsi_service failed with : "
                "iscsi_service_reconnect_if_loggedin")
#: A re-login the target hung up on: libiscsi logs every failure of a
#: reconnect try (``iscsi_set_error``) except a connection its peer closed
#: (``recv`` returning 0), so a try line right after another failed
#: silently: tgtd accepted the connection and closed the login.
_SILENT_RETRY = re.compile(
    r'reconnect try \d+ failed[^\n]*\n'
    r'(?=libiscsi:1 reconnect try (\d+) failed)')
_SENSE_REFUSAL = re.compile(
    r"can't open: .*?(SENSE KEY:ILLEGAL_REQUEST[^\n]*)")
_IO_FAILED = re.compile(r'^(?:write|read) failed: (.*)$', re.M)
_QEMU_ERROR = re.compile(r'^qemu-io: (iSCSI [^\n]*)$', re.M)
_WROTE = re.compile(r'^wrote \d+/\d+ bytes at offset', re.M)
_READ = re.compile(r'^read \d+/\d+ bytes at offset', re.M)
#: What the tail of an outcome's ``output`` keeps for a message.
TAIL = 1500


class Outcome(object):
    """What one qemu-io command got: a kind, the text behind it.

    Kinds: :attr:`WROTE`, :attr:`READ` (the target answered, the pattern
    matched), :attr:`MISMATCH` (read, other bytes), :attr:`IO_ERROR`
    (qemu-io printed ``write failed: <errno text>``: ``detail`` has it
    and the SCSI sense), :attr:`LOGIN_REFUSED` (qemu-io exited at open,
    the target refusing its login or LUN), :attr:`RECONNECT_REFUSED` (no
    answer within the timeout, and libiscsi logged the target refusing
    the session's re-login meanwhile), :attr:`TIMED_OUT` (no answer, no
    refusal seen) and :attr:`PROCESS_GONE` (qemu-io exited after it
    opened, or before the command); :attr:`UNKNOWN`, an answer that is
    none of these.  ``output``: the initiator's last
    output (this command's, or its whole transcript's tail when it had
    none).  :attr:`refused` is the positive signal of a cut-off; a
    time-out or a dead process is none.  No truth value: ask ``ok`` or
    ``refused``.
    """

    WROTE = 'WROTE'
    READ = 'READ'
    MISMATCH = 'MISMATCH'
    IO_ERROR = 'IO_ERROR'
    LOGIN_REFUSED = 'LOGIN_REFUSED'
    RECONNECT_REFUSED = 'RECONNECT_REFUSED'
    TIMED_OUT = 'TIMED_OUT'
    PROCESS_GONE = 'PROCESS_GONE'
    UNKNOWN = 'UNKNOWN'
    REFUSALS = frozenset((IO_ERROR, LOGIN_REFUSED, RECONNECT_REFUSED))

    def __init__(self, kind, command, detail='', output='', pid=None):
        self.kind = kind
        self.command = command
        self.detail = detail
        self.output = output
        self.pid = pid

    @property
    def ok(self):
        return self.kind in (self.WROTE, self.READ)

    @property
    def refused(self):
        return self.kind in self.REFUSALS

    def __bool__(self):
        raise TypeError('an Outcome has no truth value: use .ok, .refused '
                        'or .kind')

    def describe(self):
        text = '%s (%s)' % (self.kind, self.command)
        if self.detail:
            text += ': %s' % self.detail
        return text + '; initiator pid %s, last output: %r' % (
            self.pid, self.output[-TAIL:])

    __str__ = describe

    def __repr__(self):
        return '<Outcome %s>' % self.describe()


def refusal(text):
    """The login refusal, login reset or LUN refusal in *text*, or None.

    What libiscsi logs (``LIBISCSI_DEBUG=1``) or qemu-io prints when the
    target refuses a (re-)login or the LUN: the positive signal of a cut.
    """
    found = _LOGIN_REFUSAL.findall(text or '')
    if found:
        return 'login refused: Status: %s' % found[-1]
    found = _SENSE_REFUSAL.findall(text or '')
    if found:
        return 'LUN refused: %s' % found[-1]
    found = _LOGIN_RESET.findall(text or '')
    if found:
        return 'login reset by the target: %s' % found[-1]
    if 'socket error' in (text or ''):
        # A daemon that is down: "Connection refused(111)" at connect.
        return None
    if _OPEN_HANGUP in (text or ''):
        # Connected, then the target hung up the login.
        return 'login closed by the target: %s' % _OPEN_HANGUP
    found = _SILENT_RETRY.findall(text or '')
    if found:
        return ('login closed by the target: reconnect try %s failed with '
                'no error' % found[-1])
    return None


class QemuIoInitiator(object):
    """A live userspace iSCSI initiator: qemu-io over libiscsi.

    The session stays logged in between commands.  :meth:`try_write` and
    :meth:`try_read` return an :class:`Outcome`; ``write``/``read`` keep
    the old answer for the conformance probe (True on success, False when
    qemu-io answered otherwise, None when it gave no answer within
    *timeout* or exited).  qemu-io runs one command at a time: a command
    that timed out is still pending (libiscsi retries it), and the answer
    it may get later is counted off the next command's output
    (``late`` keeps those answers).
    """

    PROMPT = b'qemu-io> '

    def __init__(self, portal, iqn, initiator, username=None, password=None,
                 lun=1, prefix=()):
        # *prefix*: a command that runs qemu-io elsewhere, e.g. on a host of
        # its own (``ip netns exec NODE``).
        self._dir = tempfile.mkdtemp(prefix='qemu-io-')
        opts = ['driver=iscsi', 'transport=tcp', 'portal=%s' % portal,
                'target=%s' % iqn, 'lun=%d' % lun,
                'initiator-name=%s' % initiator]
        cmd = list(prefix) + ['qemu-io']
        if username:
            secret = os.path.join(self._dir, 'chap')
            fd = os.open(secret, os.O_WRONLY | os.O_CREAT, 0o600)
            os.write(fd, password.encode())
            os.close(fd)
            cmd += ['--object', 'secret,id=chap0,file=%s' % secret]
            opts += ['user=%s' % username, 'password-secret=chap0']
        cmd += ['--image-opts', ','.join(opts)]
        # libiscsi's error log (level 1) on stderr: a refused re-login of
        # the session is otherwise silent.
        env = dict(os.environ, LIBISCSI_DEBUG='1')
        try:
            self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE,
                                         stderr=subprocess.STDOUT, env=env)
        except BaseException:
            shutil.rmtree(self._dir)
            raise
        self.output = b''
        self.transcript = b''
        self.late = []
        self._owed = 0
        self.opened = self._command(None, timeout=10)
        #: Why the open failed, when the target refused it (else None).
        self.open_refusal = None
        if self.opened is None:
            if b"can't open" in self.output:
                try:
                    self.proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
            if self.proc.poll() is not None:
                self.open_refusal = refusal(
                    self.output.decode(errors='replace'))

    def _command(self, line, timeout, refusal_wait=0):
        """Send *line*; return its output, or None on timeout/exit.

        *refusal_wait*: after *timeout* with no answer, read on up to that
        many more seconds while no login refusal has been printed
        (libiscsi's reconnect backoff grows to 30 s).
        """
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
        last = deadline + refusal_wait
        owed = self._owed
        self._owed += 1
        while True:
            now = time.monotonic()
            if now >= last or now >= deadline and (
                    not refusal_wait or refusal(
                        self.output.decode(errors='replace'))):
                break
            ready, _w, _x = select.select([fd], [], [], 0.05)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:
                    return None
                self.output += chunk
                self.transcript = (self.transcript + chunk)[-65536:]
                # Answers to commands that timed out before come first.
                while owed and self.PROMPT in self.output:
                    late, self.output = self.output.split(self.PROMPT, 1)
                    self.late.append(late.decode(errors='replace'))
                    owed -= 1
                    self._owed -= 1
                if not owed and self.output.endswith(self.PROMPT):
                    self._owed -= 1
                    return self.output.decode(errors='replace')
        return None

    def _outcome(self, command, timeout, ok_kind, refusal_wait=0):
        gone_before = self.proc.poll() is not None
        out = self._command(command, timeout, refusal_wait)
        text = self.output.decode(errors='replace')
        pid = self.proc.pid
        if out is None:
            tail = text or self.transcript.decode(errors='replace')
            if gone_before and self.open_refusal:
                return Outcome(Outcome.LOGIN_REFUSED, command,
                               self.open_refusal, tail, pid)
            refused = refusal(text)
            if self.proc.poll() is not None:
                return Outcome(Outcome.PROCESS_GONE, command,
                               'qemu-io exited (status %s)%s' % (
                                   self.proc.returncode,
                                   ' before the command' if gone_before
                                   else ''), tail, pid)
            if refused:
                return Outcome(Outcome.RECONNECT_REFUSED, command,
                               'no answer in %s s; libiscsi: %s' % (
                                   timeout, refused), tail, pid)
            return Outcome(Outcome.TIMED_OUT, command,
                           'no answer in %s s%s' % (
                               timeout, ', nor a refusal in %s s more' %
                               refusal_wait if refusal_wait else ''),
                           tail, pid)
        failed = _IO_FAILED.findall(text)
        if failed:
            detail = failed[-1]
            sense = _QEMU_ERROR.findall(text)
            if sense:
                detail += ' (%s)' % sense[-1]
            return Outcome(Outcome.IO_ERROR, command, detail, text, pid)
        if ok_kind == Outcome.WROTE and _WROTE.search(text):
            return Outcome(Outcome.WROTE, command, '', text, pid)
        if ok_kind == Outcome.READ and _READ.search(text):
            if 'Pattern verification failed' in text:
                return Outcome(Outcome.MISMATCH, command,
                               'Pattern verification failed', text, pid)
            return Outcome(Outcome.READ, command, '', text, pid)
        # Answered, but with nothing qemu-io prints for success or I/O
        # failure (a usage error, say): no signal either way.
        return Outcome(Outcome.UNKNOWN, command, 'unrecognised answer',
                       text, pid)

    def _try(self, verb, ok_kind, pattern, offset, length, timeout,
             refusal_wait):
        outcome = self._outcome('%s -P 0x%02x %d %d' % (
            verb, pattern, offset, length), timeout, ok_kind, refusal_wait)
        outcome.pattern, outcome.offset, outcome.length = (
            pattern, offset, length)
        return outcome

    def try_write(self, pattern, offset=0, length=4096, timeout=5,
                  refusal_wait=0):
        """Write *pattern*: the :class:`Outcome` (``WROTE`` on success)."""
        return self._try('write', Outcome.WROTE, pattern, offset, length,
                         timeout, refusal_wait)

    def try_read(self, pattern, offset=0, length=4096, timeout=5,
                 refusal_wait=0):
        """Read, checking *pattern*: the :class:`Outcome` (``READ``)."""
        return self._try('read', Outcome.READ, pattern, offset, length,
                         timeout, refusal_wait)

    def write(self, pattern, offset=0, length=4096, timeout=5):
        """True (wrote), False (answered otherwise), None (no answer)."""
        out = self._command('write -P 0x%02x %d %d' % (pattern, offset,
                                                       length), timeout)
        return None if out is None else bool(_WROTE.search(out))

    def read(self, pattern, offset=0, length=4096, timeout=5):
        """True (read *pattern*), False (other answer), None (none)."""
        out = self._command('read -P 0x%02x %d %d' % (pattern, offset,
                                                      length), timeout)
        return None if out is None else bool(
            _READ.search(out) and 'Pattern verification failed' not in out)

    def read_bytes(self, offset=0, length=4096, timeout=5):
        """The bytes the target returns, or None (no answer, I/O error)."""
        out = self._command('read -v %d %d' % (offset, length), timeout)
        if out is None or not _READ.search(out):
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
