#!/usr/bin/env python3
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

"""Force-detach teardown of N live tgt exports: ours against upstream's.

Both sides run on one real tgtd (control port 0, portal on 127.0.0.1 at a
free port), one after the other, each starting from an empty daemon, each
exporting N volumes (sparse files) its own way:

* ours: ``TgtISCSIDriver.create_export`` + ``initialize_connection`` for
  the initiator (a target per volume, LUN 1, the export's own CHAP account,
  an ACL for the initiator name); teardown is what force-detach runs in the
  driver: ``revoke_host_access(volume, None)`` then ``remove_export`` (as
  the working tree has it: Cinder's coordinator is started, file backend,
  for the volume lock our driver may take).  In this tree that reads only
  the volume's own target plus tgtd's short list of target names (to find
  the tid and check its name), never the listing of every target.
* upstream: Cinder's own helper, ``cinder.volume.targets.tgt.TgtAdm``:
  ``create_export`` -> ``create_iscsi_target`` writes its target file in a
  temporary ``volumes_dir`` (its CHAP ``incominguser``, its defaults) and
  runs ``tgt-admin --update``, which binds ``initiator-address ALL``;
  teardown is ``remove_iscsi_target`` (``tgt-admin --delete --force`` plus
  its check and retry; the ``show_target`` that upstream's
  ``remove_export`` runs first is left out, in upstream's favour).
  Nothing of upstream's code is changed: its privsep calls run in-process,
  and its ``tgt-admin`` runs get ``-c FILE`` naming a tgt config that
  includes the temporary ``volumes_dir`` (what devstack adds to
  /etc/tgt/targets.conf).  Its ``tgtadm``/``tgt-admin`` talk to control
  port 0, so this benchmark starts its own tgtd there and refuses to run
  when one already answers; the whole run holds an exclusive ``flock`` on
  /run/lock/cinder-forcedetach-tgtd-port0.lock, so other users of control
  port 0 wait.

Each side first exports and tears down one volume untimed (warm-up).
Then, per N: export N volumes, log a live qemu-io (libiscsi) initiator in
to each with the credentials that side handed out, write through each,
and time the teardown of all N, volume after volume.  Printed per side:
wall time (and per volume), targets, sessions and CHAP accounts left on
the daemon; whether the held initiators can still write (each tries one
4 KiB write after the teardown: acknowledged / error / no answer, and the
bytes that landed in the backing files); whether a new login with the old
credentials succeeds (and what its write lands).  Then the ratio
ours/upstream, computed from the two measured times, and the growth
curve: our per-volume cost at each N and against N=1, the listings (the
short list of names our teardown reads, the listing of every target it no
longer reads), timed at each N, our teardown split into name-list
calls, other tgtadm calls and the rest, and the mean time of one call of
each tgtadm operation at each N: tgtd 1.0.85 keeps its targets in a list
it walks for every tid, and deleting an account walks it once per target,
so the calls that grow most with N are the deletes, not the reads.  The
exit status is 1 when ours leaves anything (target, session, account, a
landed byte, a new login) or a teardown raised.

Sizes: 1, 10, 100 by default.  ``--sizes 1,10,100,1000`` adds N=1000 for
our side (~1000 qemu-io sessions, ~1 GB PSS, a few minutes); upstream
runs only up to ``--upstream-max`` (default 100): its export alone costs
~0.7 s a volume at N=100 and more beyond (every ``tgt-admin`` run re-reads
all target files and lists all targets), so N=1000 on its side takes well
over half an hour (``--upstream-max 1000``).
Sessions: a qemu-io session holds ~9 MB RSS (~1 MB private), so by default
every volume gets one (``--max-sessions``, default 1000); above it the
sessions are held on an evenly spread sample and the output says so.
CHAP passwords never appear in the output.  For figures, run on a quiet
machine: ``--quiet-below 1.0`` waits (holding the lock) for the load to
drop first.

Usage: .venv/bin/python benchmarks/tgt_force_detach.py [--sizes 1,10,100]
           [--upstream-max 100] [--max-sessions 1000] [--quiet-below 1.0]
"""

import argparse
import fcntl
import logging
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
import warnings

warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')
sys.path.insert(0, os.path.join(os.path.dirname(__file__), '..'))

from cinder import context as cinder_context  # noqa: E402
from cinder import coordination  # noqa: E402
from cinder import exception as cinder_exception  # noqa: E402
from cinder import objects as cinder_objects  # noqa: E402
import cinder.privsep  # noqa: E402
import cinder.privsep.targets.tgt as upstream_privsep_tgt  # noqa: E402
from cinder.volume import configuration  # noqa: E402
from cinder.volume import driver as cinder_driver  # noqa: E402
from cinder.volume.targets import tgt as upstream_tgt  # noqa: E402
from oslo_concurrency import lockutils  # noqa: E402
from oslo_concurrency import processutils  # noqa: E402
from oslo_config import cfg  # noqa: E402

from cinder_forcedetach.conformance import initiator as initiator_mod  # noqa: E402,E501
from cinder_forcedetach.drivers import iscsi  # noqa: E402
from devbox.services import tgtd  # noqa: E402
from tests.support import tgtd as tgtd_daemon  # noqa: E402

