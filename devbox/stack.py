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

"""Cinder in a box: real Cinder services with our drivers, on loopback.

``tools/stack.sh up|down|status|env`` installs what is missing, then runs
this module with the venv's python.  It only uses the standard library, so
``down`` and ``status`` work whatever state the venv is in.

``up`` starts, as plain processes in their own sessions (no systemd), each
recorded in ``STATE/run/NAME.json`` (pid and kernel start time, so a
recycled pid is never signalled):

* ``epmd`` and ``rabbitmq-server`` (own node name, ports, mnesia and log
  directories under the state directory, a ``cinder`` user with a random
  password kept in ``STATE/secrets.json`` mode 0600, loopback only);
* ``tgtd -f -C CONTROL --iscsi portal=127.0.0.1:PORT``;
* with an RBD backend, a single-node Ceph (``tools/ceph-dev.sh``, cluster
  directory ``STATE/ceph``, monitor on the stack's address; its own pid
  records; ``down`` stops it after the Cinder services);
* ``mariadbd`` (own port, socket and data directory, a ``cinder`` user
  whose random password is kept in ``STATE/secrets.json``), unless ``--db
  sqlite``; with ``--coordination etcd``, ``etcd``;
* with ``--keystone``, ``keystone-api`` (PyPI keystone under gunicorn,
  fernet tokens, its database in the stack's MariaDB or SQLite; an
  ``admin`` and a ``cinder`` service user, the block-storage catalog) and
  Cinder's API behind keystonemiddleware, service tokens included; the
  client's credentials in ``STATE/openrc`` (mode 0600), never printed;
* with ``--glance``, ``glance-api`` (PyPI glance under gunicorn, one
  worker, no auth, a file store under ``STATE/glance/images``; its
  database in the stack's MariaDB, or SQLite) after ``glance-manage db
  sync``; Cinder's ``glance_api_servers`` points at it;
* with ``--nova`` (see :mod:`devbox.nova_box`),
  ``placement-api`` and ``neutron-api`` before Cinder, then
  ``nova-api``, ``nova-conductor``, ``nova-scheduler`` and
  ``nova-compute`` after it, two flavors and the compute host mapped;
* ``cinder-manage db sync``, then ``cinder-scheduler``, the
  ``cinder-volume`` service(s), with ``--backup`` ``cinder-backup``, and
  ``cinder-api`` from the venv with a
  generated ``STATE/cinder.conf`` (noauth, MariaDB or SQLite, the local
  rabbit, file or etcd tooz coordination, one backend section per
  ``STACK_BACKENDS`` entry).

It waits until the API answers and every backend's volume service is up
in the os-services API, creates a volume type per backend plus a
``multiattach`` type, and prints the endpoint and a client command.
``down`` stops exactly the processes it recorded (and their children):
SIGTERM, then SIGKILL after a grace period; tgtd, which ignores SIGTERM,
has its targets deleted and is stopped with ``tgtadm --op delete --mode
system``.

Settings (environment, or the equivalent ``--option`` of ``up``):

=========================  =============================================
``STACK_DIR``              state directory [``./state``, git-ignored]
``STACK_VENV``             virtualenv with Cinder [``./.venv``]
``STACK_HOST``             listen address, 127.0.0.0/8 only [127.0.0.1]
``STACK_API_PORT``         cinder-api port [18776]
``STACK_RABBIT_PORT``      AMQP port; Erlang distribution uses +1 [35672]
``STACK_EPMD_PORT``        Erlang port mapper port [34369]
``STACK_ISCSI_PORT``       tgtd iSCSI portal port [13260]
``STACK_TGT_CONTROL_PORT`` tgtd control port (``tgtadm -C``) [7260]
``STACK_BACKENDS``         comma list of ``NAME[=DRIVER]``; DRIVER is a
                           class or ``tgt``/``rbd``; a name alone is
                           ``rbd`` for ``rbd``, else ``tgt`` [tgt]
``STACK_CEPH_MON_PORT``    Ceph monitor msgr v1 port; v2 uses -1 [26790]
``STACK_EXTRA_CONF``       file appended to cinder.conf (more backend
                           options, e.g. for an RBD backend)
``STACK_PROJECT_ID``       noauth project id, hex [random, kept]
``STACK_TIMEOUT``          readiness timeout in seconds [120]
``STACK_DB``               ``mariadb`` (a project-started ``mariadbd``,
                           data under ``STATE/mariadb``) or ``sqlite``
                           (one file several services write: "database
                           is locked" under load) [mariadb]
``STACK_DB_PORT``          MariaDB port [33306]
``STACK_COORDINATION``     ``file`` or ``etcd`` (a project-started
                           single-member etcd, data under ``STATE/etcd``;
                           a dead holder's lock expires after 10 s) [file]
``STACK_ETCD_PORT``        etcd client port; peers use +1 [23790]
``STACK_VOLUME_SERVICES``  cinder-volume processes; with 2 or more each
                           has its own ``host`` (its process name) in the
                           cluster ``box``, serving every backend [1]
``STACK_KEYSTONE``         1: Keystone auth instead of noauth [0]
``STACK_KEYSTONE_PORT``    keystone-api port [15000]
``STACK_BACKUP``           1: also run cinder-backup with Cinder's POSIX
                           driver, backups under ``STATE/backups`` (a
                           backup attaches its volume on this host
                           through os-brick: RBD volumes in userspace
                           through librbd; iSCSI ones would need the
                           kernel initiator these machines lack) [0]
``STACK_GLANCE``           1: also run glance-api (images for create
                           from image and os-reimage) [0]
``STACK_GLANCE_PORT``      glance-api port [19292]
``STACK_NOVA``             1: also run Nova (nova-api, conductor,
                           scheduler, a compute on Nova's fake virt
                           driver), placement and Neutron (no agents);
                           implies Keystone, Glance and MariaDB [0]
``STACK_NOVA_PORT``        nova-api port [18774]
``STACK_PLACEMENT_PORT``   placement-api port [18778]
``STACK_NEUTRON_PORT``     neutron-api port [19696]
``STACK_DEBUG``            1: Cinder debug logging (may log more detail)
=========================  =============================================
"""

import argparse
import configparser
import errno
import functools
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

from devbox import boxutil
from devbox import ceph_dev
from devbox import nova_box

StackError = boxutil.StackError
log = boxutil.log
port_open = boxutil.port_open
wait_for = boxutil.wait_for
http_ok = boxutil.http_ok
_tail = boxutil.tail
_write = boxutil.write_private

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TGT_DRIVER = 'cinder_forcedetach.drivers.iscsi.TgtISCSIDriver'
RBD_DRIVER = 'cinder_forcedetach.drivers.rbd.RBDDriver'
DRIVER_ALIASES = {'tgt': TGT_DRIVER, 'iscsi': TGT_DRIVER, 'rbd': RBD_DRIVER}
INSTALL_CEPH = os.path.join(REPO_ROOT, 'tools', 'install-ceph.sh')
# client.cinder may also lift the fences force-detach adds.
CEPH_CINDER_MON_CAPS = ceph_dev.FENCING_CINDER_MON_CAPS
TGTD_SOCKET_DIR = '/var/run/tgtd'
ETC_CEPH = '/etc/ceph'
RABBITMQ_SERVER = '/usr/lib/rabbitmq/bin/rabbitmq-server'
DB_KINDS = ('sqlite', 'mariadb')
COORDINATION_KINDS = ('file', 'etcd')
MAX_VOLUME_SERVICES = 4
#: The cluster every volume service joins when there are several.
CLUSTER = 'box'
#: Seconds until etcd frees the lock of a volume service that died.
ETCD_LOCK_TTL = 10
SBIN = '/usr/sbin:/usr/bin:/sbin:/bin'
CLIENT_API_VERSION = '3.70'
STOP_GRACE = 20.0
EXIT_DOWN = 3
#: Passwords kept in STATE/secrets.json besides the broker's.
SECRET_PASSWORDS = ('db_password', 'glance_db_password',
                    'keystone_db_password', 'admin_password',
                    'cinder_password', 'glance_password',
                    'nova_password', 'placement_password',
                    'neutron_password') + tuple(
    name + '_db_password' for name in nova_box.NOVA_DATABASES)
REGION = boxutil.REGION


# -- processes ------------------------------------------------------------


