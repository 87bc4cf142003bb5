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

"""Cinder's services: scheduler, volume service(s), backup, API.

``cinder-manage db sync``, then ``cinder-scheduler``, the
``cinder-volume`` service(s) (with 2 or more, each has its own ``host``
in the cluster :data:`CLUSTER`), with ``--backup`` ``cinder-backup``, and
``cinder-api``, from the venv with a generated ``STATE/cinder.conf``
(noauth or Keystone, MariaDB or SQLite, the box's RabbitMQ, file or etcd
tooz coordination, one backend section per ``STACK_BACKENDS`` entry).
Ready when the API answers and every backend's volume service is up and
reports its pool; then a volume type per backend and ``multiattach``.
"""

import datetime
import os
import subprocess
import urllib.error
import urllib.request

from devbox import boxutil
from devbox import partitions
from devbox.services import base
from devbox.services import ceph
from devbox.services import keystone
from devbox.services import libvirt

TGT_DRIVER = 'cinder_forcedetach.drivers.iscsi.TgtISCSIDriver'
RBD_DRIVER = ceph.RBD_DRIVER
MAX_VOLUME_SERVICES = 4
#: The cluster every volume service joins when there are several.
CLUSTER = 'box'
ETC_CEPH = '/etc/ceph'


def group_tag(state_dir):
    """The set of cgroups of a box's volume services (devbox.partitions)."""
    return 'box-' + os.path.basename(os.path.normpath(state_dir))


def volume_service_names(count):
    """Process names of *count* volume services."""
    if count == 1:
        return ['cinder-volume']
    return ['cinder-volume-%d' % i for i in range(1, count + 1)]


def volume_hosts(info):
    """{process name: its ``host``} of the volume services.

    One service keeps Cinder's default host (the machine's name); several
    each get their own host name in the cluster :data:`CLUSTER`.
    """
    names = volume_service_names(info.get('volume_services', 1))
    if len(names) == 1:
        return {names[0]: None}
    return {name: name for name in names}


def states_of(services):
    """{(binary, host): (state, status)} of os-services' *services*."""
    return {(s['binary'], s['host']): (s['state'], s['status'])
            for s in services}


def utc_seconds(timestamp):
    """Epoch seconds of Cinder's ``updated_at`` (UTC, no zone given)."""
    return datetime.datetime.fromisoformat(timestamp).replace(
        tzinfo=datetime.timezone.utc).timestamp()