CONF = cfg.CONF
LOCK_PATH = '/run/lock/cinder-forcedetach-tgtd-port0.lock'
CONTROL_PORT = 0
OURS_GROUP = 'bench_forcedetach'
UPSTREAM_GROUP = 'bench_upstream'
CONNECTOR = {'host': 'compute1', 'ip': '127.0.0.1', 'multipath': False,
             'platform': 'x86_64', 'os_type': 'linux',
             'initiator': 'iqn.2026-11.org.cinder-forcedetach.bench:compute1'}
VOLUME_SIZE_GB = 1
BLOCK = 4096
# (pattern, offset) of the write before the teardown, of the held
# initiator's write after it, and of a new login's write.
LIVE_WRITE = (0x5a, 0)
HELD_WRITE = (0xa5, 1 << 20)
NEW_WRITE = (0xc3, 2 << 20)
SPAWN_CHUNK = 50
OPEN_TIMEOUT = 60
WRITE_TIMEOUT = 5
LOGIN_TIMEOUT = 10

SECRETS = set()


def redact(text):
    for secret in SECRETS:
        text = text.replace(secret, '***')
    return text


class RedactingHandler(logging.StreamHandler):
    """Log to stderr with secrets masked, and only the first few records."""

    LIMIT = 10

    def __init__(self):
        super(RedactingHandler, self).__init__(sys.stderr)
        self.setFormatter(logging.Formatter('%(levelname)s %(name)s: '
                                            '%(message)s'))
        self.count = 0

    def format(self, record):
        return redact(super(RedactingHandler, self).format(record))

    def emit(self, record):
        self.count += 1
        if self.count <= self.LIMIT:
            super(RedactingHandler, self).emit(record)
        elif self.count == self.LIMIT + 1:
            self.stream.write('(further log records suppressed)\n')


def set_up_logging():
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(RedactingHandler())
    root.setLevel(logging.ERROR)


class Volume(dict):
    """A volume both drivers can read: ``vol['name']`` and ``vol.name``."""

    def __getattr__(self, key):
        try:
            return self[key]
        except KeyError:
            raise AttributeError(key)


class NoVolumeRows(object):
    """Upstream's helper looks for CHAP in the DB; new volumes have none."""

    @staticmethod
    def volume_get(context, volume_id):
        raise cinder_exception.VolumeNotFound(volume_id=volume_id)


class NoVolumeObjects(object):
    """Cinder's ``remove_export`` re-reads the volume under our lock.

    There is no database here: the read finds nothing, and the caller's
    volume is used, as for a volume deleted meanwhile.
    """

    @staticmethod
    def get_by_id(context, volume_id):
        raise cinder_exception.VolumeNotFound(volume_id=volume_id)


# -- the daemon --------------------------------------------------------------

def tgtadm(*args):
    return tgtd.tgtadm(CONTROL_PORT, *args, check=False)