def proc_stat(pid):
    """(state, ppid, start time, session id) of *pid* from /proc, or None."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            data = f.read()
    except (OSError, ValueError):
        return None
    fields = data[data.rfind(')') + 2:].split()
    return fields[0], int(fields[1]), int(fields[19]), int(fields[3])


def all_stats():
    stats = {}
    for entry in os.listdir('/proc'):
        if entry.isdigit():
            st = proc_stat(int(entry))
            if st:
                stats[int(entry)] = st
    return stats


def descendants(pid):
    """(pid, start time) of every live process *pid* started.

    Its descendants, and the members of the session it leads (every
    process here starts in a session of its own): a daemon that
    double-forked away from its parent, like oslo.privsep's helper, keeps
    the session.
    """
    stats = all_stats()
    kids = {}
    for child, st in stats.items():
        kids.setdefault(st[1], []).append(child)
    found, seen = [], {pid}
    todo = list(kids.get(pid, [])) + [p for p, st in stats.items()
                                      if st[3] == pid and p != pid]
    while todo:
        child = todo.pop()
        if child in seen:
            continue
        seen.add(child)
        st = stats.get(child)
        if st and st[0] != 'Z':
            found.append((child, st[2]))
        todo.extend(kids.get(child, []))
    return found


def is_alive(pid, start_time):
    st = proc_stat(pid)
    return bool(st) and st[2] == start_time and st[0] != 'Z'


class Proc(object):
    """A process this tool started, recorded in STATE/run/NAME.json."""

    def __init__(self, stack, name):
        self.stack = stack
        self.name = name
        self.path = os.path.join(stack.run_dir, name + '.json')
        self.out_path = os.path.join(stack.log_dir, name + '.out')
        self.record = None
        if os.path.exists(self.path):
            with open(self.path) as f:
                self.record = json.load(f)

    @property
    def pid(self):
        return self.record and self.record['pid']

    def alive(self):
        return bool(self.record) and is_alive(self.record['pid'],
                                              self.record['start_time'])

    def start(self, argv, env=None, cwd=None):
        with open(self.out_path, 'ab') as out:
            popen = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=out,
                stderr=subprocess.STDOUT, start_new_session=True,
                env=env, cwd=cwd or self.stack.dir, close_fds=True)
        st = proc_stat(popen.pid)
        if st is None:
            raise StackError('%s exited at once; see %s' % (self.name,
                                                            self.out_path))
        self.record = {'name': self.name, 'pid': popen.pid,
                       'start_time': st[2], 'argv0': argv[0],
                       'started': time.time()}
        with open(self.path + '.tmp', 'w') as f:
            json.dump(self.record, f)
        os.rename(self.path + '.tmp', self.path)
        self.stack.started.append(self)
        return popen

    def forget(self):
        self.record = None
        if os.path.exists(self.path):
            os.unlink(self.path)

    def stop(self, grace=STOP_GRACE):
        """SIGTERM the recorded process, SIGKILL it and its children later.

        Returns the (pid, start time) pairs that had to be killed.
        """
        if not self.alive():
            self.forget()
            return []
        pid, start = self.record['pid'], self.record['start_time']
        family = [(pid, start)] + descendants(pid)
        self._signal(pid, start, signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            if not any(is_alive(p, s) for p, s in family):
                break
            time.sleep(0.1)
        killed = [(p, s) for p, s in family if is_alive(p, s)]
        for p, s in killed:
            self._signal(p, s, signal.SIGKILL)
        for p, s in killed:
            for _ in range(50):
                if not is_alive(p, s):
                    break
                time.sleep(0.1)
        self.forget()
        return killed

    @staticmethod
    def _signal(pid, start, sig):
        if is_alive(pid, start):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass


# -- the stack ----------------------------------------------------------------


def _int_env(name, default):
    value = os.environ.get(name)
    return int(value) if value else default


class Settings(object):
    """Ports, directories and backends, from the environment and flags."""

    def __init__(self, args):
        env = os.environ.get
        self.dir = os.path.abspath(args.state_dir or env('STACK_DIR') or
                                   os.path.join(REPO_ROOT, 'state'))
        self.venv = os.path.abspath(getattr(args, 'venv', None) or
                                    env('STACK_VENV') or
                                    os.path.join(REPO_ROOT, '.venv'))
        self.host = getattr(args, 'host', None) or env('STACK_HOST',
                                                       '127.0.0.1')
        self.api_port = getattr(args, 'api_port', None) or _int_env(
            'STACK_API_PORT', 18776)
        self.rabbit_port = getattr(args, 'rabbit_port', None) or _int_env(
            'STACK_RABBIT_PORT', 35672)
        self.epmd_port = getattr(args, 'epmd_port', None) or _int_env(
            'STACK_EPMD_PORT', 34369)
        self.iscsi_port = getattr(args, 'iscsi_port', None) or _int_env(
            'STACK_ISCSI_PORT', 13260)
        self.tgt_control_port = getattr(
            args, 'tgt_control_port', None) or _int_env(
            'STACK_TGT_CONTROL_PORT', 7260)
        self.ceph_mon_port = getattr(
            args, 'ceph_mon_port', None) or _int_env(
            'STACK_CEPH_MON_PORT', 26790)
        self.backends = parse_backends(getattr(args, 'backends', None) or
                                       env('STACK_BACKENDS', 'tgt'))
        self.extra_conf = getattr(args, 'extra_conf', None) or env(
            'STACK_EXTRA_CONF')
        self.timeout = getattr(args, 'timeout', None) or _int_env(
            'STACK_TIMEOUT', 120)
        self.debug = env('STACK_DEBUG', '') in ('1', 'true', 'yes')
        self.db = getattr(args, 'db', None) or env('STACK_DB', 'mariadb')
        self.db_port = getattr(args, 'db_port', None) or _int_env(
            'STACK_DB_PORT', 33306)
        self.coordination = getattr(args, 'coordination', None) or env(
            'STACK_COORDINATION', 'file')
        self.etcd_port = getattr(args, 'etcd_port', None) or _int_env(
            'STACK_ETCD_PORT', 23790)
        self.volume_services = getattr(
            args, 'volume_services', None) or _int_env(
            'STACK_VOLUME_SERVICES', 1)
        self.keystone = bool(getattr(args, 'keystone', False) or env(
            'STACK_KEYSTONE', '') in ('1', 'true', 'yes'))
        self.keystone_port = getattr(args, 'keystone_port', None) or _int_env(
            'STACK_KEYSTONE_PORT', 15000)
        self.backup = bool(getattr(args, 'backup', False) or env(
            'STACK_BACKUP', '') in ('1', 'true', 'yes'))
        self.glance = bool(getattr(args, 'glance', False) or env(
            'STACK_GLANCE', '') in ('1', 'true', 'yes'))
        self.glance_port = getattr(args, 'glance_port', None) or _int_env(
            'STACK_GLANCE_PORT', 19292)
        self.nova = bool(getattr(args, 'nova', False) or env(
            'STACK_NOVA', '') in ('1', 'true', 'yes'))
        self.nova_port = getattr(args, 'nova_port', None) or _int_env(
            'STACK_NOVA_PORT', 18774)
        self.placement_port = getattr(
            args, 'placement_port', None) or _int_env(
            'STACK_PLACEMENT_PORT', 18778)
        self.neutron_port = getattr(args, 'neutron_port', None) or _int_env(
            'STACK_NEUTRON_PORT', 19696)
        if self.nova:
            # Nova needs Keystone (service tokens), Glance (images) and a
            # database server (SQLite broke shelve/unshelve in 2 of 3 runs).
            if (getattr(args, 'db', None) or env('STACK_DB')) == 'sqlite':
                raise StackError('--nova needs --db mariadb, not sqlite')
            self.db, self.keystone, self.glance = 'mariadb', True, True
        if self.db not in DB_KINDS:
            raise StackError('STACK_DB must be one of %s, not %r' % (
                ', '.join(DB_KINDS), self.db))
        if self.coordination not in COORDINATION_KINDS:
            raise StackError('STACK_COORDINATION must be one of %s, not %r'
                             % (', '.join(COORDINATION_KINDS),
                                self.coordination))
        if not 1 <= self.volume_services <= MAX_VOLUME_SERVICES:
            raise StackError('STACK_VOLUME_SERVICES must be 1 to %d, not %d'
                             % (MAX_VOLUME_SERVICES, self.volume_services))
        for name in ('api_port', 'rabbit_port', 'epmd_port', 'iscsi_port',
                     'ceph_mon_port', 'db_port', 'etcd_port', 'glance_port',
                     'keystone_port', 'nova_port', 'placement_port',
                     'neutron_port'):
            # rabbit and etcd use the port above theirs, Ceph the one below.
            if not 1024 < getattr(self, name) < 65535:
                raise StackError('%s must be in 1025-65534, not %d' % (
                    name, getattr(self, name)))
        if not 0 <= self.tgt_control_port <= 65535:
            raise StackError('tgt_control_port must be in 0-65535, not %d'
                             % self.tgt_control_port)
        self.project_id = env('STACK_PROJECT_ID')
        try:
            loopback = ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            loopback = False
        if not loopback:
            raise StackError('STACK_HOST must be a loopback address '
                             '(127.0.0.0/8), not %r' % self.host)
        if self.project_id and not re.match(r'^[0-9a-f-]+$',
                                            self.project_id):
            raise StackError('a noauth project id must be hex')


def parse_backends(text):
    """``a,b=rbd,c=pkg.Driver`` -> [(name, driver class)]."""
    backends = []
    for item in [i.strip() for i in text.split(',') if i.strip()]:
        name, _sep, driver = item.partition('=')
        name, driver = name.strip(), driver.strip()
        if not re.match(r'^[A-Za-z0-9_-]+$', name):
            raise StackError('bad backend name %r' % name)
        driver = driver or ('rbd' if name == 'rbd' else 'tgt')
        backends.append((name, DRIVER_ALIASES.get(driver, driver)))
    if not backends:
        raise StackError('STACK_BACKENDS names no backend')
    if len({n for n, _d in backends}) != len(backends):
        raise StackError('duplicate backend names in %r' % text)
    return backends


class Stack(nova_box.NovaParts):

    def __init__(self, settings):
        self.s = settings
        self.dir = settings.dir
        self.run_dir = os.path.join(self.dir, 'run')
        self.log_dir = os.path.join(self.dir, 'logs')
        self.rabbit_dir = os.path.join(self.dir, 'rabbitmq')
        self.cinder_dir = os.path.join(self.dir, 'cinder')
        self.backup_dir = os.path.join(self.dir, 'backups')
        self.conf_path = os.path.join(self.dir, 'cinder.conf')
        self.info_path = os.path.join(self.dir, 'stack.json')
        self.secrets_path = os.path.join(self.dir, 'secrets.json')
        self.started = []
        self.ceph_started = False
        self.ceph_dir = os.path.join(self.dir, 'ceph')
        self.info = {}
        if os.path.exists(self.info_path):
            with open(self.info_path) as f:
                self.info = json.load(f)

    def order(self, info=None):
        """Names of the stack's processes, in start order."""
        info = info or self.effective()
        names = ['epmd', 'rabbitmq']
        if info.get('db') == 'mariadb':
            names.append('mariadb')
        if info.get('coordination') == 'etcd':
            names.append('etcd')
        names.append('tgtd')
        if info.get('keystone'):
            names.append('keystone-api')
        if info.get('glance'):
            names.append('glance-api')
        if info.get('nova'):
            names += nova_box.NOVA_BEFORE_CINDER
        names += self.cinder_names(info)
        if info.get('nova'):
            names += nova_box.NOVA_SERVICES
        return names

    def procs(self, info=None):
        return {name: Proc(self, name) for name in self.order(info)}

    def recorded_procs(self):
        """Every process with a record, whatever the settings say now."""
        names = set(self.order())
        if os.path.isdir(self.run_dir):
            names.update(n[:-len('.json')] for n in os.listdir(self.run_dir)
                         if n.endswith('.json'))
        known = (['epmd', 'rabbitmq', 'mariadb', 'etcd', 'tgtd',
                  'keystone-api', 'glance-api'] +
                 list(nova_box.NOVA_BEFORE_CINDER) +
                 ['cinder-scheduler', 'cinder-volume'] +
                 volume_service_names(MAX_VOLUME_SERVICES) +
                 ['cinder-backup', 'cinder-api'] +
                 list(nova_box.NOVA_SERVICES))
        ordered = [n for n in known if n in names]
        return {name: Proc(self, name) for name in ordered}

    # -- settings of a running stack win over the environment ---------------

    def effective(self):
        """Settings of the running stack if any, else the requested ones."""
        info = dict(self.info)
        if not info:
            info = self.requested()
        return info

    def requested(self):
        s = self.s
        return {'host': s.host, 'api_port': s.api_port,
                'rabbit_port': s.rabbit_port, 'epmd_port': s.epmd_port,
                'iscsi_port': s.iscsi_port,
                'tgt_control_port': s.tgt_control_port,
                'ceph_mon_port': s.ceph_mon_port,
                'backends': s.backends, 'venv': s.venv,
                'db': s.db, 'db_port': s.db_port,
                'coordination': s.coordination, 'etcd_port': s.etcd_port,
                'volume_services': s.volume_services,
                'backup': s.backup,
                'glance': s.glance, 'glance_port': s.glance_port,
                'keystone': s.keystone, 'keystone_port': s.keystone_port,
                'nova': s.nova, 'nova_port': s.nova_port,
                'placement_port': s.placement_port,
                'neutron_port': s.neutron_port,
                'project_id': (s.project_id or self.info.get('project_id') or
                               uuid.uuid4().hex)}

    # -- up ---------------------------------------------------------------

    def up(self):
        os.umask(0o077)
        for d in (self.dir, self.run_dir, self.log_dir, self.rabbit_dir,
                  self.cinder_dir):
            os.makedirs(d, exist_ok=True)
        procs = self.procs()
        running = [n for n, p in procs.items() if p.alive()]
        if running and self.info:
            info = self.info
            log('already running: %s; keeping its settings (down, then up '
                'to apply new settings)' % ', '.join(running))
        else:
            info = self.requested()
        self.info = info
        with open(self.info_path, 'w') as f:
            json.dump(info, f, indent=1)
        procs = self.procs(info)
        self._check_ports(procs)
        try:
            self._start_epmd(procs['epmd'])
            self._start_rabbitmq(procs['rabbitmq'])
            if 'mariadb' in procs:
                self._start_mariadb(procs['mariadb'])
            if 'etcd' in procs:
                self._start_etcd(procs['etcd'])
            self._start_tgtd(procs['tgtd'])
            if self.uses_ceph():
                # Before Glance, whose RBD store is on it.
                self._start_ceph()
            if 'keystone-api' in procs:
                self._start_keystone(procs['keystone-api'])
            if 'glance-api' in procs:
                self._start_glance(procs['glance-api'])
            if 'placement-api' in procs:
                self._start_placement(procs['placement-api'])
                self._start_neutron(procs['neutron-api'])
            self._write_cinder_conf()
            self._db_sync()
            for name in self.cinder_names():
                self._start_cinder(procs[name], name)
            self._wait_cinder(procs)
            self._ensure_types()
            if 'nova-api' in procs:
                self._start_nova(procs)
        except (StackError, OSError, subprocess.SubprocessError) as err:
            log('ERROR: %s' % err)
            if self.started:
                log('stopping what this run started: %s' % ', '.join(
                    p.name for p in self.started))
                for proc in reversed(self.started):
                    self._stop_one(proc)
            if self.ceph_started:
                self._stop_ceph()
            return 1
        self.print_ready()
        return 0

    def _check_ports(self, procs):
        info = self.info
        owners = {
            'epmd': [info['epmd_port']],
            'rabbitmq': [info['rabbit_port'], info['rabbit_port'] + 1],
            'tgtd': [info['iscsi_port']],
            'cinder-api': [info['api_port']],
            'mariadb': [info.get('db_port')],
            'etcd': [info.get('etcd_port'), (info.get('etcd_port') or 0) + 1],
            'glance-api': [info.get('glance_port')],
            'keystone-api': [info.get('keystone_port')],
            'placement-api': [info.get('placement_port')],
            'neutron-api': [info.get('neutron_port')],
            'nova-api': [info.get('nova_port')],
        }
        for name, ports in owners.items():
            if name not in procs or procs[name].alive():
                continue
            for port in ports:
                if port_open(info['host'], port):
                    raise StackError(
                        'port %d (for %s) is already in use by another '
                        'process; choose another with the STACK_*_PORT '
                        'settings' % (port, name))

    def _rabbit_env(self):
        info, r = self.info, self.rabbit_dir
        env = dict(os.environ)
        env.update({
            'HOME': r,
            'RABBITMQ_CONF_ENV_FILE': os.path.join(r, 'rabbitmq-env.conf'),
            'RABBITMQ_CONFIG_FILE': os.path.join(r, 'rabbitmq.conf'),
            'RABBITMQ_ENABLED_PLUGINS_FILE': os.path.join(r,
                                                          'enabled_plugins'),
            'RABBITMQ_NODENAME': 'cinder-forcedetach-%d@localhost' %
                                 info['rabbit_port'],
            'RABBITMQ_USE_LONGNAME': 'false',
            'RABBITMQ_NODE_IP_ADDRESS': info['host'],
            'RABBITMQ_NODE_PORT': str(info['rabbit_port']),
            'RABBITMQ_DIST_PORT': str(info['rabbit_port'] + 1),
            'RABBITMQ_MNESIA_BASE': os.path.join(r, 'mnesia'),
            'RABBITMQ_LOG_BASE': os.path.join(r, 'log'),
            'RABBITMQ_PID_FILE': os.path.join(r, 'rabbitmq.pid'),
            'ERL_EPMD_ADDRESS': info['host'],
            'ERL_EPMD_PORT': str(info['epmd_port']),
            'RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS':
                '-kernel inet_dist_use_interface {%s}' %
                info['host'].replace('.', ','),
        })
        return env

    def _start_epmd(self, proc):
        if proc.alive():
            return
        proc.start(['epmd', '-address', self.info['host'], '-port',
                    str(self.info['epmd_port'])])
        wait_for(lambda: port_open(self.info['host'], self.info['epmd_port']),
                 15, 'epmd', proc)

    def _secrets(self):
        if os.path.exists(self.secrets_path):
            with open(self.secrets_path) as f:
                data = json.load(f)
            missing = [k for k in SECRET_PASSWORDS
                       if k not in data]        # from an older stack
            for key in missing:
                data[key] = secrets.token_hex(16)
            if missing:
                _write(self.secrets_path, json.dumps(data))
            return data
        data = {'rabbit_user': 'cinder',
                'rabbit_password': secrets.token_hex(16)}
        data.update((k, secrets.token_hex(16)) for k in SECRET_PASSWORDS)
        # A broker database made with another password is of no use.
        if not Proc(self, 'rabbitmq').alive():
            shutil.rmtree(os.path.join(self.rabbit_dir, 'mnesia'),
                          ignore_errors=True)
        fd = os.open(self.secrets_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                     0o600)
        with os.fdopen(fd, 'w') as f:
            json.dump(data, f)
        return data

    def transport_url(self):
        sec = self._secrets()
        return 'rabbit://%s:%s@%s:%d/' % (sec['rabbit_user'],
                                          sec['rabbit_password'],
                                          self.info['host'],
                                          self.info['rabbit_port'])

    def _start_rabbitmq(self, proc):
        if proc.alive():
            return
        if not os.path.exists(RABBITMQ_SERVER):
            raise StackError('%s not found: install rabbitmq-server '
                             '(tools/stack.sh up does)' % RABBITMQ_SERVER)
        sec = self._secrets()
        r = self.rabbit_dir
        for d in ('mnesia', 'log'):
            os.makedirs(os.path.join(r, d), exist_ok=True)
        _write(os.path.join(r, 'rabbitmq-env.conf'), '')
        _write(os.path.join(r, 'enabled_plugins'), '[].\n')
        _write(os.path.join(r, 'rabbitmq.conf'), '\n'.join([
            'listeners.tcp.1 = %s:%d' % (self.info['host'],
                                         self.info['rabbit_port']),
            'default_user = %s' % sec['rabbit_user'],
            'default_pass = %s' % sec['rabbit_password'],
            'default_vhost = /',
            'loopback_users.guest = true',
            'log.console = false',
            'log.file.level = info',
            '']))
        proc.start([RABBITMQ_SERVER], env=self._rabbit_env(), cwd=r)
        wait_for(lambda: amqp_ready(self.info['host'],
                                    self.info['rabbit_port']),
                 self.s.timeout, 'rabbitmq', proc)
        self._check_amqp_login()

    def _check_amqp_login(self):
        """Log in as the cinder user with kombu (the URL is not on argv)."""
        python = os.path.join(self.info['venv'], 'bin', 'python')
        env = dict(os.environ, STACK_TRANSPORT_URL=self.transport_url())
        code = ('import os, kombu\n'
                'c = kombu.Connection(os.environ["STACK_TRANSPORT_URL"]'
                '.replace("rabbit://", "amqp://"), connect_timeout=5)\n'
                'c.connect(); c.release()\n')
        res = subprocess.run([python, '-c', code], env=env,
                             capture_output=True, text=True, timeout=60)
        if res.returncode:
            last = (res.stderr.strip().splitlines() or ['?'])[-1]
            raise StackError('cannot log in to rabbitmq as the cinder user: '
                             '%s' % last)

    # -- MariaDB and etcd (--db mariadb, --coordination etcd) ----------------

    def _mariadb_paths(self):
        d = os.path.join(self.dir, 'mariadb')
        return d, os.path.join(d, 'data'), os.path.join(d, 'mysqld.sock')

    def _start_mariadb(self, proc):
        d, data, sock = self._mariadb_paths()
        info = self.info
        if not proc.alive():
            server = _which('mariadbd')
            install_db = _which('mariadb-install-db')
            if not server or not install_db:
                raise StackError('mariadbd not found: install mariadb-server '
                                 '(tools/install-deps.sh does)')
            if not os.path.isdir(os.path.join(data, 'mysql')):
                shutil.rmtree(data, ignore_errors=True)
                os.makedirs(data)
                out = os.path.join(self.log_dir, 'mariadb-install-db.out')
                with open(out, 'ab') as f:
                    res = subprocess.run(
                        [install_db, '--no-defaults', '--datadir=' + data,
                         '--user=root', '--skip-test-db',
                         '--auth-root-authentication-method=socket'],
                        stdin=subprocess.DEVNULL, stdout=f,
                        stderr=subprocess.STDOUT, cwd=d, timeout=300)
                if res.returncode:
                    raise StackError('mariadb-install-db failed; see %s%s' % (
                        out, _tail(out)))
            proc.start([server, '--no-defaults', '--datadir=' + data,
                        '--socket=' + sock,
                        '--pid-file=' + os.path.join(d, 'mariadbd.pid'),
                        '--bind-address=' + info['host'],
                        '--port=%d' % info['db_port'], '--user=root',
                        '--skip-name-resolve', '--skip-log-bin',
                        '--log-error=' + os.path.join(self.log_dir,
                                                      'mariadb.log'),
                        '--innodb-buffer-pool-size=128M',
                        # A test box: speed over durability of the last
                        # second of commits when the machine itself dies.
                        '--innodb-flush-log-at-trx-commit=2',
                        '--max-connections=500',
                        '--character-set-server=utf8mb4'])
            wait_for(lambda: os.path.exists(sock) and
                     port_open(info['host'], info['db_port']),
                     self.s.timeout, 'mariadb', proc)
        self._create_database('cinder', self._secrets()['db_password'])
        if info.get('glance'):
            self._create_database('glance',
                                  self._secrets()['glance_db_password'])
        if info.get('keystone'):
            self._create_database('keystone',
                                  self._secrets()['keystone_db_password'])
        for name in nova_box.NOVA_DATABASES if info.get('nova') else ():
            self._create_database(name, self._secrets()[name + '_db_password'])

    def _create_database(self, name, password):
        """Database *name* and its user *name* (password on stdin)."""
        _d, _data, sock = self._mariadb_paths()
        sql = ("CREATE DATABASE IF NOT EXISTS %(db)s CHARACTER SET utf8mb4;\n"
               "CREATE USER IF NOT EXISTS '%(db)s'@'127.%%' IDENTIFIED BY "
               "'%(pw)s';\n"
               "ALTER USER '%(db)s'@'127.%%' IDENTIFIED BY '%(pw)s';\n"
               "GRANT ALL PRIVILEGES ON %(db)s.* TO '%(db)s'@'127.%%';\n"
               % {'db': name, 'pw': password})
        client = _which('mariadb')
        res = subprocess.run([client, '--no-defaults', '--socket=' + sock,
                              '--user=root'], input=sql, text=True,
                             capture_output=True, timeout=60)
        if res.returncode:
            raise StackError('cannot create the %s database and user: %s'
                             % (name, res.stderr.strip().replace(password,
                                                                 '***')))

    def database_url(self):
        if self.info.get('db') != 'mariadb':
            return 'sqlite:///%s' % os.path.join(self.cinder_dir,
                                                 'cinder.sqlite')
        return 'mysql+pymysql://cinder:%s@%s:%d/cinder?charset=utf8mb4' % (
            self._secrets()['db_password'], self.info['host'],
            self.info['db_port'])

    def service_database_url(self, name, directory):
        """Service *name*'s database: MariaDB's, or SQLite in *directory*."""
        info = self.info
        if info.get('db') != 'mariadb':
            return 'sqlite:///%s' % os.path.join(directory, name + '.sqlite')
        return 'mysql+pymysql://%s:%s@%s:%d/%s?charset=utf8mb4' % (
            name, self._secrets()[name + '_db_password'], info['host'],
            info['db_port'], name)

    def _gunicorn(self, proc, app, port, env, cwd):
        """Start a WSGI *app* under gunicorn, as a process of the stack.

        One worker; threads only with MariaDB (SQLite locks under them).
        ``--no-control-socket``: gunicorn's default control socket is
        shared by every gunicorn of the user.
        """
        info = self.info
        proc.start([self._venv_bin('gunicorn'), '--workers', '1',
                    '--threads', '4' if info.get('db') == 'mariadb' else '1',
                    '--timeout', '180', '--no-control-socket',
                    '--bind', '%s:%d' % (info['host'], port), app],
                   env=dict(os.environ, **env), cwd=cwd)

    def _sync_then_serve(self, proc, manage, step, conf_path, app, port,
                         env, ready):
        """A WSGI service of the box: its database *step*, then its *app*.

        ``MANAGE --config-file CONF_PATH STEP...``, then *app* under
        gunicorn on *port* (configuration directory through *env*), until
        *ready* answers.
        """
        conf_dir = os.path.dirname(conf_path)
        self._manage(manage, ['--config-file', conf_path] + step,
                     cwd=conf_dir)
        self._gunicorn(proc, app, port, env, conf_dir)
        wait_for(ready, self.s.timeout, proc.name, proc)

    def _manage(self, name, args, env=None, cwd=None, ok=(0,)):
        """Run ``NAME --config-file ... ARGS`` (a ``*-manage`` step).

        *args*: the config file options, then the step; *ok*: its exit
        codes that mean success.  Its output goes to LOG/NAME.out.
        """
        out = os.path.join(self.log_dir, name + '.out')
        with open(out, 'ab') as f:
            res = subprocess.run(
                [self._venv_bin(name)] + args, stdin=subprocess.DEVNULL,
                stdout=f, stderr=subprocess.STDOUT, cwd=cwd or self.dir,
                timeout=300, env=dict(os.environ, **(env or {})))
        if res.returncode not in ok:
            raise StackError('%s %s failed; see %s%s' % (
                name, ' '.join(args[2:]), out, _tail(out)))

    # -- keystone -------------------------------------------------------------

    def keystone_url(self, info=None):
        info = info or self.info
        return 'http://%s:%d' % (info['host'], info['keystone_port'])

    def keystone_answers(self):
        return http_ok(self.keystone_url() + '/v3')

    def _write_keystone_conf(self):
        d = os.path.join(self.dir, 'keystone')
        for sub in ('fernet-keys', 'credential-keys'):
            os.makedirs(os.path.join(d, sub), mode=0o700, exist_ok=True)
        conf = configparser.RawConfigParser()
        conf.optionxform = str
        conf['DEFAULT'] = {
            'debug': str(self.s.debug),
            'log_file': os.path.join(self.log_dir, 'keystone-api.log')}
        conf['database'] = {
            'connection': self.service_database_url('keystone', d)}
        conf['token'] = {'provider': 'fernet'}
        for section in ('fernet_tokens', 'fernet_receipts'):
            conf[section] = {
                'key_repository': os.path.join(d, 'fernet-keys')}
        conf['credential'] = {
            'key_repository': os.path.join(d, 'credential-keys')}
        # A test box: a token check in ~20 ms instead of ~1 s.
        conf['cache'] = {'enabled': 'True', 'backend': 'oslo_cache.dict'}
        conf['identity'] = {'password_hash_rounds': '4'}
        path = os.path.join(d, 'keystone.conf')
        boxutil.write_conf(path, conf)
        return d, path

    def _start_keystone(self, proc):
        if not proc.alive():
            conf_dir, conf = self._write_keystone_conf()
            manage = ['--config-file', conf]
            for step in (['db_sync'],
                         ['fernet_setup', '--keystone-user', 'root',
                          '--keystone-group', 'root'],
                         ['credential_setup', '--keystone-user', 'root',
                          '--keystone-group', 'root']):
                self._manage('keystone-manage', manage + step, cwd=conf_dir)
            url = self.keystone_url() + '/v3'
            # The password through the environment, never on a command line.
            self._manage('keystone-manage', manage + [
                'bootstrap', '--bootstrap-admin-url', url,
                '--bootstrap-public-url', url,
                '--bootstrap-internal-url', url,
                '--bootstrap-region-id', REGION],
                env={'OS_BOOTSTRAP_PASSWORD':
                     self._secrets()['admin_password']}, cwd=conf_dir)
            self._gunicorn(proc, 'devbox.keystone_wsgi:'
                           'application', self.info['keystone_port'],
                           {'OS_KEYSTONE_CONFIG_DIR': conf_dir}, conf_dir)
            wait_for(self.keystone_answers, self.s.timeout, 'keystone-api',
                     proc)
        self._keystone_accounts()

    def keystone(self, method, path, body=None, token=None):
        """A call to Keystone's v3 API; (status, headers, decoded body)."""
        req = urllib.request.Request(
            self.keystone_url() + '/v3' + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers=dict({'Content-Type': 'application/json'},
                         **({'X-Auth-Token': token} if token else {})))
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = resp.read()
            return (resp.status, resp.headers,
                    json.loads(data) if data else {})

    def keystone_token(self, user='admin', project='admin'):
        """A project-scoped token of *user* (its password in secrets)."""
        password = self._secrets()['%s_password' % user]
        identity = {'methods': ['password'], 'password': {'user': {
            'name': user, 'domain': {'id': 'default'},
            'password': password}}}
        scope = {'project': {'name': project, 'domain': {'id': 'default'}}}
        _status, headers, _body = self.keystone('POST', '/auth/tokens', {
            'auth': {'identity': identity, 'scope': scope}})
        return headers['X-Subject-Token']

    def _keystone_find(self, token, kind, name, create):
        """Id of the *kind* (``projects``...) *name*; made from *create*."""
        _s, _h, body = self.keystone('GET', '/%s?name=%s' % (kind, name),
                                     token=token)
        found = body[kind]
        if found:
            return found[0]['id']
        _s, _h, body = self.keystone('POST', '/' + kind,
                                     {kind[:-1]: create}, token=token)
        return body[kind[:-1]]['id']

    def _keystone_accounts(self):
        """Service project, cinder user and roles, catalog; idempotent."""
        token = self.keystone_token()
        find = functools.partial(self._keystone_find, token)
        default = {'domain_id': 'default'}
        service = find('projects', 'service', dict(default, name='service'))
        admin_project = find('projects', 'admin', None)
        roles = [find('roles', role, {'name': role})
                 for role in ('admin', 'service')]
        users = ('cinder', 'glance')
        if self.info.get('nova'):
            users += nova_box.NOVA_USERS
        for user in users:
            user_id = find('users', user, dict(
                default, name=user, default_project_id=service,
                password=self._secrets()[user + '_password']))
            for role_id in roles:
                self.keystone('PUT', '/projects/%s/users/%s/roles/%s' % (
                    service, user_id, role_id), token=token)
        url = 'http://%s:%d/v3/%%(project_id)s' % (
            self.info['host'], self.info['api_port'])
        # tempest asks for block-storage, python-cinderclient for volumev3.
        catalog = [('cinder', 'block-storage', url),
                   ('cinderv3', 'volumev3', url)]
        if self.info.get('glance'):
            catalog.append(('glance', 'image', self.glance_url()))
        if self.info.get('nova'):
            catalog += self.nova_catalog()
        for name, kind, url in catalog:
            svc = find('services', name, {'name': name, 'type': kind})
            _s, _h, body = self.keystone(
                'GET', '/endpoints?service_id=%s&interface=public' % svc,
                token=token)
            if not body['endpoints']:
                self.keystone('POST', '/endpoints', {'endpoint': {
                    'service_id': svc, 'interface': 'public', 'url': url,
                    'region_id': REGION}}, token=token)
        if self.info.get('project_id') != admin_project:
            self.info['project_id'] = admin_project
            with open(self.info_path, 'w') as f:
                json.dump(self.info, f, indent=1)
        self._write_openrc()

    def openrc_path(self, user='admin'):
        """The client credentials of *user* (admin, or the service user)."""
        return os.path.join(self.dir, 'openrc' if user == 'admin' else
                            'openrc-' + user)

    def authtoken_section(self, user):
        """``[keystone_authtoken]`` of a service whose user is *user*."""
        return {'www_authenticate_uri': self.keystone_url() + '/v3',
                'auth_url': self.keystone_url() + '/v3',
                'auth_type': 'password', 'username': user,
                'password': self._secrets()[user + '_password'],
                'project_name': 'service', 'user_domain_name': 'Default',
                'project_domain_name': 'Default', 'region_name': REGION}

    def _write_openrc(self):
        """The admin's credentials for clients, mode 0600; never printed."""
        values = [('OS_AUTH_TYPE', 'password'),
                  ('OS_AUTH_URL', self.keystone_url() + '/v3'),
                  ('OS_USERNAME', 'admin'),
                  ('OS_PASSWORD', self._secrets()['admin_password']),
                  ('OS_PROJECT_NAME', 'admin'),
                  ('OS_USER_DOMAIN_NAME', 'Default'),
                  ('OS_PROJECT_DOMAIN_NAME', 'Default'),
                  ('OS_REGION_NAME', REGION),
                  ('OS_IDENTITY_API_VERSION', '3'),
                  ('OS_VOLUME_API_VERSION', CLIENT_API_VERSION)]
        _write(self.openrc_path(), ''.join(
            'export %s=%s\n' % kv for kv in values))
        # The cinder service user, whose token is a service token (role
        # service): what Nova sends, and what --service-token needs.
        service = dict(values, OS_USERNAME='cinder',
                       OS_PASSWORD=self._secrets()['cinder_password'],
                       OS_PROJECT_NAME='service')
        _write(self.openrc_path('service'), ''.join(
            'export %s=%s\n' % (k, service[k]) for k, _v in values))

    # -- glance ---------------------------------------------------------------

    def glance_url(self, info=None):
        info = info or self.info
        return 'http://%s:%d' % (info['host'], info['glance_port'])

    def glance_answers(self):
        return http_ok(self.glance_url() + '/healthcheck')

    def _write_glance_conf(self):
        info, d = self.info, os.path.join(self.dir, 'glance')
        paste = os.path.join(info['venv'], 'etc', 'glance',
                             'glance-api-paste.ini')
        if not os.path.exists(paste):
            raise StackError('%s not found: is glance installed in %s? '
                             '(tools/install-deps.sh installs it)' % (
                                 paste, info['venv']))
        for sub in ('images', 'staging', 'tasks', 'locks'):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        shutil.copy(paste, os.path.join(d, 'glance-api-paste.ini'))
        database = self.service_database_url('glance', d)
        conf = configparser.RawConfigParser()
        conf.optionxform = str
        conf['DEFAULT'] = {
            'debug': str(self.s.debug),
            'log_file': os.path.join(self.log_dir, 'glance-api.log'),
            'worker_self_reference_url': self.glance_url(),
            'enabled_backends': 'box:file',
            'node_staging_uri': 'file://' + os.path.join(d, 'staging'),
        }
        conf['database'] = {'connection': database}
        conf['glance_store'] = {'default_backend': 'box'}
        conf['box'] = {'filesystem_store_datadir': os.path.join(d, 'images')}
        if self.uses_ceph():
            # Images in the box's Ceph, where Cinder's RBD driver clones
            # them (copy-on-write) instead of copying their bytes; the
            # image's rbd:// location is shown to Cinder for that.
            conf['DEFAULT'].update(enabled_backends='box:file,ceph:rbd',
                                   show_image_direct_url='True')
            conf['glance_store']['default_backend'] = 'ceph'
            conf['ceph'] = self._glance_rbd_store(d)
        for store in ('staging', 'tasks'):
            conf['os_glance_%s_store' % store] = {
                'filesystem_store_datadir': os.path.join(d, store)}
        conf['oslo_concurrency'] = {'lock_path': os.path.join(d, 'locks')}
        if info.get('keystone'):
            conf['paste_deploy'] = {'flavor': 'keystone'}
            conf['keystone_authtoken'] = self.authtoken_section('glance')
        else:
            # No keystone: Glance's unauthenticated-context pipeline, and
            # its legacy policies (the new ones want a project in a token).
            conf['paste_deploy'] = {'flavor': ''}
            conf['oslo_policy'] = {'enforce_new_defaults': 'False',
                                   'enforce_scope': 'False'}
        path = os.path.join(d, 'glance-api.conf')
        boxutil.write_conf(path, conf)
        return d, path

    def glance_upload(self, name, data, disk_format='raw',
                      visibility='shared'):
        """An active image of *data* in the box's Glance; its id."""
        images = self.glance_url() + '/v2/images'
        auth = ({'X-Auth-Token': self.auth_token()}
                if self.info.get('keystone') else {})
        req = urllib.request.Request(images, method='POST', data=json.dumps({
            'name': name, 'disk_format': disk_format,
            'container_format': 'bare', 'visibility': visibility}).encode(),
            headers=dict(auth, **{'Content-Type': 'application/json'}))
        with urllib.request.urlopen(req, timeout=30) as resp:
            image_id = json.loads(resp.read())['id']
        req = urllib.request.Request(
            '%s/%s/file' % (images, image_id), method='PUT', data=data,
            headers=dict(auth, **{'Content-Type': 'application/octet-stream'}))
        urllib.request.urlopen(req, timeout=120).close()
        return image_id

    def _glance_rbd_store(self, directory):
        """Glance's RBD store options: the images pool, as client.cinder.

        Its own ceph.conf names the keyring (glance_store has no option
        for it).
        """
        ceph = self.ceph_settings()
        conf_path = os.path.join(directory, 'ceph.conf')
        with open(ceph['CEPH_CONF']) as f:
            text = f.read()
        _write(conf_path, text + '\n[client.%s]\nkeyring = %s\n' % (
            ceph['CEPH_USER'], ceph['CEPH_KEYRING']))
        return {'rbd_store_pool': ceph['CEPH_IMAGES_POOL'],
                'rbd_store_user': ceph['CEPH_USER'],
                'rbd_store_ceph_conf': conf_path}

    def _start_glance(self, proc):
        if proc.alive():
            return
        conf_dir, conf_path = self._write_glance_conf()
        self._sync_then_serve(proc, 'glance-manage', ['db', 'sync'],
                              conf_path, 'glance.wsgi.api:application',
                              self.info['glance_port'],
                              {'OS_GLANCE_CONFIG_DIR': conf_dir},
                              self.glance_answers)

    def etcd_url(self, info=None):
        info = info or self.info
        return 'http://%s:%d' % (info['host'], info['etcd_port'])

    def etcd_healthy(self):
        try:
            with urllib.request.urlopen(self.etcd_url() + '/health',
                                        timeout=2) as resp:
                return json.loads(resp.read()).get('health') == 'true'
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _start_etcd(self, proc):
        if proc.alive():
            return
        etcd = _which('etcd')
        if not etcd:
            raise StackError('etcd not found: install etcd-server '
                             '(tools/install-deps.sh does)')
        info = self.info
        peer = 'http://%s:%d' % (info['host'], info['etcd_port'] + 1)
        proc.start([etcd, '--name', 'box',
                    '--data-dir', os.path.join(self.dir, 'etcd'),
                    '--listen-client-urls', self.etcd_url(),
                    '--advertise-client-urls', self.etcd_url(),
                    '--listen-peer-urls', peer,
                    '--initial-advertise-peer-urls', peer,
                    '--initial-cluster', 'box=' + peer,
                    '--initial-cluster-state', 'new'])
        wait_for(self.etcd_healthy, self.s.timeout, 'etcd', proc)

    def coordination_url(self):
        if self.info.get('coordination') != 'etcd':
            return 'file://%s' % os.path.join(self.dir, 'locks')
        # A lock whose holder died (kill -9) expires after ETCD_LOCK_TTL s.
        return 'etcd3+%s?timeout=%d' % (self.etcd_url(), ETCD_LOCK_TTL)

    def _start_tgtd(self, proc):
        info = self.info
        if proc.alive():
            return
        control = info['tgt_control_port']
        if os.path.exists(os.path.join(TGTD_SOCKET_DIR,
                                       'socket.%d' % control)) and \
                tgtadm(control, '--op', 'show', '--mode', 'target',
                       check=False).returncode == 0:
            raise StackError('a tgtd this tool did not start already uses '
                             'control port %d; set STACK_TGT_CONTROL_PORT' %
                             control)
        if not shutil.which('tgtd'):
            raise StackError('tgtd not found: install tgt')
        proc.start(['tgtd', '-f', '-C', str(control), '--iscsi',
                    'portal=%s:%d' % (info['host'], info['iscsi_port'])])
        wait_for(lambda: port_open(info['host'], info['iscsi_port']) and
                 tgtadm(control, '--op', 'show', '--mode', 'target',
                        check=False).returncode == 0,
                 30, 'tgtd', proc)

    # -- Ceph (RBD backends) -------------------------------------------------

    def uses_ceph(self, info=None):
        return any(d == RBD_DRIVER
                   for _n, d in (info or self.info)['backends'])

    def ceph_dev(self):
        """The stack's cluster (:class:`.ceph_dev.CephDev`)."""
        info = self.info
        host = info.get('host', self.s.host)
        port = info.get('ceph_mon_port', self.s.ceph_mon_port)
        return ceph_dev.CephDev(
            self.ceph_dir, mon_addr=host, daemon_addr=host, mon_port=port,
            mon_port_v2=port - 1, cinder_mon_caps=CEPH_CINDER_MON_CAPS)

    def ceph(self, *args, check=True, timeout=300):
        """Run tools/ceph-dev.sh on the stack's cluster."""
        try:
            return self.ceph_dev().run(*args, check=check, timeout=timeout)
        except ceph_dev.CephDevError as err:
            raise StackError(str(err))

    def _start_ceph(self):
        if os.environ.get('STACK_SKIP_INSTALL', '') != '1':
            res = subprocess.run([INSTALL_CEPH, self.info['venv']],
                                 capture_output=True, text=True)
            if res.returncode:
                raise StackError('tools/install-ceph.sh failed (%d): %s' % (
                    res.returncode, res.stderr.strip()[-2000:]))
        was_ready = self.ceph('status', check=False).returncode == 0
        self.ceph('up')
        self.ceph_started = not was_ready
        log('ceph up (cluster %s)' % self.ceph_dir)

    def ceph_settings(self):
        """CEPH_* paths of the cluster (``ceph-dev.sh env``; no keys)."""
        return ceph_dev.parse_env(self.ceph('env').stdout)

    def _stop_ceph(self):
        if os.path.exists(self.ceph_dir):
            self.ceph('down', check=False)
            log('stopped ceph (cluster %s)' % self.ceph_dir)

    def _write_cinder_conf(self):
        info, c = self.info, self.cinder_dir
        venv = info['venv']
        paste = os.path.join(venv, 'etc', 'cinder', 'api-paste.ini')
        if not os.path.exists(paste):
            raise StackError('%s not found: is Cinder installed in %s?' % (
                paste, venv))
        conf = configparser.RawConfigParser()
        conf.optionxform = str
        conf['DEFAULT'] = {
            'debug': str(self.s.debug),
            'state_path': c,
            'log_dir': self.log_dir,
            'my_ip': info['host'],
            'auth_strategy': 'noauth',
            'transport_url': self.transport_url(),
            'osapi_volume_listen': info['host'],
            'osapi_volume_listen_port': str(info['api_port']),
            'osapi_volume_workers': '1',
            # down: a worker waiting on idle keep-alive connections exits
            # after this many seconds instead of oslo.service's 60.
            'graceful_shutdown_timeout': '5',
            'api_paste_config': paste,
            # Without it Cinder reads /etc/cinder/resource_filters.json and,
            # that absent, ignores the API's ?name= and other filters.
            'resource_query_filters_file': os.path.join(
                venv, 'etc', 'cinder', 'resource_filters.json'),
            'enabled_backends': ','.join(n for n, _d in info['backends']),
            'rootwrap_config': os.path.join(venv, 'etc', 'cinder',
                                            'rootwrap.conf'),
        }
        if info.get('volume_services', 1) > 1:
            conf['DEFAULT']['cluster'] = CLUSTER
        if info.get('glance'):
            conf['DEFAULT']['glance_api_servers'] = self.glance_url()
        if info.get('backup'):
            conf['DEFAULT'].update({
                'backup_driver':
                    'cinder.backup.drivers.posix.PosixBackupDriver',
                'backup_posix_path': self.backup_dir})
            os.makedirs(self.backup_dir, exist_ok=True)
        conf['database'] = {'connection': self.database_url()}
        conf['oslo_concurrency'] = {'lock_path': os.path.join(c, 'locks')}
        conf['coordination'] = {'backend_url': self.coordination_url()}
        conf['keystone_authtoken'] = {'service_token_roles': 'service'}
        if info.get('keystone'):
            conf['DEFAULT']['auth_strategy'] = 'keystone'
            conf['keystone_authtoken'].update(
                self.authtoken_section('cinder'),
                service_token_roles_required='True')
        if info.get('nova'):
            # Cinder's calls to Nova (volume events, the server lookup of
            # its attachment-delete guard) as a cloud makes them.
            auth = self._service_auth('cinder')
            conf['nova'] = dict(auth, interface='public',
                                token_auth_url=auth['auth_url'])
            conf['service_user'] = dict(auth, send_service_user_token='True')
        # Privileged calls (tgtadm, os-brick) go through oslo.privsep; this
        # runs as root, so the helper needs no sudo/rootwrap in front.
        helper = '%s --config-file %s' % (
            os.path.join(venv, 'bin', 'privsep-helper'), self.conf_path)
        for section in ('cinder_sys_admin', 'privsep_osbrick'):
            conf[section] = {'helper_command': helper}
        for name, driver in info['backends']:
            section = {'volume_driver': driver,
                       'volume_backend_name': name}
            if driver == TGT_DRIVER or 'iscsi' in driver.lower():
                section.update({
                    'forcedetach_tgt_control_port':
                        str(info['tgt_control_port']),
                    'forcedetach_volumes_dir': os.path.join(
                        self.dir, 'volumes', name),
                    'target_ip_address': info['host'],
                    'target_port': str(info['iscsi_port']),
                    'target_protocol': 'iscsi',
                })
            elif driver == RBD_DRIVER:
                ceph = self.ceph_settings()
                section.update({
                    'rbd_ceph_conf': ceph['CEPH_CONF'],
                    'rbd_user': ceph['CEPH_USER'],
                    'rbd_pool': ceph['CEPH_POOL'],
                    'forcedetach_rbd_keyring': ceph['CEPH_KEYRING'],
                })
            conf[name] = section
        for d in ('locks',):
            os.makedirs(os.path.join(c, d), exist_ok=True)
        os.makedirs(os.path.join(self.dir, 'locks'), exist_ok=True)
        fd = os.open(self.conf_path + '.tmp',
                     os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, 'w') as f:
            f.write('# Generated by tools/stack.sh; changes are '
                    'overwritten by the next up.\n')
            conf.write(f)
            if self.s.extra_conf:
                with open(self.s.extra_conf) as extra:
                    f.write('\n# From %s\n' % self.s.extra_conf)
                    f.write(extra.read())
        os.rename(self.conf_path + '.tmp', self.conf_path)

    def _venv_bin(self, name):
        path = os.path.join(self.info['venv'], 'bin', name)
        if not os.path.exists(path):
            raise StackError('%s not found: run tools/stack.sh up to '
                             'install the venv' % path)
        return path

    def _db_sync(self):
        self._manage('cinder-manage', ['--config-file', self.conf_path, 'db',
                                       'sync'])

    def cinder_names(self, info=None):
        """Cinder's processes of the stack (*info*: its settings)."""
        info = info or self.info
        return ['cinder-scheduler'] + volume_service_names(
            info.get('volume_services', 1)) + (
            ['cinder-backup'] if info.get('backup') else []) + [
            'cinder-api']

    def volume_hosts(self):
        """{process name: its ``host``} of the volume services.

        One service keeps Cinder's default host (the machine's name);
        several each get their own host name in the cluster ``box``.
        """
        names = volume_service_names(self.info.get('volume_services', 1))
        if len(names) == 1:
            return {names[0]: None}
        return {name: name for name in names}

    def _start_cinder(self, proc, name):
        if proc.alive():
            return
        binary = 'cinder-volume' if name.startswith('cinder-volume') else name
        argv = [self._venv_bin(binary), '--config-file', self.conf_path]
        if name == 'cinder-backup' and self.uses_ceph():
            argv = self._backup_host_argv(argv)
        host = self.volume_hosts().get(name)
        if host:
            own = os.path.join(self.dir, name + '.conf')
            _write(own, '[DEFAULT]\nhost = %s\n' % host)
            argv += ['--config-file', own, '--log-file', name + '.log']
        proc.start(argv)

    def _backup_host_argv(self, argv):
        """*argv* in a mount namespace whose ``/etc/ceph`` is the box's.

        A backup attaches an RBD volume through os-brick, which reads the
        client's keyring from ``/etc/ceph/<cluster>.client.<user>.keyring``
        on the backup host, as Nova's compute does (Cinder no longer sends
        keyrings in connection info: OSSN-0085). The box writes nothing
        under the machine's ``/etc``: cinder-backup gets its own mount
        namespace where ``/etc/ceph`` is ``STATE/backup-etc-ceph``, which
        holds only the cinder user's keyring.
        """
        if not os.path.isdir(ETC_CEPH):
            raise StackError('%s is missing: install Ceph\'s client '
                             '(tools/install-ceph.sh)' % ETC_CEPH)
        ceph = self.ceph_settings()
        etc = os.path.join(self.dir, 'backup-etc-ceph')
        os.makedirs(etc, mode=0o700, exist_ok=True)
        with open(ceph['CEPH_KEYRING']) as f:
            _write(os.path.join(etc, 'ceph.client.%s.keyring' %
                                ceph['CEPH_USER']), f.read())
        return ['unshare', '--mount', '--propagation', 'private', 'sh', '-c',
                'etc=$1; shift; mount --bind "$etc" %s && exec "$@"' %
                ETC_CEPH, 'sh', etc] + argv

    # -- readiness through the API -----------------------------------------

    def api_url(self, info=None):
        info = info or self.info
        return 'http://%s:%d/v3/%s' % (info['host'], info['api_port'],
                                       info['project_id'])

    def auth_token(self):
        """noauth's ``admin:PROJECT``, or a Keystone token of the admin."""
        info = self.info
        if not info.get('keystone'):
            return 'admin:%s' % info['project_id']
        if not getattr(self, '_token', None):
            self._token = self.keystone_token()
        return self._token

    def api(self, method, path, body=None, version='3.0', timeout=10):
        return self.http_json(self.api_url() + path, method, body, {
            'OpenStack-API-Version': 'volume %s' % version}, timeout)

    def http_json(self, url, method, body=None, headers=None, timeout=10):
        """A JSON call as the box's admin; the decoded answer or {}."""
        req = urllib.request.Request(
            url, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers=dict({'X-Auth-Token': self.auth_token(),
                          'Content-Type': 'application/json'},
                         **(headers or {})))
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            data = resp.read()
        return json.loads(data) if data else {}

    def api_answers(self):
        info = self.info
        try:
            urllib.request.urlopen('http://%s:%d/' % (info['host'],
                                                      info['api_port']),
                                   timeout=2).close()
        except urllib.error.HTTPError:
            return True  # the versions document answers 300
        except (urllib.error.URLError, OSError):
            return False
        return True

    def service_states(self):
        """{(binary, host): state} from the os-services API."""
        services = self.api('GET', '/os-services')['services']
        return {(s['binary'], s['host']): (s['state'], s['status'])
                for s in services}

    def pool_backends(self):
        """Backends whose driver initialized and reported its capacity.

        A volume service whose driver failed to initialize still shows
        'up' in os-services for a while; only a working driver reports a
        pool to the scheduler.
        """
        pools = self.api('GET', '/scheduler-stats/get_pools')['pools']
        return {p['name'].split('@', 1)[1].split('#', 1)[0] for p in pools
                if '@' in p['name']}

    def volume_backends_up(self):
        try:
            states = self.service_states()
            pools = self.pool_backends()
        except (urllib.error.URLError, OSError, ValueError):
            return False
        up = {tuple(host.split('@', 1)) for (binary, host), st
              in states.items() if binary == 'cinder-volume' and
              '@' in host and st == ('up', 'enabled')}
        scheduler = any(b == 'cinder-scheduler' and st[0] == 'up'
                        for (b, _h), st in states.items())
        backup = not self.info.get('backup') or any(
            b == 'cinder-backup' and st == ('up', 'enabled')
            for (b, _h), st in states.items())
        # Every volume service of every backend, when they have names.
        wanted = self.volume_hosts().values()
        return scheduler and backup and all(
            n in pools and any(b == n and (h is None or h == host)
                               for host, b in up)
            for n, _d in self.info['backends'] for h in wanted)

    def _wait_cinder(self, procs):
        def ready():
            for name in self.cinder_names():
                if not procs[name].alive():
                    raise StackError('%s exited; see %s and %s' % (
                        name, procs[name].out_path,
                        os.path.join(self.log_dir, name + '.log')))
            return self.api_answers() and self.volume_backends_up()
        wait_for(ready, self.s.timeout, 'cinder-api and the volume service '
                 'of every backend to be up')

    def _ensure_types(self):
        existing = {t['name'] for t in
                    self.api('GET', '/types')['volume_types']}
        wanted = [(name, {'volume_backend_name': name})
                  for name, _d in self.info['backends']]
        wanted.append(('multiattach', {'multiattach': '<is> True'}))
        for name, specs in wanted:
            if name not in existing:
                self.api('POST', '/types', {'volume_type': {
                    'name': name, 'extra_specs': specs}})

    # -- output -------------------------------------------------------------

    def client_env(self, info=None):
        """The client's variables; with Keystone, none (see openrc)."""
        info = info or self.info
        if info.get('keystone'):
            return []
        return [('OS_AUTH_TYPE', 'noauth'),
                ('CINDER_ENDPOINT', self.api_url(info)),
                ('OS_PROJECT_ID', info['project_id']),
                ('OS_USER_ID', 'admin'),
                ('OS_VOLUME_API_VERSION', CLIENT_API_VERSION)]

    def _client_prefix(self, user='admin'):
        """What goes before a client: noauth's variables, or the openrc."""
        if self.info.get('keystone'):
            return '. %s &&' % self.openrc_path(user)
        return ' '.join('%s=%s' % kv for kv in self.client_env())

    def client_command(self, args='create 1'):
        return '%s %s %s' % (self._client_prefix(), os.path.join(
            self.info['venv'], 'bin', 'cinder'), args)

    def manage_command(self, args, user='admin'):
        """The operator CLI with *args*, as *user* (admin, or service)."""
        env = self._client_prefix(user)
        script = os.path.join(self.info['venv'], 'bin', 'cinder-forcedetach')
        if not os.path.exists(script):
            script = '%s -m cinder_forcedetach.cmd.manage' % os.path.join(
                self.info['venv'], 'bin', 'python')
        return '%s %s %s' % (env, script, args)

    def print_ready(self):
        info, procs = self.info, self.procs()
        lines = [
            'Cinder is up (state directory %s)' % self.dir,
            '  API        %s   (%s, project %s)' % (
                self.api_url(), 'keystone %s/v3, credentials in %s' % (
                    self.keystone_url(), self.openrc_path())
                if info.get('keystone') else 'auth_strategy noauth',
                info['project_id']),
            '  rabbitmq   %s:%d, pid %s' % (info['host'], info['rabbit_port'],
                                            procs['rabbitmq'].pid),
            '  tgtd       iSCSI portal %s:%d, control port %d, pid %s' % (
                info['host'], info['iscsi_port'], info['tgt_control_port'],
                procs['tgtd'].pid),
            '  backends   %s (a volume type of the same name each; type '
            '"multiattach")' % ', '.join(
                '%s=%s' % (n, d.rsplit('.', 1)[-1])
                for n, d in info['backends']),
            '  config     %s' % self.conf_path,
            '  logs       %s' % self.log_dir,
            '',
            'Create a volume:',
            '  ' + self.client_command('create 1'),
            'Force-detach it from every host:',
            '  ' + self.manage_command('volume force-detach VOLUME_ID'),
            'Audit what Cinder and the backends say (on this host; --fix '
            'repairs):',
            '  ' + self.manage_command('--format json audit --no-nova '
                                       '--config-file %s' % self.conf_path),
            'Or: eval "$(tools/stack.sh env)" and use cinder / '
            'cinder-forcedetach directly.',
        ]
        extra = []
        if self.uses_ceph():
            extra.append('  ceph       monitor %s:%d, cluster %s' % (
                info['host'], info.get('ceph_mon_port'), self.ceph_dir))
        if info.get('db') == 'mariadb':
            extra.append('  mariadb    %s:%d, pid %s (database cinder)' % (
                info['host'], info['db_port'], procs['mariadb'].pid))
        if info.get('coordination') == 'etcd':
            extra.append('  etcd       %s, pid %s (tooz locks)' % (
                self.etcd_url(), procs['etcd'].pid))
        if info.get('keystone'):
            extra.append('  keystone   %s/v3, pid %s (users admin, cinder; '
                         'region %s)' % (self.keystone_url(),
                                         procs['keystone-api'].pid, REGION))
        if info.get('backup'):
            extra.append('  backup     cinder-backup pid %s (POSIX driver, '
                         '%s)' % (procs['cinder-backup'].pid,
                                  self.backup_dir))
        if info.get('glance'):
            extra.append('  glance     %s/v2, pid %s (%s, file store)' % (
                self.glance_url(), procs['glance-api'].pid,
                'keystone' if info.get('keystone') else 'no auth'))
        if info.get('nova'):
            extra += self.nova_ready_lines(procs)
            lines += self.nova_commands()
        if info.get('volume_services', 1) > 1:
            extra.append('  volume     %d services in cluster "%s": %s' % (
                info['volume_services'], CLUSTER, ', '.join(
                    '%s pid %s' % (n, procs[n].pid)
                    for n in self.volume_hosts())))
        lines[4:4] = extra
        sys.stdout.write('\n'.join(lines) + '\n')
        sys.stdout.flush()

    # -- down ---------------------------------------------------------------

    def _stop_one(self, proc):
        if proc.name == 'tgtd':
            self._stop_tgtd(proc)
            return
        killed = proc.stop()
        if killed:
            log('%s: SIGKILLed %s after %ds' % (
                proc.name, ', '.join(str(p) for p, _s in killed),
                STOP_GRACE))

    def _stop_tgtd(self, proc):
        if not proc.alive():
            proc.forget()
            return
        control = self.info.get('tgt_control_port',
                                self.s.tgt_control_port)
        out = tgtadm(control, '--op', 'show', '--mode', 'target',
                     check=False).stdout
        for tid in re.findall(r'^Target (\d+):', out, re.MULTILINE):
            tgtadm(control, '--op', 'delete', '--mode', 'target', '--tid',
                   tid, '--force', check=False)
        accounts = tgtadm(control, '--op', 'show', '--mode', 'account',
                          check=False).stdout
        for line in accounts.splitlines()[1:]:
            if line.strip():
                tgtadm(control, '--op', 'delete', '--mode', 'account',
                       '--user', line.split()[0], check=False)
        tgtadm(control, '--op', 'delete', '--mode', 'system', check=False)
        pid, start = proc.record['pid'], proc.record['start_time']
        for _ in range(100):
            if not is_alive(pid, start):
                break
            time.sleep(0.1)
        if is_alive(pid, start):
            log('tgtd did not stop; SIGKILL %d' % pid)
            proc.stop(grace=0)
        proc.forget()

    def down(self, purge=False):
        procs = self.recorded_procs()
        for name in reversed(list(procs)):
            proc = procs[name]
            if proc.record:
                was = proc.pid
                self._stop_one(proc)
                log('stopped %s (pid %s)' % (name, was))
        self._stop_ceph()
        if purge:
            shutil.rmtree(self.dir, ignore_errors=True)
            log('removed %s' % self.dir)
        return 0

    # -- status ---------------------------------------------------------------

    def status(self):
        if not self.info and not any(
                p.record for p in self.recorded_procs().values()):
            sys.stdout.write('no stack in %s\n' % self.dir)
            return EXIT_DOWN
        info = self.effective()
        self.info = info
        procs = self.procs(info)
        hosts = self.volume_hosts()
        rows, ok = [], True
        try:
            states = self.service_states() if self.api_answers() else {}
            pools = self.pool_backends() if states else set()
        except (urllib.error.URLError, OSError, ValueError):
            states, pools = {}, set()
        for name, proc in procs.items():
            alive = proc.alive()
            ok = ok and alive
            detail = ''
            # Asked once: it calls the service's API.
            nova_detail = alive and self.nova_status_detail(name, info)
            if name == 'rabbitmq' and alive:
                detail = 'amqp %s:%d %s' % (
                    info['host'], info['rabbit_port'],
                    'answers' if amqp_ready(info['host'],
                                            info['rabbit_port'])
                    else 'NOT answering')
            elif name == 'tgtd' and alive:
                out = tgtadm(info['tgt_control_port'], '--op', 'show',
                             '--mode', 'target', check=False).stdout
                detail = 'portal %s:%d, %d target(s)' % (
                    info['host'], info['iscsi_port'],
                    len(re.findall(r'^Target \d+:', out, re.MULTILINE)))
            elif name == 'mariadb' and alive:
                detail = 'mysql %s:%d, database cinder' % (
                    info['host'], info['db_port'])
            elif name == 'keystone-api' and alive:
                detail = '%s/v3 %s' % (self.keystone_url(info), 'answers' if
                                       self.keystone_answers() else
                                       'NOT answering')
            elif name == 'glance-api' and alive:
                detail = '%s %s' % (self.glance_url(info), 'answers' if
                                    self.glance_answers() else
                                    'NOT answering')
            elif name == 'etcd' and alive:
                detail = '%s %s' % (self.etcd_url(info), 'healthy' if
                                    self.etcd_healthy() else 'NOT healthy')
            elif alive and nova_detail:
                detail, healthy = nova_detail
                ok = ok and healthy
            elif name == 'cinder-api' and alive:
                detail = '%s %s' % (self.api_url(info), 'answers'
                                    if states else 'NOT answering')
            elif name.startswith('cinder-') and alive:
                binary = ('cinder-volume' if name.startswith('cinder-volume')
                          else name)
                own = hosts.get(name)

                def mine(b, h):
                    return b == binary and (not own or h.startswith(own + '@'))

                found = ['%s %s' % (h, '/'.join(st)) for (b, h), st
                         in sorted(states.items()) if mine(b, h)]
                ok = ok and bool(found) and all(
                    st == ('up', 'enabled') for (b, h), st
                    in states.items() if mine(b, h))
                if binary == 'cinder-volume':
                    for backend, _driver in info['backends']:
                        if backend not in pools:
                            ok = False
                            found.append('%s: driver NOT initialized (no '
                                         'pool; see %s.log)' %
                                         (backend, name))
                detail = ', '.join(found) or 'not in os-services'
            rows.append('%-17s %-8s %-8s %s' % (
                name, 'running' if alive else 'stopped',
                proc.pid if alive else '-', detail))
        if self.uses_ceph(info):
            ready = (os.path.exists(self.ceph_dir) and
                     self.ceph('status', check=False).returncode == 0)
            ok = ok and ready
            rows.append('%-17s %-8s %-8s %s' % (
                'ceph', 'running' if ready else 'stopped', '-',
                'monitor %s:%s, %s' % (info['host'], info.get('ceph_mon_port'),
                                       'ready' if ready else 'NOT ready')))
        sys.stdout.write('\n'.join(rows) + '\n')
        return 0 if ok else EXIT_DOWN

    def env(self):
        if not self.info:
            raise StackError('no stack in %s' % self.dir)
        for key, value in self.client_env():
            sys.stdout.write('export %s=%s\n' % (key, value))
        if self.info.get('keystone'):
            sys.stdout.write('. %s\n' % self.openrc_path())
        sys.stdout.write('export PATH=%s:"$PATH"\n' % os.path.join(
            self.info['venv'], 'bin'))
        return 0


