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

Each service is a module of :mod:`devbox.services` (RabbitMQ, MariaDB,
etcd, tgtd, Ceph, Keystone, Glance, Placement, Neutron, Cinder, Nova,
Horizon) behind one interface; :class:`Stack` starts the enabled ones in
the order of their ``requires``, each process in a session of its own
recorded in ``STATE/run/NAME.json`` (:mod:`devbox.process`), and stops
them in reverse: SIGTERM, then SIGKILL after a grace period (tgtd, which
ignores SIGTERM, has its targets deleted and is stopped with ``tgtadm
--op delete --mode system``).  ``up`` waits until the API answers and
every backend's volume service is up, creates a volume type per backend
plus a ``multiattach`` type, and prints the endpoint and a client
command.

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
``STACK_ETCD_MEMBERS``     1, 3 or 5 etcd members; with 3 or 5 an etcd
                           gateway listens on the etcd port [1]
``STACK_ETCD_MEMBER_PORTS`` the members' client ports, comma-separated;
                           peers use +1 [etcd port + 2, + 4, ...]
``STACK_VOLUME_SERVICES``  cinder-volume processes; with 2 or more each
                           has its own ``host`` (its process name) in the
                           cluster ``box``, serving every backend [1]
``STACK_KEYSTONE``         1: Keystone auth instead of noauth [0]
``STACK_KEYSTONE_PORT``    keystone-api port [15000]
``STACK_BACKUP``           1: also run cinder-backup with Cinder's POSIX
                           driver, backups under ``STATE/backups``
                           compressed with zstd (a
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
``STACK_VIRT``             Nova's virt driver: ``fake`` or ``libvirt``
                           (qemu TCG guests on a project-started
                           libvirtd, :mod:`devbox.services.libvirt`)
                           [fake]
``STACK_COMPUTES``         with Nova: compute hosts, 1 or 2 (the second,
                           ``box-compute-2``, is where an evacuation
                           goes; with libvirt it has its own libvirtd)
                           [1]
``STACK_PLACEMENT_PORT``   placement-api port [18778]
``STACK_NEUTRON_PORT``     neutron-api port [19696]
``STACK_HORIZON``          1: also run Horizon with our panel (Admin >
                           Volume > Stuck Volumes), logging in through
                           Keystone; implies Keystone [0]
``STACK_HORIZON_PORT``     Horizon's port [18080]
``STACK_DEBUG``            1: Cinder debug logging (may log more detail)
=========================  =============================================
"""

import argparse
import ipaddress
import os
import re
import shutil
import subprocess
import sys
import uuid

from devbox import boxutil
from devbox import computes
from devbox import services
from devbox.services import cinder
from devbox.services import keystone

StackError = boxutil.StackError
log = boxutil.log

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TGT_DRIVER = cinder.TGT_DRIVER
RBD_DRIVER = cinder.RBD_DRIVER
DRIVER_ALIASES = {'tgt': TGT_DRIVER, 'iscsi': TGT_DRIVER, 'rbd': RBD_DRIVER}
DB_KINDS = ('sqlite', 'mariadb')
COORDINATION_KINDS = ('file', 'etcd')
VIRT_KINDS = ('fake', 'libvirt')
EXIT_DOWN = 3


# -- settings -------------------------------------------------------------


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
        self.etcd_members = getattr(args, 'etcd_members', None) or _int_env(
            'STACK_ETCD_MEMBERS', 1)
        if self.etcd_members not in (1, 3, 5):
            raise StackError('STACK_ETCD_MEMBERS must be 1, 3 or 5, not %d'
                             % self.etcd_members)
        member_ports = env('STACK_ETCD_MEMBER_PORTS', '')
        try:
            self.etcd_member_ports = [
                int(p) for p in member_ports.split(',') if p.strip()] or [
                self.etcd_port + 2 * (i + 1)
                for i in range(self.etcd_members)]
        except ValueError:
            raise StackError('STACK_ETCD_MEMBER_PORTS must be ports separated '
                             'by commas, not %r' % member_ports)
        if self.etcd_members == 1:
            self.etcd_member_ports = []
        elif len(self.etcd_member_ports) != self.etcd_members or not all(
                1024 < p < 65535 for p in self.etcd_member_ports):
            raise StackError('STACK_ETCD_MEMBER_PORTS: %d ports in '
                             '1025-65534 for %d members' % (
                                 self.etcd_members, self.etcd_members))
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
        self.virt = getattr(args, 'virt', None) or env('STACK_VIRT', 'fake')
        self.computes = getattr(args, 'computes', None) or _int_env(
            'STACK_COMPUTES', 1)
        self.placement_port = getattr(
            args, 'placement_port', None) or _int_env(
            'STACK_PLACEMENT_PORT', 18778)
        self.neutron_port = getattr(args, 'neutron_port', None) or _int_env(
            'STACK_NEUTRON_PORT', 19696)
        self.horizon = bool(getattr(args, 'horizon', False) or env(
            'STACK_HORIZON', '') in ('1', 'true', 'yes'))
        self.horizon_port = getattr(args, 'horizon_port', None) or _int_env(
            'STACK_HORIZON_PORT', 18080)
        if self.horizon:
            # Horizon logs in through Keystone.
            self.keystone = True
        if self.nova:
            # Nova needs Keystone (service tokens), Glance (images) and a
            # database server (SQLite broke shelve/unshelve in 2 of 3 runs).
            if (getattr(args, 'db', None) or env('STACK_DB')) == 'sqlite':
                raise StackError('--nova needs --db mariadb, not sqlite')
            self.db, self.keystone, self.glance = 'mariadb', True, True
        if self.virt not in VIRT_KINDS:
            raise StackError('STACK_VIRT must be one of %s, not %r' % (
                ', '.join(VIRT_KINDS), self.virt))
        if self.virt != 'fake' and not self.nova:
            raise StackError('--virt %s needs --nova' % self.virt)
        if not 1 <= self.computes <= computes.MAX_COMPUTES:
            raise StackError('STACK_COMPUTES must be 1 to %d, not %d' % (
                computes.MAX_COMPUTES, self.computes))
        if self.computes > 1 and not self.nova:
            raise StackError('--computes %d needs --nova' % self.computes)
        if self.db not in DB_KINDS:
            raise StackError('STACK_DB must be one of %s, not %r' % (
                ', '.join(DB_KINDS), self.db))
        if self.coordination not in COORDINATION_KINDS:
            raise StackError('STACK_COORDINATION must be one of %s, not %r'
                             % (', '.join(COORDINATION_KINDS),
                                self.coordination))
        if not 1 <= self.volume_services <= cinder.MAX_VOLUME_SERVICES:
            raise StackError('STACK_VOLUME_SERVICES must be 1 to %d, not %d'
                             % (cinder.MAX_VOLUME_SERVICES,
                                self.volume_services))
        for name in ('api_port', 'rabbit_port', 'epmd_port', 'iscsi_port',
                     'ceph_mon_port', 'db_port', 'etcd_port', 'glance_port',
                     'keystone_port', 'nova_port', 'placement_port',
                     'neutron_port', 'horizon_port'):
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


class Stack(object):
    """Starts, stops and reports the box's services, in ``requires`` order.

    Every service gets the same :class:`.services.base.Context`
    (``self.ctx``): settings, the running stack's ``info``, directories,
    secrets and the other services.
    """

    def __init__(self, settings):
        self.s = settings
        self.services = services.registry()
        self.ctx = services.base.Context(settings, self.services)

    @property
    def info(self):
        return self.ctx.info

    def service(self, name):
        return self.services[name]

    def api(self, method, path, body=None, version='3.0', timeout=10):
        """A call to Cinder's API as the box's admin; the decoded answer."""
        return self.services['cinder'].api(self.ctx, method, path, body,
                                           version, timeout)

    def http_json(self, url, method, body=None, headers=None, timeout=10):
        """A JSON call as the box's admin; the decoded answer or {}."""
        return self.ctx.http_json(url, method, body, headers, timeout)

    def enabled_services(self, info=None):
        info = info or self.ctx.info
        return [svc for svc in self.services.values() if svc.enabled(info)]

    def order(self, info=None):
        """Names of the stack's processes, in start order."""
        return services.process_order(info or self.effective(),
                                      self.services)

    def recorded_procs(self):
        """Every process with a record, whatever the settings say now."""
        names = set(self.order())
        if os.path.isdir(self.ctx.run_dir):
            names.update(n[:-len('.json')]
                         for n in os.listdir(self.ctx.run_dir)
                         if n.endswith('.json'))
        return [(svc, self.ctx.proc(name))
                for svc in self.services.values()
                for name in svc.known_processes() if name in names]

    # -- settings of a running stack win over the environment ---------------

    def effective(self):
        """Settings of the running stack if any, else the requested ones."""
        return dict(self.ctx.info) or self.requested()

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
                'etcd_member_ports': s.etcd_member_ports,
                'volume_services': s.volume_services,
                'backup': s.backup,
                'glance': s.glance, 'glance_port': s.glance_port,
                'keystone': s.keystone, 'keystone_port': s.keystone_port,
                'nova': s.nova, 'nova_port': s.nova_port, 'virt': s.virt,
                'computes': s.computes,
                'placement_port': s.placement_port,
                'neutron_port': s.neutron_port,
                'horizon': s.horizon, 'horizon_port': s.horizon_port,
                'project_id': (s.project_id or
                               self.ctx.info.get('project_id') or
                               uuid.uuid4().hex)}

    # -- up ---------------------------------------------------------------

    def up(self):
        ctx = self.ctx
        os.umask(0o077)
        for d in (ctx.dir, ctx.run_dir, ctx.log_dir):
            os.makedirs(d, exist_ok=True)
        running = [n for n in self.order() if ctx.proc(n).alive()]
        if running and ctx.info:
            log('already running: %s; keeping its settings (down, then up '
                'to apply new settings)' % ', '.join(running))
        else:
            ctx.info = self.requested()
        ctx.save_info()
        try:
            self._check_ports()
            for svc in self.enabled_services():
                svc.start(ctx)
        except (StackError, OSError, subprocess.SubprocessError) as err:
            log('ERROR: %s' % err)
            if ctx.started:
                log('stopping what this run started: %s' % ', '.join(
                    p.name for p in ctx.started))
                for proc in reversed(ctx.started):
                    services.owner(self.services, proc.name).stop_process(
                        ctx, proc)
            return 1
        self.print_ready()
        return 0

    def _check_ports(self):
        info = self.ctx.info
        for svc in self.enabled_services():
            for name, ports in svc.ports(info).items():
                if self.ctx.proc(name).alive():
                    continue
                for port in ports:
                    if boxutil.port_open(info['host'], port):
                        raise StackError(
                            'port %d (for %s) is already in use by another '
                            'process; choose another with the STACK_*_PORT '
                            'settings' % (port, name))

    def print_ready(self):
        ctx = self.ctx
        lines = ['Cinder is up (state directory %s)' % ctx.dir]
        commands = []
        for svc in self.enabled_services():
            lines += svc.ready_lines(ctx)
            commands += svc.commands(ctx)
        sys.stdout.write('\n'.join(lines + [''] + commands) + '\n')
        sys.stdout.flush()

    # -- down ---------------------------------------------------------------

    def down(self, purge=False):
        ctx = self.ctx
        for svc, proc in reversed(self.recorded_procs()):
            if proc.record:
                was = proc.pid
                svc.stop_process(ctx, proc)
                log('stopped %s (pid %s)' % (proc.name, was))
        for svc in reversed(self.services.values()):
            svc.stop(ctx)
        if purge:
            shutil.rmtree(ctx.dir, ignore_errors=True)
            log('removed %s' % ctx.dir)
        return 0

    # -- status ---------------------------------------------------------------

    def status(self):
        ctx = self.ctx
        if not ctx.info and not any(
                p.record for _s, p in self.recorded_procs()):
            sys.stdout.write('no stack in %s\n' % ctx.dir)
            return EXIT_DOWN
        ctx.info = self.effective()
        rows, ok = [], True
        for svc in self.enabled_services():
            for name, running, pid, detail, healthy in svc.status(ctx):
                ok = ok and healthy
                rows.append('%-17s %-8s %-8s %s' % (
                    name, 'running' if running else 'stopped',
                    pid if running and pid else '-', detail))
        sys.stdout.write('\n'.join(rows) + '\n')
        return 0 if ok else EXIT_DOWN

    def env(self):
        info = self.ctx.info
        if not info:
            raise StackError('no stack in %s' % self.ctx.dir)
        for key, value in cinder.Cinder.client_env(info):
            sys.stdout.write('export %s=%s\n' % (key, value))
        if info.get('keystone'):
            sys.stdout.write('. %s\n' % keystone.Keystone.openrc_path(
                self.ctx))
        sys.stdout.write('export PATH=%s:"$PATH"\n' % os.path.join(
            info['venv'], 'bin'))
        return 0


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
                'placement-port', 'neutron-port', 'horizon-port',
                'timeout'):
        up.add_argument('--' + opt, type=int)
    up.add_argument('--db', choices=DB_KINDS,
                    help='the database of every service [mariadb]')
    up.add_argument('--coordination', choices=COORDINATION_KINDS,
                    help="tooz locks: files or a project-started etcd "
                         "[file]")
    up.add_argument('--etcd-members', type=int, choices=(1, 3, 5),
                    help='with --coordination etcd: members of the etcd '
                         'cluster, behind an etcd gateway on the etcd '
                         'port [1]')
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
    up.add_argument('--horizon', action='store_true',
                    help='also run Horizon with our panel (Admin > Volume '
                         '> Stuck Volumes); implies --keystone')
    up.add_argument('--virt', choices=VIRT_KINDS,
                    help="Nova's virt driver: fake (servers only in Nova's "
                         "database) or libvirt (qemu TCG guests on a "
                         "project-started libvirtd) (STACK_VIRT) [fake]")
    up.add_argument('--computes', type=int, metavar='N',
                    help='with --nova: compute hosts, 1 or 2 (the second '
                         'is where an evacuation goes) (STACK_COMPUTES) '
                         '[1]')
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