def take_port0_lock():
    os.makedirs(os.path.dirname(LOCK_PATH), exist_ok=True)
    lock = open(LOCK_PATH, 'a')
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        print('waiting for %s (another run uses tgtd control port 0)'
              % LOCK_PATH, flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def start_tgtd(workdir, iothreads=None):
    if tgtadm('--op', 'show', '--mode', 'sys').returncode == 0:
        sys.exit('a tgtd already answers on control port 0; this benchmark '
                 'needs its own there (upstream\'s helper has no -C): stop '
                 'it first')
    daemon = tgtd_daemon.Tgtd(workdir, iothreads=iothreads)
    daemon.control_port = CONTROL_PORT
    daemon.start()
    return daemon


def listing():
    return tgtadm('--op', 'show', '--mode', 'target').stdout


def names_listing():
    return tgtadm('--op', 'show', '--mode', 'lld').stdout


def daemon_state():
    """(targets, sessions, CHAP accounts) on the daemon, read from tgtadm."""
    out = listing()
    targets = len(re.findall(r'^Target \d+: ', out, re.M))
    sessions = len(re.findall(r'^ {8}I_T nexus: \d+$', out, re.M))
    return targets, sessions, len(accounts())


def accounts():
    out = tgtadm('--op', 'show', '--mode', 'account').stdout
    return [line.strip() for line in out.splitlines()[1:] if line.strip()]


def wipe_daemon():
    """Remove whatever a side left, so the next starts from nothing."""
    for tid in re.findall(r'^Target (\d+): ', listing(), re.M):
        tgtadm('--op', 'delete', '--mode', 'target', '--tid', tid,
               '--force')
    for user in accounts():
        tgtadm('--op', 'delete', '--mode', 'account', '--user', user)
    if any(daemon_state()):
        raise RuntimeError('could not empty tgtd: %s targets, %s sessions, '
                           '%s accounts left' % daemon_state())


def median_time(func, rounds=5):
    times = []
    for _ in range(rounds):
        start = time.monotonic()
        func()
        times.append(time.monotonic() - start)
    return statistics.median(times)


# -- live initiators ---------------------------------------------------------

class Initiator(object):
    """One qemu-io holding (or trying to open) an iSCSI session.

    The CHAP password goes through a 0600 secret file, never argv.  Many
    are driven at once by :func:`converse`.
    """

    PROMPT = b'qemu-io> '

    def __init__(self, info, secret_dir):
        secret = os.path.join(secret_dir, uuid.uuid4().hex)
        fd = os.open(secret, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, info['auth_password'].encode())
        os.close(fd)
        opts = ['driver=iscsi', 'transport=tcp',
                'portal=%s' % info['target_portal'],
                'target=%s' % info['target_iqn'],
                'lun=%d' % info['target_lun'],
                'initiator-name=%s' % CONNECTOR['initiator'],
                'user=%s' % info['auth_username'], 'password-secret=chap0']
        # libiscsi's error log on: a refused re-login says so (see
        # cinder_forcedetach.conformance.initiator).
        self.proc = subprocess.Popen(
            ['qemu-io', '--object', 'secret,id=chap0,file=%s' % secret,
             '--image-opts', ','.join(opts)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, LIBISCSI_DEBUG='1'))
        self.reply = None
        self.buffer = b''

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        self.proc.stdin.close()
        self.proc.stdout.close()

    def pss_kb(self):
        try:
            with open('/proc/%d/smaps_rollup' % self.proc.pid) as f:
                return int(re.search(r'^Pss:\s+(\d+)', f.read(), re.M)
                           .group(1))
        except (OSError, AttributeError):
            return 0


def converse(initiators, line, timeout):
    """Send *line* (None: just wait for the prompt) to all; collect replies.

    ``reply`` is the output up to the next prompt, or None when the
    initiator exited or did not answer within *timeout*; ``buffer`` keeps
    what it printed meanwhile (libiscsi's refused re-logins).
    """
    poller, pending = select.poll(), {}
    for ini in initiators:
        ini.reply, ini.buffer = None, b''
        if ini.proc.poll() is not None:
            continue
        if line is not None:
            try:
                ini.proc.stdin.write(line.encode() + b'\n')
                ini.proc.stdin.flush()
            except OSError:
                continue
        fd = ini.proc.stdout.fileno()
        pending[fd] = ini
        poller.register(fd, select.POLLIN | select.POLLHUP)
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for fd, _event in poller.poll(200):
            ini = pending[fd]
            chunk = os.read(fd, 65536)
            if chunk:
                ini.buffer += chunk
                if not ini.buffer.endswith(Initiator.PROMPT):
                    continue
                ini.reply = ini.buffer.decode(errors='replace')
            poller.unregister(fd)
            del pending[fd]
    return [ini.reply for ini in initiators]


def log_in(infos, secret_dir, timeout):
    """Start an initiator per connection info; returns (initiators, opened)."""
    initiators, opened = [], 0
    for i in range(0, len(infos), SPAWN_CHUNK):
        chunk = [Initiator(info, secret_dir)
                 for info in infos[i:i + SPAWN_CHUNK]]
        initiators += chunk
        replies = converse(chunk, None, timeout)
        opened += sum(1 for ini, reply in zip(chunk, replies)
                      if reply is not None and ini.proc.poll() is None)
    return initiators, opened


def write_all(initiators, pattern, timeout):
    """Each writes 4 KiB; returns (acknowledged, refused, unproven).

    Refused: a positive signal (qemu-io's ``write failed: ...``, or
    libiscsi's log of the target refusing or resetting the session's
    re-login while the write waited).  Unproven: no answer and no refusal
    (a time-out, an exited initiator, an unknown answer): never a cut.
    """
    replies = converse(initiators, 'write -P 0x%02x %d %d' % (
        pattern[0], pattern[1], BLOCK), timeout)
    acked = refused = 0
    for ini, reply in zip(initiators, replies):
        if reply is not None and re.search(r'^wrote ', reply, re.M):
            acked += 1
        elif reply is not None and re.search(r'^write failed: ', reply,
                                             re.M):
            refused += 1
        elif reply is None and ini.proc.poll() is None and (
                initiator_mod.refusal(ini.buffer.decode(errors='replace'))):
            refused += 1
    return acked, refused, len(replies) - acked - refused


def landed(paths, pattern):
    """Bytes of *pattern* found in the backing files (4 KiB per file)."""
    total = 0
    for path in paths:
        with open(path, 'rb') as f:
            f.seek(pattern[1])
            if f.read(BLOCK) == bytes([pattern[0]]) * BLOCK:
                total += BLOCK
    return total


# -- the two sides -----------------------------------------------------------

class CountingOps(object):
    """Counts and times our driver's tgtadm calls by operation."""

    def __init__(self, ops):
        self._ops, self.calls, self.seconds = ops, {}, {}

    def clear(self):
        self.calls.clear()
        self.seconds.clear()

    def __getattr__(self, name):
        op = getattr(self._ops, name)

        def counted(*args):
            start = time.monotonic()
            try:
                return op(*args)
            finally:
                self.calls[name] = self.calls.get(name, 0) + 1
                self.seconds[name] = (self.seconds.get(name, 0) +
                                      time.monotonic() - start)
        return counted


class Ours(object):
    name = 'ours'

    def __init__(self, workdir, portal_port):
        self.dir = os.path.join(workdir, 'ours-volumes')
        conf = configuration.Configuration(cinder_driver.volume_opts,
                                           config_group=OURS_GROUP)
        # Every option the driver reads, wherever its module defines it.
        conf.append_config_values(iscsi.TgtISCSIDriver.get_driver_options())
        for key, value in (('forcedetach_volumes_dir', self.dir),
                           ('forcedetach_tgt_control_port', CONTROL_PORT),
                           ('target_ip_address', '127.0.0.1'),
                           ('target_port', portal_port)):
            CONF.set_override(key, value, group=OURS_GROUP)
        self.driver = iscsi.TgtISCSIDriver(configuration=conf)
        self.driver.do_setup(None)
        self.ops = CountingOps(self.driver.target._ops)
        self.driver.target._ops = self.ops
        self.hook_s = [0.0, 0.0]
        self.context = cinder_context.get_admin_context()

    def path(self, volume):
        return self.driver.local_path(volume)

    def export(self, volume):
        self.driver.create_volume(volume)
        volume.update(self.driver.create_export(self.context, volume,
                                                CONNECTOR))
        # The grant without the mixin's lock and fence on grant, which
        # read Cinder's database (none here): setup, not what is measured.
        return self.driver.initialize_connection_unlocked(
            volume, CONNECTOR)['data']

    def teardown(self, volume):
        start = time.monotonic()
        self.driver.revoke_host_access(volume, None)
        middle = time.monotonic()
        self.driver.remove_export(self.context, volume)
        self.hook_s[0] += middle - start
        self.hook_s[1] += time.monotonic() - middle

    def clean(self, volumes):
        for volume in volumes:
            self.driver.delete_volume(volume)


class Upstream(object):
    name = 'upstream'

    def __init__(self, workdir, portal_port):
        self.dir = os.path.join(workdir, 'upstream-volumes')
        self.volumes_dir = os.path.join(workdir, 'upstream-tgt-volumes')
        os.makedirs(self.dir)
        os.makedirs(self.volumes_dir)
        conf_file = os.path.join(workdir, 'upstream-targets.conf')
        with open(conf_file, 'w') as f:
            f.write('include %s/*\n' % self.volumes_dir)
        conf = configuration.Configuration(cinder_driver.volume_opts,
                                           config_group=UPSTREAM_GROUP)
        for key, value in (('volumes_dir', self.volumes_dir),
                           ('target_helper', 'tgtadm'),
                           ('target_ip_address', '127.0.0.1'),
                           ('target_port', portal_port)):
            CONF.set_override(key, value, group=UPSTREAM_GROUP)
        self.helper = upstream_tgt.TgtAdm(configuration=conf,
                                          root_helper=None)
        self.helper.db = NoVolumeRows()
        self.context = cinder_context.get_admin_context()
        execute = processutils.execute

        def with_volumes_dir(*cmd, **kwargs):
            if cmd and cmd[0] == 'tgt-admin':
                cmd = (cmd[0], '-c', conf_file) + cmd[1:]
            return execute(*cmd, **kwargs)
        upstream_privsep_tgt.processutils.execute = with_volumes_dir

    def path(self, volume):
        return os.path.join(self.dir, volume.name)

    def export(self, volume):
        with open(self.path(volume), 'xb') as f:
            f.truncate(VOLUME_SIZE_GB << 30)
        export = self.helper.create_export(self.context, volume,
                                           self.path(volume))
        volume.update(provider_location=export['location'],
                      provider_auth=export['auth'])
        return self.helper.initialize_connection(volume, CONNECTOR)['data']

    def teardown(self, volume):
        self.helper.remove_iscsi_target(0, 1, volume.id, volume.name)

    def clean(self, volumes):
        for volume in volumes:
            os.unlink(self.path(volume))
        for name in os.listdir(self.volumes_dir):
            os.unlink(os.path.join(self.volumes_dir, name))


def sample(count, limit):
    """Indices of at most *limit* of *count* volumes, evenly spread."""
    if count <= limit:
        return list(range(count))
    return sorted({i * count // limit for i in range(limit)})


def new_volumes(n):
    volumes = []
    for _ in range(n):
        vol_id = str(uuid.uuid4())
        volumes.append(Volume(id=vol_id, name='volume-%s' % vol_id,
                              size=VOLUME_SIZE_GB, provider_location=None,
                              provider_auth=None, volume_attachment=[],
                              encryption_key_id=None))
    return volumes


def warm_up(side):
    """One untimed export and teardown of a volume.

    First-call costs (plugin loading, lock files) are not what a running
    volume service pays per volume.
    """
    volumes = new_volumes(1)
    SECRETS.add(side.export(volumes[0])['auth_password'])
    side.teardown(volumes[0])
    wipe_daemon()
    side.clean(volumes)


def run_side(side, n, max_sessions, secret_dir):
    """Export n volumes, hold sessions, time the teardown, see what's left."""
    volumes = new_volumes(n)
    start = time.monotonic()
    infos = []
    for volume in volumes:
        info = side.export(volume)
        SECRETS.add(info['auth_password'])
        infos.append(info)
    setup = time.monotonic() - start
    held = sample(n, max_sessions)
    paths = [side.path(volumes[i]) for i in held]
    initiators, opened = log_in([infos[i] for i in held], secret_dir,
                                OPEN_TIMEOUT)
    result = {'setup': setup, 'held': len(held)}
    try:
        if opened != len(held) or write_all(
                initiators, LIVE_WRITE, OPEN_TIMEOUT)[0] != len(held) or (
                landed(paths, LIVE_WRITE) != BLOCK * len(held)):
            raise RuntimeError('%s, N=%d: only some initiators logged in and '
                               'wrote before the teardown' % (side.name, n))
        result['pss_mb'] = sum(i.pss_kb() for i in initiators) / 1024.0
        result['before'] = daemon_state()
        result['show_s'] = median_time(listing)
        result['show_kb'] = len(listing()) / 1024.0
        if isinstance(side, Ours):
            target = side.driver.target
            one = side.driver.target_name(volumes[held[0]])
            # What each find() pays: the spawn, the listing, every header
            # checked and one target parsed (the teardown no longer does).
            result['find_s'] = median_time(lambda: target.find(one))
            # What each lookup of our teardown pays: the spawn, the short
            # list of names, its parse.
            result['names_s'] = median_time(names_listing)
            result['names_kb'] = len(names_listing()) / 1024.0
            result['tid_of_s'] = median_time(lambda: target.tid_of(one))
            tid = target.tid_of(one)
            # What any tgtadm call costs here: the spawn alone (no
            # daemon), and a request tgtd answers at once.
            result['spawn_s'] = median_time(lambda: subprocess.run(
                ['tgtadm', '--version'], capture_output=True))
            result['noop_s'] = median_time(
                lambda: tgtadm('--op', 'show', '--mode', 'sys'))
            result['per_tid'] = per_tid_sections(tid)
            result['per_tid_sessions'] = len(target.connections(tid))
            side.ops.clear()
            side.hook_s[:] = [0.0, 0.0]

        errors = []
        start = time.monotonic()
        for volume in volumes:
            try:
                side.teardown(volume)
            except Exception as e:
                errors.append(e)
        result['teardown'] = time.monotonic() - start
        result['errors'] = len(errors)
        result['first_error'] = redact(
            '%s: %s' % (type(errors[0]).__name__, errors[0])
        ) if errors else ''
        if isinstance(side, Ours):
            result['calls'] = dict(side.ops.calls)
            result['call_s'] = dict(side.ops.seconds)
            result['hook_s'] = list(side.hook_s)
        result['after'] = daemon_state()
        result['held_write'] = write_all(initiators, HELD_WRITE,
                                         WRITE_TIMEOUT)
        result['sessions_after_write'] = daemon_state()[1]
    finally:
        for ini in initiators:
            ini.kill()
    again, opened = log_in([infos[i] for i in held], secret_dir,
                           LOGIN_TIMEOUT)
    try:
        result['new_logins'] = opened
        reopened = [ini for ini in again if ini.reply is not None and
                    ini.proc.poll() is None]
        result['new_write'] = write_all(reopened, NEW_WRITE, WRITE_TIMEOUT)
    finally:
        for ini in again:
            ini.kill()
    result['held_landed'] = landed(paths, HELD_WRITE)
    result['new_landed'] = landed(paths, NEW_WRITE)
    wipe_daemon()
    side.clean(volumes)
    for name in os.listdir(secret_dir):
        os.unlink(os.path.join(secret_dir, name))
    return result


# -- output ------------------------------------------------------------------

HEADER = ('%5s  %-8s  %10s  %9s  %7s  %8s  %8s  %16s  %12s  %10s  %6s' % (
    'N', 'side', 'teardown', 'per vol', 'targets', 'sessions', 'CHAP',
    'held writes', 'bytes landed', 'new logins', 'errors'))
HEADER2 = ('%5s  %-8s  %10s  %9s  %7s  %8s  %8s  %16s  %12s  %10s  %6s' % (
    '', '', 's', 'ms', 'left', 'left', 'accts', 'ok/refus/unprv', 'held/new',
    'ok/tried', ''))


def row(n, side, r):
    targets, sessions, accts = r['after']
    return ('%5d  %-8s  %10.3f  %9.2f  %7d  %8d  %8d  %16s  %12s  %10s  %6d'
            % (n, side, r['teardown'], 1000.0 * r['teardown'] / n, targets,
               sessions, accts, '%d/%d/%d' % r['held_write'],
               '%d/%d' % (r['held_landed'], r['new_landed']),
               '%d/%d' % (r['new_logins'], r['held']), r['errors']))


def load():
    with open('/proc/loadavg') as f:
        return ' '.join(f.read().split()[:3])


def main():
    if not hasattr(cinder_objects, 'Volume'):   # objects not registered
        cinder_objects.Volume = NoVolumeObjects
    parser = argparse.ArgumentParser(
        description=__doc__.split('\n')[0],
        epilog='Upstream is slow to export (~0.7 s a volume at N=100, more '
               'as N grows): N=1000 on its side takes tens of minutes.')
    parser.add_argument('--sizes', default='1,10,100',
                        help='comma-separated numbers of volumes '
                             '(default 1,10,100; add 1000 for the growth '
                             'curve)')
    parser.add_argument('--upstream-max', type=int, default=100,
                        help='largest N at which upstream runs too; above '
                             'it only ours runs (default 100)')
    parser.add_argument('--quiet-below', type=float, default=None,
                        help='once the port-0 lock is held, wait (up to 15 '
                             'min, polling every 30 s) until the 1-minute '
                             'load average is below this')
    parser.add_argument('--max-sessions', type=int, default=1000,
                        help='live qemu-io sessions held per side and N at '
                             'most; above it an even sample (default 1000)')
    parser.add_argument('--tgtd-iothreads', type=int, default=None,
                        help='start tgtd with -t N: its I/O threads per '
                             'LUN (tgtd\'s default 16), for both sides')
    args = parser.parse_args()
    sizes = [int(n) for n in args.sizes.split(',')]

    set_up_logging()
    lock = take_port0_lock()
    if args.quiet_below is not None:
        wait_quiet(args.quiet_below)
    workdir = tempfile.mkdtemp(prefix='fd-bench-tgt-')
    secret_dir = tempfile.mkdtemp(prefix='chap-', dir=workdir)
    CONF([], project='cinder', default_config_files=[])
    CONF.set_override('state_path', workdir)
    lockutils.set_defaults(workdir)
    cinder.privsep.sys_admin_pctxt.set_client_mode(False)
    # Our driver takes each volume's tooz lock, as in cinder-volume
    # (backend file://$state_path).
    coordination.COORDINATOR.start()
    daemon = None
    safe = False
    try:
        daemon = start_tgtd(workdir, args.tgtd_iothreads)
        ours = Ours(workdir, daemon.port)
        upstream = Upstream(workdir, daemon.port)
        print('tgt force-detach teardown, ours vs upstream: tgtd %s on '
              'control port %d, portal 127.0.0.1:%d, %s I/O threads per '
              'LUN; load %s at start; code: %s' % (
                  tgtd_version(), CONTROL_PORT, daemon.port,
                  args.tgtd_iothreads or '16 (default)', load(),
                  code_version()), flush=True)
        warm_up(ours)
        warm_up(upstream)
        results = run_all(sizes, ours, upstream, args, secret_dir)
        growth(sizes, results)
        safe = goals(sizes, results)
        print('load %s at end' % load())
    finally:
        if daemon is not None:
            daemon.stop()
        coordination.COORDINATOR.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        lock.close()
    if not safe:
        sys.exit('ours left a target, session or account, an error, a new '
                 'login or landed bytes after its teardown (see above)')


def wait_quiet(limit, timeout=900, poll=30):
    deadline = time.monotonic() + timeout
    while float(load().split()[0]) >= limit:
        if time.monotonic() >= deadline:
            print('load %s still >= %.2f after %d s: running anyway'
                  % (load(), limit, timeout), flush=True)
            return
        time.sleep(poll)


def code_version():
    """The commit measured, and whether the driver code had local edits."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

    def git(*args):
        return subprocess.run(('git', '-C', repo) + args, capture_output=True,
                              text=True).stdout.strip()
    head = git('rev-parse', '--short', 'HEAD') or 'unknown'
    dirty = git('status', '--porcelain', '--', 'cinder_forcedetach')
    return '%s%s' % (head, ' + uncommitted changes in %d file(s) of '
                     'cinder_forcedetach/' % len(dirty.splitlines())
                     if dirty else '')


def tgtd_version():
    out = subprocess.run(['tgtadm', '--version'], capture_output=True,
                         text=True).stdout.strip()
    return out or '(version unknown)'


def run_all(sizes, ours, upstream, args, secret_dir):
    results = {}
    print(HEADER)
    print(HEADER2, flush=True)
    for n in sizes:
        sides = (ours, upstream) if n <= args.upstream_max else (ours,)
        for side in sides:
            r = results[n, side.name] = run_side(
                side, n, args.max_sessions, secret_dir)
            print(row(n, side.name, r), flush=True)
            if r['first_error']:
                print('       first error: %s' % r['first_error'])
        o, u = results[n, 'ours'], results.get((n, 'upstream'))
        held = 'sessions held: %d of %d volumes per side (%s), qemu-io ' \
            'PSS %.0f MB' % (o['held'], n, 'all' if o['held'] == n else
                             'even sample', o['pss_mb'])
        if u is None:
            print('%5s  upstream not run (N > --upstream-max %d);  %s;  '
                  'export (untimed): ours %.1f s' % (
                      '', args.upstream_max, held, o['setup']), flush=True)
        else:
            print('%5s  ratio ours/upstream = %.3f s / %.3f s = %.3f;  %s;'
                  '  export (untimed): ours %.1f s, upstream %.1f s' % (
                      '', o['teardown'], u['teardown'],
                      o['teardown'] / u['teardown'], held, o['setup'],
                      u['setup']), flush=True)
    return results


def growth(sizes, results):
    print('\nGrowth curve: our per-volume teardown cost against the targets '
          'on one tgtd (N targets and their sessions present before the '
          'teardown; listing figures: one run alone, median of 5; the '
          'split of our ms/vol is measured during the teardown).')
    print('%5s  %7s  %6s  %8s  %6s  %7s  %7s  %7s  %8s  %8s  %6s  %6s  '
          '%7s  %7s  %7s  %6s' % (
              'N', 'ours', 'x N=1', 'upstream', 'ratio', 'names', 'names',
              'tid_of', 'all', 'find', 'spawn', 'no-op', 'names', 'other',
              'rest', 'calls'))
    print('%5s  %7s  %6s  %8s  %6s  %7s  %7s  %7s  %8s  %8s  %6s  %6s  '
          '%7s  %7s  %7s  %6s' % (
              '', 'ms/vol', '', 'ms/vol', '', 'KB', 'ms', 'ms', 'KB', 'ms',
              'ms', 'ms', 'ms/vol', 'tgtadm', 'ms/vol', '/vol'))
    base_ms = 1000.0 * results[sizes[0], 'ours']['teardown'] / sizes[0]
    curve = []
    for n in sizes:
        o, u = results[n, 'ours'], results.get((n, 'upstream'))
        ours_ms = 1000.0 * o['teardown'] / n
        names_ms = 1000.0 * o['call_s'].get('show_target_names', 0) / n
        other_ms = 1000.0 * sum(v for k, v in o['call_s'].items()
                                if k != 'show_target_names') / n
        curve.append('N=%d %.1f' % (n, ours_ms))
        print('%5d  %7.2f  %6.2f  %8s  %6s  %7.1f  %7.2f  %7.2f  %8.1f  '
              '%8.2f  %6.2f  %6.2f  %7.2f  %7.2f  %7.2f  %6.1f' % (
                  n, ours_ms, ours_ms / base_ms,
                  '%.2f' % (1000.0 * u['teardown'] / n) if u else '-',
                  '%.3f' % (o['teardown'] / u['teardown']) if u else '-',
                  o['names_kb'], 1000.0 * o['names_s'],
                  1000.0 * o['tid_of_s'], o['show_kb'],
                  1000.0 * o['find_s'], 1000.0 * o['spawn_s'],
                  1000.0 * o['noop_s'], names_ms, other_ms,
                  ours_ms - names_ms - other_ms,
                  sum(o['calls'].values()) / float(n)))
    print('growth curve, ours (ms per volume): %s' % ', '.join(curve))
    print('(x N=1: ours ms/vol over ours at N=%d.  names KB, ms: one '
          '"tgtadm --op show --mode lld" run alone (each target\'s tid and '
          'name), which every lookup of our teardown reads; tid_of ms: '
          'TgtAdm.tid_of(), the spawn from this process plus its parse.  all '
          'KB, find ms: the listing of every target ("--op show --mode '
          'target") and TgtAdm.find(), which each teardown used to read '
          'twice and now does not read.  spawn ms: "tgtadm --version" (no '
          'daemon); no-op ms: "tgtadm --op show --mode sys", which tgtd '
          'answers at once: what any tgtadm call costs at that N, before '
          'the teardown.  Split of ours: "names" = time '
          'inside the show_target_names calls, "other tgtadm" = the other '
          'tgtadm calls, "rest" = parsing, the volume lock, Python.  calls: '
          'tgtadm calls per volume.)' % sizes[0])
    first, last = sizes[0], sizes[-1]
    o = results[last, 'ours']
    per_op = ', '.join('%s %.1f (%.2f ms)' % (
        k, v / float(last), 1000.0 * o['call_s'][k] / v)
        for k, v in sorted(o['calls'].items()))
    split = {}
    for n in (first, last):
        r = results[n, 'ours']
        split[n] = [1000.0 * r['call_s'].get('show_target_names', 0) / n,
                    1000.0 * sum(v for k, v in r['call_s'].items()
                                 if k != 'show_target_names') / n]
        split[n].append(1000.0 * r['teardown'] / n - sum(split[n]))
    growth_ms = sorted(
        ((1000.0 * (o['call_s'][k] / o['calls'][k] -
                    _mean_call_s(results[first, 'ours'], k)) *
          o['calls'][k] / float(last), k) for k in o['calls']),
        reverse=True)
    print('What our teardown reads (N=%d), tgtadm calls per volume (mean '
          'time of one): %s.  '
          'revoke_host_access(volume, None) looks the tid up in the short '
          'list of names (checking the name it maps to now), takes that '
          'target offline (tgtd then refuses every login and command on it, '
          'whatever its ACL), reads that target\'s sessions ("--op show '
          '--mode conn --tid T"), unbinds the initiator names it knows and '
          'closes the sessions; remove_export looks the tid up again, '
          'deletes the target by tid and the volume\'s CHAP account.  The '
          'list of names grows with N (%.1f KB at N=%d, %.1f KB at N=%d, '
          'two reads per volume), and so does tgtd\'s own work on every '
          'call (its targets are a list it walks for each tid; deleting an '
          'account walks it once per target): at N=%d %.2f ms/vol = name '
          'lists %.2f + other tgtadm calls %.2f + rest %.2f; at N=%d %.2f '
          'ms/vol = %.2f + %.2f + %.2f.  Growth of ms/vol from N=%d to '
          'N=%d by operation (mean time of one call x calls per volume): '
          '%s; a no-op tgtadm call (machine load, spawn) %+.2f ms.  Per '
          'target, tgtd 1.0.85 shows sessions (%d seen on one target '
          'here) but no ACL and no name: "--op show --mode target --tid T" '
          'prints only iSCSI parameters (sections: %s).'
          % (last, per_op, results[first, 'ours']['names_kb'], first,
             o['names_kb'], last, first,
             1000.0 * results[first, 'ours']['teardown'] / first,
             split[first][0], split[first][1], split[first][2], last,
             1000.0 * o['teardown'] / last, split[last][0], split[last][1],
             split[last][2], first, last,
             ', '.join('%s %+.2f' % (k, ms) for ms, k in growth_ms),
             1000.0 * (o['noop_s'] - results[first, 'ours']['noop_s']),
             o['per_tid_sessions'], ', '.join(o['per_tid']) or 'none'))
    per_operation(sizes, results)


def _mean_call_s(result, op):
    """Mean seconds of one *op* call in *result*'s teardown (0 if none)."""
    calls = result['calls'].get(op, 0)
    return result['call_s'][op] / calls if calls else 0.0


def per_operation(sizes, results):
    """Mean ms of one call of each tgtadm operation, at each N."""
    ops = sorted({k for n in sizes for k in results[n, 'ours']['calls']})
    print('\nOur teardown\'s tgtadm calls: mean ms of one call at each N '
          '(measured during the teardown), calls per volume at N=%d.'
          % sizes[-1])
    print('%-18s  %s  %9s' % ('operation', '  '.join(
        '%7s' % ('N=%d' % n) for n in sizes), 'calls/vol'))
    for op in ops:
        print('%-18s  %s  %9.1f' % (op, '  '.join(
            '%7.2f' % (1000.0 * _mean_call_s(results[n, 'ours'], op))
            for n in sizes), results[sizes[-1], 'ours']['calls'].get(
                op, 0) / float(sizes[-1])))
    print('%-18s  %s' % ('no-op (show sys)', '  '.join(
        '%7.2f' % (1000.0 * results[n, 'ours']['noop_s']) for n in sizes)))


def per_tid_sections(tid):
    """Which sections ``--op show --mode target --tid`` prints, here."""
    out = tgtadm('--op', 'show', '--mode', 'target', '--tid',
                 str(tid)).stdout
    return [s for s in ('I_T nexus', 'ACL', 'Account', 'LUN')
            if '%s information' % s in out]


GOAL_MS_PER_VOLUME = 15.0
GOAL_MS_AT = 1000
GOAL_RATIO = 0.1
GOAL_RATIO_AT = 100


def goals(sizes, results):
    print('\nGoal: ours <= %.0f ms per volume at N=%d; ours/upstream <= %.1f '
          'at N=%d; 0 sessions and 0 bytes landed after the teardown.' % (
              GOAL_MS_PER_VOLUME, GOAL_MS_AT, GOAL_RATIO, GOAL_RATIO_AT))
    safe = True
    for n in sizes:
        o, u = results[n, 'ours'], results.get((n, 'upstream'))
        # Every held write refused, positively: an acknowledged one, or
        # one with no refusal seen (time-out, exited), fails the check.
        clean = (o['after'][1] == 0 and o['sessions_after_write'] == 0 and
                 o['held_landed'] + o['new_landed'] == 0 and
                 o['held_write'][0] == 0 and o['held_write'][2] == 0)
        safe = safe and clean and o['errors'] == 0 and o['after'] == (
            0, 0, 0) and o['new_logins'] == 0
        parts = []
        if u is not None:
            ratio = o['teardown'] / u['teardown']
            parts.append('ratio %.3f%s' % (ratio, (
                ' <= %.1f' % GOAL_RATIO if ratio <= GOAL_RATIO else
                ' > %.1f (NOT met)' % GOAL_RATIO)
                if n == GOAL_RATIO_AT else ''))
        else:
            parts.append('upstream not run')
        per_volume = 1000.0 * o['teardown'] / n
        parts.append('ours %.2f ms/vol%s' % (per_volume, (
            ' <= %.0f' % GOAL_MS_PER_VOLUME
            if per_volume <= GOAL_MS_PER_VOLUME else
            ' > %.0f (NOT met)' % GOAL_MS_PER_VOLUME)
            if n == GOAL_MS_AT else ''))
        parts.append('ours after teardown: %d sessions, %d bytes landed, '
                     '%d new logins, held writes %d acknowledged / %d '
                     'refused / %d unproven (%s)' % (
                         max(o['after'][1], o['sessions_after_write']),
                         o['held_landed'] + o['new_landed'], o['new_logins'],
                         o['held_write'][0], o['held_write'][1],
                         o['held_write'][2], 'met' if clean else 'NOT met'))
        if u is not None:
            parts.append('upstream: %d sessions, %d bytes landed, %d new '
                         'logins, %d CHAP accounts left' % (
                             max(u['after'][1], u['sessions_after_write']),
                             u['held_landed'] + u['new_landed'],
                             u['new_logins'], u['after'][2]))
        print('  N=%-4d %s' % (n, '; '.join(parts)))
    return safe


if __name__ == '__main__':
    main()