# -- helpers ------------------------------------------------------------------


def volume_service_names(count):
    """Process names of *count* volume services."""
    if count == 1:
        return ['cinder-volume']
    return ['cinder-volume-%d' % i for i in range(1, count + 1)]


def _which(name):
    """*name* on PATH, or in the system directories root has."""
    return shutil.which(name) or shutil.which(name, path=SBIN)


def tgtadm(control, *args, check=True):
    return subprocess.run(('tgtadm', '-C', str(control), '--lld', 'iscsi') +
                          args, capture_output=True, text=True, check=check,
                          timeout=30)


def amqp_ready(host, port):
    """The broker answers the AMQP 0-9-1 header with Connection.Start."""
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            s.sendall(b'AMQP\x00\x00\x09\x01')
            head = s.recv(11)
    except OSError as err:
        if err.errno not in (errno.ECONNREFUSED, errno.ECONNRESET, None):
            log('amqp probe: %s' % err)
        return False
    # frame type 1 (method), channel 0, class 10 method 10.
    return len(head) == 11 and head[0] == 1 and head[7:11] == \
        b'\x00\x0a\x00\x0a'


def build_parser():
    parser = argparse.ArgumentParser(
        prog='tools/stack.sh',
        description='Real Cinder services with cinder-forcedetach drivers, '
                    'on loopback.')
    parser.add_argument('--state-dir', help='state directory (STACK_DIR)')
    sub = parser.add_subparsers(dest='command', metavar='COMMAND')
    sub.required = True
    up = sub.add_parser('up', help='install what is missing and start')
    up.add_argument('--venv')
    up.add_argument('--host')
    for opt in ('api-port', 'rabbit-port', 'epmd-port', 'iscsi-port',
                'tgt-control-port', 'ceph-mon-port', 'db-port', 'etcd-port',
                'glance-port', 'keystone-port', 'nova-port',
                'placement-port', 'neutron-port', 'timeout'):
        up.add_argument('--' + opt, type=int)
    up.add_argument('--db', choices=DB_KINDS,
                    help='the database of every service [mariadb]')
    up.add_argument('--coordination', choices=COORDINATION_KINDS,
                    help="tooz locks: files or a project-started etcd "
                         "[file]")
    up.add_argument('--volume-services', type=int, metavar='N',
                    help='cinder-volume processes; several form one '
                         'cluster (active-active) [1]')
    up.add_argument('--keystone', action='store_true',
                    help='Keystone auth (a project-started keystone-api) '
                         'instead of noauth')
    up.add_argument('--backup', action='store_true',
                    help="also run cinder-backup (Cinder's POSIX driver, "
                         "backups under STATE/backups)")
    up.add_argument('--glance', action='store_true',
                    help='also run glance-api (no auth, file store)')
    up.add_argument('--nova', action='store_true',
                    help='also run Nova (fake virt driver), placement and '
                         'Neutron (no agents); implies --keystone '
                         '--glance --db mariadb')
    up.add_argument('--backends', help='NAME[=DRIVER],...; DRIVER: tgt, '
                    'rbd or a class')
    up.add_argument('--extra-conf', help='file appended to cinder.conf')
    down = sub.add_parser('down', help='stop every process up started')
    down.add_argument('--purge', action='store_true',
                      help='also delete the state directory')
    sub.add_parser('status', help='report each service')
    sub.add_parser('env', help='print export lines for the client')
    return parser


def main(argv=None):
    args = build_parser().parse_args(argv)
    try:
        stack = Stack(Settings(args))
        if args.command == 'up':
            return stack.up()
        if args.command == 'down':
            return stack.down(purge=args.purge)
        if args.command == 'status':
            return stack.status()
        return stack.env()
    except StackError as err:
        log('ERROR: %s' % err)
        return 1


if __name__ == '__main__':
    sys.exit(main())