class Cinder(base.Service):

    name = 'cinder'
    requires = ('rabbitmq', 'mariadb', 'etcd', 'tgtd', 'ceph',
                'keystone-api', 'glance-api')
    databases = {'cinder': 'db_password'}
    keystone_users = ('cinder',)

    def processes(self, info):
        return ['cinder-scheduler'] + volume_service_names(
            info.get('volume_services', 1)) + (
            ['cinder-backup'] if info.get('backup') else []) + [
            'cinder-api']

    def known_processes(self):
        return (['cinder-scheduler', 'cinder-volume'] +
                volume_service_names(MAX_VOLUME_SERVICES) +
                ['cinder-backup', 'cinder-api'])

    def ports(self, info):
        return {'cinder-api': [info['api_port']]}

    def catalog(self, ctx):
        url = 'http://%s:%d/v3/%%(project_id)s' % (ctx.info['host'],
                                                   ctx.info['api_port'])
        # tempest asks for block-storage, python-cinderclient for volumev3.
        return [('cinder', 'block-storage', url),
                ('cinderv3', 'volumev3', url)]

    @staticmethod
    def conf_path(ctx):
        return os.path.join(ctx.dir, 'cinder.conf')

    @staticmethod
    def backup_dir(ctx):
        return os.path.join(ctx.dir, 'backups')

    # -- configuration ------------------------------------------------------

    def write_conf(self, ctx):
        info, c = ctx.info, os.path.join(ctx.dir, 'cinder')
        venv = info['venv']
        paste = os.path.join(venv, 'etc', 'cinder', 'api-paste.ini')
        if not os.path.exists(paste):
            raise base.StackError('%s not found: is Cinder installed in %s?'
                                  % (paste, venv))
        conf = boxutil.conf({'DEFAULT': {
            'debug': str(ctx.s.debug),
            'state_path': c,
            'log_dir': ctx.log_dir,
            'my_ip': info['host'],
            'auth_strategy': 'noauth',
            'transport_url': ctx.service('rabbitmq').transport_url(ctx),
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
        }})
        if info.get('volume_services', 1) > 1:
            conf['DEFAULT']['cluster'] = CLUSTER
        if ctx.enabled('glance-api'):
            conf['DEFAULT']['glance_api_servers'] = ctx.service(
                'glance-api').url(info)
        if info.get('backup'):
            conf['DEFAULT'].update({
                'backup_driver':
                    'cinder.backup.drivers.posix.PosixBackupDriver',
                'backup_posix_path': self.backup_dir(ctx),
                # One of Cinder's own algorithms (zstd is a requirement of
                # cinder): on the 1 GiB volumes of tempest's backup tests
                # it costs ~1.7 s of CPU a GiB to compress against zlib's
                # (the default) ~6.3, and a quarter to decompress.
                'backup_compression_algorithm': 'zstd'})
            os.makedirs(self.backup_dir(ctx), exist_ok=True)
        conf['database'] = {'connection': ctx.database_url('cinder', c)}
        # Notifications (Cinder's and forcedetach.*) to the box's RabbitMQ
        # (DEFAULT's transport_url): topic notifications, exchange
        # openstack (oslo.messaging's control_exchange; Cinder keeps it).
        conf['oslo_messaging_notifications'] = {'driver': 'messagingv2'}
        conf['oslo_concurrency'] = {'lock_path': os.path.join(c, 'locks')}
        conf['coordination'] = {
            'backend_url': ctx.service('etcd').coordination_url(ctx)}
        conf['keystone_authtoken'] = {'service_token_roles': 'service'}
        if ctx.enabled('keystone-api'):
            ks = ctx.service('keystone-api')
            conf['DEFAULT']['auth_strategy'] = 'keystone'
            conf['keystone_authtoken'].update(
                ks.authtoken_section(ctx, 'cinder'),
                service_token_roles_required='True')
            if ctx.enabled('nova'):
                # Cinder's calls to Nova (volume events, the server lookup
                # of its attachment-delete guard) as a cloud makes them.
                auth = ks.service_auth(ctx, 'cinder')
                conf['nova'] = dict(auth, interface='public',
                                    token_auth_url=auth['auth_url'])
                conf['service_user'] = dict(auth,
                                            send_service_user_token='True')
        # Privileged calls (tgtadm, os-brick) go through oslo.privsep; this
        # runs as root, so the helper needs no sudo/rootwrap in front.
        helper = '%s --config-file %s' % (
            os.path.join(venv, 'bin', 'privsep-helper'), self.conf_path(ctx))
        for section in ('cinder_sys_admin', 'privsep_osbrick'):
            conf[section] = {'helper_command': helper}
        for name, driver in info['backends']:
            conf[name] = self._backend_section(ctx, name, driver)
        os.makedirs(os.path.join(c, 'locks'), exist_ok=True)
        os.makedirs(os.path.join(ctx.dir, 'locks'), exist_ok=True)
        path = self.conf_path(ctx)
        fd = os.open(path + '.tmp', os.O_WRONLY | os.O_CREAT | os.O_TRUNC,
                     0o600)
        with os.fdopen(fd, 'w') as f:
            f.write('# Generated by tools/stack.sh; changes are '
                    'overwritten by the next up.\n')
            conf.write(f)
            if ctx.s.extra_conf:
                with open(ctx.s.extra_conf) as extra:
                    f.write('\n# From %s\n' % ctx.s.extra_conf)
                    f.write(extra.read())
        os.rename(path + '.tmp', path)

    def _backend_section(self, ctx, name, driver):
        info = ctx.info
        section = {'volume_driver': driver, 'volume_backend_name': name}
        if driver == TGT_DRIVER or 'iscsi' in driver.lower():
            section.update({
                'forcedetach_tgt_control_port': str(info['tgt_control_port']),
                'forcedetach_volumes_dir': os.path.join(ctx.dir, 'volumes',
                                                        name),
                'target_ip_address': info['host'],
                'target_port': str(info['iscsi_port']),
                'target_protocol': 'iscsi',
            })
        elif driver == RBD_DRIVER:
            settings = ctx.service('ceph').settings(ctx)
            section.update({
                'rbd_ceph_conf': settings['CEPH_CONF'],
                'rbd_user': settings['CEPH_USER'],
                'rbd_pool': settings['CEPH_POOL'],
                'forcedetach_rbd_keyring': settings['CEPH_KEYRING'],
            })
            if libvirt.uses_libvirt(info):
                # What Nova's libvirt driver names in the guest's disk:
                # the libvirt secret holding this user's key (devstack's
                # CINDER_CEPH_UUID).
                section['rbd_secret_uuid'] = libvirt.CEPH_SECRET_UUID
        return section

    # -- start ------------------------------------------------------------

    def start(self, ctx):
        self.write_conf(ctx)
        # cinder-api starts last, after the sync: alive, the database is
        # synced (a volume service restarted alone skips 3 s of CPU).
        if not ctx.proc('cinder-api').alive():
            ctx.manage('cinder-manage', ['--config-file',
                                         self.conf_path(ctx), 'db', 'sync'])
        hosts = volume_hosts(ctx.info)
        for name in self.processes(ctx.info):
            proc = ctx.proc(name)
            if proc.alive():
                continue
            binary = ('cinder-volume' if name.startswith('cinder-volume')
                      else name)
            argv = [ctx.venv_bin(binary), '--config-file',
                    self.conf_path(ctx)]
            if name == 'cinder-backup' and ctx.enabled('ceph'):
                argv = self.backup_host_argv(ctx, argv)
            if hosts.get(name):
                own = os.path.join(ctx.dir, name + '.conf')
                boxutil.write_private(own, '[DEFAULT]\nhost = %s\n' %
                                      hosts[name])
                argv += ['--config-file', own, '--log-file', name + '.log']
            proc.start(argv, preexec_fn=self.own_group(ctx, name))
        boxutil.wait_for(lambda: self.ready(ctx), ctx.s.timeout,
                         'cinder-api and the volume service of every '
                         'backend to be up')
        self._ensure_types(ctx)

    def backup_host_argv(self, ctx, argv):
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
            raise base.StackError('%s is missing: install Ceph\'s client '
                                  '(tools/install-ceph.sh)' % ETC_CEPH)
        settings = ctx.service('ceph').settings(ctx)
        etc = os.path.join(ctx.dir, 'backup-etc-ceph')
        os.makedirs(etc, mode=0o700, exist_ok=True)
        with open(settings['CEPH_KEYRING']) as f:
            boxutil.write_private(os.path.join(
                etc, 'ceph.client.%s.keyring' % settings['CEPH_USER']),
                f.read())
        return ['unshare', '--mount', '--propagation', 'private', 'sh', '-c',
                'etc=$1; shift; mount --bind "$etc" %s && exec "$@"' %
                ETC_CEPH, 'sh', etc] + argv

    def ready(self, ctx):
        """Every process alive, the API answers, every backend is up."""
        for name in self.processes(ctx.info):
            proc = ctx.proc(name)
            if not proc.alive():
                raise base.StackError('%s exited; see %s and %s' % (
                    name, proc.out_path,
                    os.path.join(ctx.log_dir, name + '.log')))
        return self.api_answers(ctx) and self._backends_up(ctx)

    def _ensure_types(self, ctx):
        existing = {t['name'] for t in
                    self.api(ctx, 'GET', '/types')['volume_types']}
        wanted = [(name, {'volume_backend_name': name})
                  for name, _d in ctx.info['backends']]
        wanted.append(('multiattach', {'multiattach': '<is> True'}))
        for name, specs in wanted:
            if name not in existing:
                self.api(ctx, 'POST', '/types', {'volume_type': {
                    'name': name, 'extra_specs': specs}})

    # -- the API ------------------------------------------------------------

    @staticmethod
    def api_url(info):
        return 'http://%s:%d/v3/%s' % (info['host'], info['api_port'],
                                       info['project_id'])

    def stop(self, ctx):
        partitions.remove_groups(group_tag(ctx.dir))

    @staticmethod
    def own_group(ctx, name):
        """With several volume services, each runs in a cgroup of its own.

        So that a test can cut one off etcd, the database or RabbitMQ
        (:mod:`devbox.partitions`, set ``box-<state directory's name>``),
        the service is in its group from its start: a cut drops only the
        packets of sockets made inside the group.  None (no group) with
        one volume service, or where no cgroup-v2 hierarchy can be had.
        """
        if not name.startswith('cinder-volume') or ctx.info.get(
                'volume_services', 1) < 2:
            return None
        try:
            return partitions.joiner(partitions.group_dir(
                group_tag(ctx.dir), name))
        except (OSError, subprocess.CalledProcessError) as err:
            print('cinder: %s runs in no cgroup of its own (%s)' % (name, err))
            return None

    def api(self, ctx, method, path, body=None, version='3.0', timeout=10):
        return ctx.http_json(self.api_url(ctx.info) + path, method, body, {
            'OpenStack-API-Version': 'volume %s' % version}, timeout)

    @staticmethod
    def api_answers(ctx):
        try:
            urllib.request.urlopen('http://%s:%d/' % (
                ctx.info['host'], ctx.info['api_port']), timeout=2).close()
        except urllib.error.HTTPError:
            return True  # the versions document answers 300
        except (urllib.error.URLError, OSError):
            return False
        return True

    def service_states(self, ctx):
        """{(binary, host): (state, status)} from the os-services API."""
        return states_of(self.api(ctx, 'GET', '/os-services')['services'])

    def pool_backends(self, ctx):
        """Backends whose driver initialized and reported its capacity.

        A volume service whose driver failed to initialize still shows
        'up' in os-services for a while; only a working driver reports a
        pool to the scheduler.
        """
        pools = self.api(ctx, 'GET', '/scheduler-stats/get_pools')['pools']
        return {p['name'].split('@', 1)[1].split('#', 1)[0] for p in pools
                if '@' in p['name']}

    @staticmethod
    def reported_since_start(ctx, services):
        """Whether each volume process reported after it started.

        A volume service restarted alone is 'up' in os-services, and its
        pools are listed, on its predecessor's last report for
        ``service_down_time``.  Cinder starts reporting once ``init_host``
        is done and the RPC server consumes: only a report after the
        start (a second of slack: the database rounds) says the new
        process serves.
        """
        for name, host in volume_hosts(ctx.info).items():
            record = ctx.proc(name).record or {}
            started = record.get('started')
            if started is None:
                continue
            rows = [s for s in services if s['binary'] == 'cinder-volume'
                    and (host is None or s['host'].startswith(host + '@'))]
            if not rows or not all(
                    s.get('updated_at') and utc_seconds(s['updated_at']) >
                    started + 1 for s in rows):
                return False
        return True

    def _backends_up(self, ctx):
        try:
            services = self.api(ctx, 'GET', '/os-services')['services']
            pools = self.pool_backends(ctx)
        except (urllib.error.URLError, OSError, ValueError):
            return False
        if not self.reported_since_start(ctx, services):
            return False
        states = states_of(services)
        up = {tuple(host.split('@', 1)) for (binary, host), st
              in states.items() if binary == 'cinder-volume' and
              '@' in host and st == ('up', 'enabled')}
        scheduler = any(b == 'cinder-scheduler' and st[0] == 'up'
                        for (b, _h), st in states.items())
        backup = not ctx.info.get('backup') or any(
            b == 'cinder-backup' and st == ('up', 'enabled')
            for (b, _h), st in states.items())
        # Every volume service of every backend, when they have names.
        wanted = volume_hosts(ctx.info).values()
        return scheduler and backup and all(
            n in pools and any(b == n and (h is None or h == host)
                               for host, b in up)
            for n, _d in ctx.info['backends'] for h in wanted)

    # -- status -------------------------------------------------------------

    def status(self, ctx):
        # Asked once for every row: it calls the API.
        try:
            states = self.service_states(ctx) if self.api_answers(ctx) \
                else {}
            pools = self.pool_backends(ctx) if states else set()
        except (urllib.error.URLError, OSError, ValueError):
            states, pools = {}, set()
        self._seen = states, pools
        return super(Cinder, self).status(ctx)

    def detail(self, ctx, name):
        states, pools = self._seen
        if name == 'cinder-api':
            return '%s %s' % (self.api_url(ctx.info),
                              base.answers(bool(states))), bool(states)
        binary = 'cinder-volume' if name.startswith('cinder-volume') else name
        own = volume_hosts(ctx.info).get(name)

        def mine(b, h):
            return b == binary and (not own or h.startswith(own + '@'))

        found = ['%s %s' % (h, '/'.join(st)) for (b, h), st
                 in sorted(states.items()) if mine(b, h)]
        ok = bool(found) and all(st == ('up', 'enabled') for (b, h), st
                                 in states.items() if mine(b, h))
        if binary == 'cinder-volume':
            for backend, _driver in ctx.info['backends']:
                if backend not in pools:
                    ok = False
                    found.append('%s: driver NOT initialized (no pool; see '
                                 '%s.log)' % (backend, name))
        return ', '.join(found) or 'not in os-services', ok

    # -- what up prints -------------------------------------------------------

    @staticmethod
    def client_env(info):
        """The client's variables; with Keystone, none (see openrc)."""
        if info.get('keystone'):
            return []
        return [('OS_AUTH_TYPE', 'noauth'),
                ('CINDER_ENDPOINT', Cinder.api_url(info)),
                ('OS_PROJECT_ID', info['project_id']),
                ('OS_USER_ID', 'admin'),
                ('OS_VOLUME_API_VERSION', keystone.CLIENT_API_VERSION)]

    def _client_prefix(self, ctx, user='admin'):
        """What goes before a client: noauth's variables, or the openrc."""
        if ctx.info.get('keystone'):
            return '. %s &&' % keystone.Keystone.openrc_path(ctx, user)
        return ' '.join('%s=%s' % kv for kv in self.client_env(ctx.info))

    def client_command(self, ctx, args='create 1'):
        return '%s %s %s' % (self._client_prefix(ctx), os.path.join(
            ctx.info['venv'], 'bin', 'cinder'), args)

    def manage_command(self, ctx, args, user='admin'):
        """The operator CLI with *args*, as *user* (admin, or service)."""
        script = os.path.join(ctx.info['venv'], 'bin', 'cinder-forcedetach')
        if not os.path.exists(script):
            script = '%s -m cinder_forcedetach.cmd.manage' % os.path.join(
                ctx.info['venv'], 'bin', 'python')
        return '%s %s %s' % (self._client_prefix(ctx, user), script, args)

    def ready_lines(self, ctx):
        info = ctx.info
        lines = ['  API        %s   (%s, project %s)' % (
            self.api_url(info), 'keystone %s/v3, credentials in %s' % (
                ctx.service('keystone-api').url(info),
                keystone.Keystone.openrc_path(ctx))
            if info.get('keystone') else 'auth_strategy noauth',
            info['project_id'])]
        if info.get('backup'):
            lines.append('  backup     cinder-backup pid %s (POSIX driver, '
                         '%s)' % (ctx.proc('cinder-backup').pid,
                                  self.backup_dir(ctx)))
        if info.get('volume_services', 1) > 1:
            lines.append('  volume     %d services in cluster "%s": %s' % (
                info['volume_services'], CLUSTER, ', '.join(
                    '%s pid %s' % (n, ctx.proc(n).pid)
                    for n in volume_hosts(info))))
        lines += [
            '  backends   %s (a volume type of the same name each; type '
            '"multiattach")' % ', '.join(
                '%s=%s' % (n, d.rsplit('.', 1)[-1])
                for n, d in info['backends']),
            '  config     %s' % self.conf_path(ctx),
            '  logs       %s' % ctx.log_dir]
        return lines

    def commands(self, ctx):
        return [
            'Create a volume:',
            '  ' + self.client_command(ctx, 'create 1'),
            'Force-detach it from every host:',
            '  ' + self.manage_command(ctx, 'volume force-detach VOLUME_ID'),
            'Audit what Cinder and the backends say (on this host; --fix '
            'repairs):',
            '  ' + self.manage_command(
                ctx, '--format json audit --no-nova --config-file %s' %
                self.conf_path(ctx)),
            'Or: eval "$(tools/stack.sh env)" and use cinder / '
            'cinder-forcedetach directly.',
        ]
