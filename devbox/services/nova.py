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

"""Nova (``--nova``): real Nova on the box's Cinder and our drivers.

Nova 34 (``nova-api`` under gunicorn, ``nova-conductor``,
``nova-scheduler``, ``nova-compute``) from the venv, behind the box's
Keystone, on its MariaDB and RabbitMQ, with Glance's images.  The compute
service runs Nova's fake virt driver (:mod:`devbox.nova_compute`): servers
exist only in Nova's database, but every volume call (attachment create
and complete, connector, detach, os-reimage's events) is Nova's own code
talking to the box's Cinder.  With ``--virt libvirt`` it runs Nova's
libvirt driver instead (:mod:`devbox.nova_libvirt`) on the box's libvirtd
(:mod:`devbox.services.libvirt`): qemu guests booted from a kernel and
initramfs the box builds (:mod:`devbox.guest_image`), whose init writes a
counter to every disk.  Two flavors, an image, the hosts mapped.

``--computes 2`` adds a second compute host (``box-compute-2``: its own
``nova-compute-2`` process, ``nova-compute-2.conf`` over ``nova.conf``,
state and instance directories, and with libvirt its own libvirtd), for
an evacuation to have somewhere to go.
"""

import os
import shutil
import urllib.error

from devbox import boxutil
from devbox import computes
from devbox import guest_image
from devbox.services import base
from devbox.services import ceph
from devbox.services import libvirt

#: Nova's control processes, in start order; the computes' come after.
CONTROL_PROCESSES = ('nova-api', 'nova-conductor', 'nova-scheduler')
#: The first compute service's host name (of a one-compute box: the only).
COMPUTE_HOST = computes.COMPUTE_HOST
#: Flavors the box makes: (name, id, vcpus, MiB, GiB of root disk).
FLAVORS = (('m1.box', '42', 1, 128, 1), ('m1.box.alt', '84', 1, 192, 1))
#: The image the box uploads for bootable volumes.
IMAGE = 'box-image'
#: The initiator name prefix of the box's compute hosts.
IQN_PREFIX = 'iqn.2010-10.org.openstack.box:'


def initiator_name(host):
    """The box's initiator name for compute *host* (either virt driver)."""
    return IQN_PREFIX + host.lower()


def compute_process(host):
    """The nova-compute process of *host*: ``nova-compute``, ``-2``."""
    return 'nova-compute' + computes.suffix(host)


class Nova(base.Service):

    name = 'nova'
    requires = ('cinder', 'placement-api', 'neutron-api', 'glance-api',
                'keystone-api', 'rabbitmq', 'mariadb', 'libvirtd')
    databases = {'nova_api': 'nova_api_db_password',
                 'nova_cell0': 'nova_cell0_db_password',
                 'nova': 'nova_db_password'}
    keystone_users = ('nova',)

    def enabled(self, info):
        return bool(info.get('nova'))

    def processes(self, info):
        return list(CONTROL_PROCESSES) + [
            compute_process(h) for h in computes.compute_hosts(info)]

    def known_processes(self):
        return self.processes({'computes': computes.MAX_COMPUTES})

    def ports(self, info):
        return {'nova-api': [info['nova_port']]}

    def catalog(self, ctx):
        return [('nova', 'compute', self.url(ctx.info) + '/v2.1')]

    @staticmethod
    def url(info):
        return base.url(info, 'nova_port')

    @staticmethod
    def directory(ctx):
        return os.path.join(ctx.dir, 'nova')

    def conf_path(self, ctx):
        return os.path.join(self.directory(ctx), 'nova.conf')

    def compute_conf_args(self, ctx, host=COMPUTE_HOST):
        """``--config-file`` arguments of *host*'s nova-compute."""
        args = ['--config-file', self.conf_path(ctx)]
        if host != COMPUTE_HOST:
            args += ['--config-file', os.path.join(
                self.directory(ctx), compute_process(host) + '.conf')]
        return args

    def _write_compute_confs(self, ctx):
        """Each further compute host's own file, over ``nova.conf``.

        Its host name, state directory (Nova keeps the node's UUID there),
        instances, locks and libvirtd.
        """
        d = self.directory(ctx)
        for host in computes.compute_hosts(ctx.info)[1:]:
            suffix = computes.suffix(host)
            for sub in ('state', 'instances', 'locks'):
                os.makedirs(os.path.join(d, sub + suffix), exist_ok=True)
            conf = {'DEFAULT': {
                'host': host,
                'state_path': os.path.join(d, 'state' + suffix),
                'instances_path': os.path.join(d, 'instances' + suffix)},
                'oslo_concurrency': {
                    'lock_path': os.path.join(d, 'locks' + suffix)}}
            if libvirt.uses_libvirt(ctx.info):
                conf['libvirt'] = {'connection_uri': ctx.service(
                    'libvirtd').uri(ctx, host)}
            boxutil.write_conf(os.path.join(
                d, compute_process(host) + '.conf'), boxutil.conf(conf))

    def write_conf(self, ctx):
        info, d = ctx.info, self.directory(ctx)
        venv = info['venv']
        paste = os.path.join(venv, 'etc', 'nova', 'api-paste.ini')
        if not os.path.exists(paste):
            raise base.StackError(
                '%s not found: is nova installed in %s? '
                '(tools/install-deps.sh installs it)' % (paste, venv))
        for sub in ('state', 'instances', 'locks'):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        shutil.copy(paste, os.path.join(d, 'api-paste.ini'))
        helper = '%s --config-file %s' % (
            os.path.join(venv, 'bin', 'privsep-helper'), self.conf_path(ctx))
        keystone = ctx.service('keystone-api')
        nova_auth = keystone.service_auth(ctx, 'nova')
        conf = boxutil.conf({
            'DEFAULT': {
                'debug': str(ctx.s.debug),
                # down: the compute's graceful stop would wait 160 s.
                'graceful_shutdown_timeout': '10',
                'log_dir': ctx.log_dir,
                'state_path': os.path.join(d, 'state'),
                'instances_path': os.path.join(d, 'instances'),
                'host': COMPUTE_HOST,
                'my_ip': info['host'],
                'my_block_storage_ip': info['host'],
                'transport_url': ctx.service('rabbitmq').transport_url(ctx),
                'compute_driver': 'box_fake.BoxFakeDriver',
                # One compute host: a resize stays on it (as devstack).
                'allow_resize_to_same_host': 'True',
                # One request at a time per service keeps the box small.
                'osapi_compute_workers': '1',
                'metadata_workers': '1',
            },
            'wsgi': {'api_paste_config': os.path.join(d, 'api-paste.ini')},
            'api': {'auth_strategy': 'keystone'},
            'api_database': {'connection': ctx.database_url('nova_api', d)},
            'database': {'connection': ctx.database_url('nova', d)},
            'keystone_authtoken': dict(keystone.authtoken_section(ctx, 'nova'),
                                       service_token_roles_required='True'),
            'placement': nova_auth,
            'glance': dict(nova_auth),
            'cinder': dict(nova_auth, os_region_name=boxutil.REGION),
            'neutron': dict(nova_auth, endpoint_override=ctx.service(
                'neutron-api').url(info)),
            # What a cloud does: Nova's calls to Cinder carry a service
            # token, so Cinder tells Nova's own detaches from a user's.
            'service_user': dict(nova_auth, send_service_user_token='True'),
            'scheduler': {'workers': '1',
                          'discover_hosts_in_cells_interval': '10'},
            'conductor': {'workers': '1'},
            'oslo_concurrency': {'lock_path': os.path.join(d, 'locks')},
            'privsep': {'helper_command': helper},
            'privsep_osbrick': {'helper_command': helper},
            # The libvirt driver's own (files of the instance directory).
            'nova_sys_admin': {'helper_command': helper},
            'vnc': {'enabled': 'False'},
            'spice': {'enabled': 'False'},
            'serial_console': {'enabled': 'False'},
            # A fake hypervisor: no images are copied, no resources used.
            'compute': {'cpu_allocation_ratio': '16.0'},
        })
        if libvirt.uses_libvirt(info):
            conf['DEFAULT']['compute_driver'] = 'box_libvirt.BoxLibvirtDriver'
            conf['libvirt'] = {
                # TCG: KVM is nested on these machines and hangs guests.
                'virt_type': 'qemu',
                'cpu_mode': 'none',
                'connection_uri': ctx.service('libvirtd').uri(ctx),
                # i440fx: hot-plugged virtio disks need no PCIe ports.
                'hw_machine_type': 'x86_64=pc',
            }
        boxutil.write_conf(self.conf_path(ctx), conf)
        self._write_compute_confs(ctx)
        # nova-api's own file names its log (gunicorn's argv would).
        boxutil.write_conf(
            os.path.join(d, 'nova-api.conf'), boxutil.conf({'DEFAULT': {
                'log_file': os.path.join(ctx.log_dir, 'nova-api.log')}}))

    def _manage(self, ctx, *args, ok=(0,)):
        ctx.manage('nova-manage', ['--config-file', self.conf_path(ctx)] +
                   list(args), cwd=self.directory(ctx), ok=ok)

    def _db_setup(self, ctx):
        """Nova's API and cell databases, cell0 and cell1 (idempotent)."""
        self._manage(ctx, 'api_db', 'sync')
        self._manage(ctx, 'cell_v2', 'map_cell0', '--database_connection',
                     ctx.database_url('nova_cell0', self.directory(ctx)))
        self._manage(ctx, 'db', 'sync')
        # 2: cell1 exists already (a second up).
        self._manage(ctx, 'cell_v2', 'create_cell', '--name', 'cell1',
                     ok=(0, 2))

    def start(self, ctx):
        self.write_conf(ctx)
        self._db_setup(ctx)
        d = self.directory(ctx)
        api = ctx.proc('nova-api')
        if not api.alive():
            env = {'OS_NOVA_CONFIG_DIR': d,
                   'OS_NOVA_CONFIG_FILES': 'api-paste.ini;nova.conf;'
                                           'nova-api.conf'}
            ctx.gunicorn(api, 'devbox.nova_wsgi:application',
                         ctx.info['nova_port'], env, d)
        conf = ['--config-file', self.conf_path(ctx)]
        for name in ('nova-conductor', 'nova-scheduler'):
            if not ctx.proc(name).alive():
                ctx.proc(name).start([ctx.venv_bin(name)] + conf, cwd=d)
        python = os.path.join(ctx.info['venv'], 'bin', 'python')
        extra = ['--libvirt'] if libvirt.uses_libvirt(ctx.info) else []
        starting = [p for p in map(ctx.proc, map(
            compute_process, computes.compute_hosts(ctx.info)))
            if not p.alive()]
        if starting and extra:
            self._ceph_secret(ctx)
        for proc in starting:
            host = computes.host_of(proc.name, 'nova-compute')
            proc.start([python, '-m', 'devbox.nova_compute'] +
                       self.compute_conf_args(ctx, host) +
                       ['--log-file', proc.name + '.log'] + extra, cwd=d)
        boxutil.wait_for(lambda: boxutil.http_ok(
            self.url(ctx.info) + '/v2.1/'), ctx.s.timeout, 'nova-api', api)
        boxutil.wait_for(lambda: self.ready(ctx), ctx.s.timeout,
                         'nova-compute to be up')
        # A compute is up in os-services before its node exists: map the
        # hosts once every node does (the scheduler would, within 10 s),
        # and be done once placement offers each of them: a boot before
        # that finds no valid host.
        boxutil.wait_for(lambda: self._hypervisor_listed(ctx), ctx.s.timeout,
                         'the compute hosts in os-hypervisors')
        self._manage(ctx, 'cell_v2', 'discover_hosts')
        boxutil.wait_for(lambda: self._offered(ctx), ctx.s.timeout,
                         'each compute host offered by placement')
        self._ensure_flavors(ctx)
        self._ensure_image(ctx)

    def call(self, ctx, method, path, body=None, version='2.1'):
        """A call to Nova's API as the box's admin."""
        return ctx.http_json(self.url(ctx.info) + '/v2.1' + path, method,
                             body, {'OpenStack-API-Version':
                                    'compute %s' % version})

    def service_states(self, ctx):
        """{process: (state, status)} of Nova's services, {} if API down.

        The process of each service: its binary, or for a compute the
        process of its host (:func:`compute_process`).  A compute forced
        down has the state ``forced_down``.
        """
        try:
            services = self.call(ctx, 'GET', '/os-services',
                                 version='2.11')['services']
        except (urllib.error.URLError, OSError, ValueError):
            return {}
        return {compute_process(s['host']) if s['binary'] == 'nova-compute'
                else s['binary']: ('forced_down' if s.get('forced_down')
                                   else s['state'], s['status'])
                for s in services}

    def ready(self, ctx):
        """Every Nova process alive, and up in os-services.

        A compute an operator (or a test) disabled is ready once up; one
        forced down (an evacuation's source) once alive: Nova's
        procedure restarts it forced down, so that it cleans what the
        evacuation left, before the operator lifts that.
        """
        names = self.processes(ctx.info)
        for name in names:
            proc = ctx.proc(name)
            if not proc.alive():
                raise base.StackError('%s exited; see %s and %s' % (
                    name, proc.out_path,
                    os.path.join(ctx.log_dir, name + '.log')))
        states = self.service_states(ctx)
        return all(self._service_ready(n, states.get(n)) for n in names[1:])

    @staticmethod
    def _service_ready(name, state):
        """Whether process *name*'s ``(state, status)`` is a ready one."""
        if not state:
            return False
        if computes.host_of(name, 'nova-compute'):
            return state[0] in ('up', 'forced_down')
        return state == ('up', 'enabled')

    def _hypervisor_listed(self, ctx):
        # Libvirt names its node after its hostname: look for the service.
        found = self.call(ctx, 'GET', '/os-hypervisors/detail')['hypervisors']
        return set(computes.compute_hosts(ctx.info)) <= {
            h['service']['host'] for h in found}

    #: The least a server asks of a host, as placement is asked it.
    OFFER_QUERY = '/allocation_candidates?resources=VCPU:1,MEMORY_MB:64'

    def _offered(self, ctx):
        """Whether placement offers every compute host (its inventory in).

        Disabled or not: a box brought up again may hold a host a test
        disabled, which the scheduler then filters out on purpose.
        """
        placement = ctx.service('placement-api').url(ctx.info)
        answer = ctx.http_json(placement + self.OFFER_QUERY, 'GET', None,
                               {'OpenStack-API-Version': 'placement 1.22'})
        providers = ctx.http_json(placement + '/resource_providers', 'GET')
        offered = {p['name'] for p in providers['resource_providers']
                   if p['uuid'] in answer['provider_summaries']}
        return set(computes.compute_hosts(ctx.info)) <= offered

    def _ensure_flavors(self, ctx):
        have = {f['name'] for f in self.call(ctx, 'GET',
                                             '/flavors')['flavors']}
        for name, flavor_id, vcpus, ram, disk in FLAVORS:
            if name not in have:
                self.call(ctx, 'POST', '/flavors', {'flavor': {
                    'name': name, 'id': flavor_id, 'vcpus': vcpus,
                    'ram': ram, 'disk': disk}})

    @staticmethod
    def image_id(ctx):
        """The id of the box's image (:data:`IMAGE`), or None."""
        found = ctx.http_json(ctx.service('glance-api').url(ctx.info) +
                              '/v2/images?name=' + IMAGE, 'GET')['images']
        return found[0]['id'] if found else None

    def _ensure_image(self, ctx):
        """A small raw image to make bootable volumes from.

        Public, as devstack's cirros: a project tempest makes boots it too.
        """
        if self.image_id(ctx):
            return
        glance = ctx.service('glance-api')
        # A marker, then zeros: the fake driver never reads it; a libvirt
        # guest writes its records over it (its kernel is another image).
        data = b'cinder-forcedetach box image\n'.ljust(1 << 20, b'\0')
        properties = {}
        if libvirt.uses_libvirt(ctx.info):
            # A guest qemu boots from its kernel and initramfs (direct
            # kernel boot); its init writes a counter to every disk.
            kernel, initramfs = guest_image.build(
                os.path.join(self.directory(ctx), 'guest'))
            ids = {}
            for key, path, fmt in (('kernel_id', kernel, 'aki'),
                                   ('ramdisk_id', initramfs, 'ari')):
                with open(path, 'rb') as f:
                    ids[key] = glance.upload(
                        ctx, '%s-%s' % (IMAGE, fmt), f.read(),
                        disk_format=fmt, container_format=fmt,
                        visibility='public')
            properties = dict(ids, os_command_line=guest_image.cmdline(None))
        glance.upload(ctx, IMAGE, data, properties=properties,
                      visibility='public')

    def _ceph_secret(self, ctx):
        """The libvirt secret of Cinder's Ceph user (RBD backends)."""
        if ceph.uses_ceph(ctx.info):
            settings = ctx.service('ceph').settings(ctx)
            ctx.service('libvirtd').ensure_ceph_secret(
                ctx, settings['CEPH_USER'], settings['CEPH_KEYRING'])

    def detail(self, ctx, name):
        if name == 'nova-api':
            ok = boxutil.http_ok(self.url(ctx.info) + '/v2.1/')
            return '%s/v2.1/ %s' % (self.url(ctx.info), base.answers(ok)), ok
        state = self.service_states(ctx).get(name)
        return ('%s %s' % (computes.host_of(name, 'nova-compute') or 'nova',
                           '/'.join(state) if state else
                           'not in os-services'),
                self._service_ready(name, state))

    def ready_lines(self, ctx):
        return ['  nova       %s/v2.1, pids %s (compute hosts %s, %s; '
                'flavors %s)' % (
                    self.url(ctx.info), ', '.join(
                        '%s %s' % (n, ctx.proc(n).pid)
                        for n in self.processes(ctx.info)),
                    ', '.join(computes.compute_hosts(ctx.info)),
                    self.virt_name(ctx.info),
                    ', '.join(f[0] for f in FLAVORS))]

    def virt_name(self, info):
        return ("Nova's libvirt driver, qemu TCG guests"
                if libvirt.uses_libvirt(info) else "Nova's fake virt driver")

    def commands(self, ctx):
        cinder = ctx.service('cinder')
        keystone = ctx.service('keystone-api')
        prefix = '. %s && %s' % (keystone.openrc_path(ctx), os.path.join(
            ctx.info['venv'], 'bin', 'nova'))
        lines = [
            'Create a bootable volume from the box\'s image:',
            '  %s create --image %s --name box-boot 1' % (
                cinder.client_command(ctx, '').rstrip(), IMAGE),
            'Boot a server from it (%s; no network):' % self.virt_name(
                ctx.info),
            '  %s boot --flavor %s --nic none --block-device source=volume,'
            'id=VOLUME_ID,dest=volume,bootindex=0 --poll box-server' % (
                prefix, FLAVORS[0][0]),
            'Its attachments:',
            '  %s volume-attachments box-server' % prefix]
        if libvirt.uses_libvirt(ctx.info):
            lines += [
                'What the guest writes (a line per write to each disk):',
                '  tail -f %s' % os.path.join(
                    self.directory(ctx), 'instances', 'SERVER_ID',
                    'console.log')]
        return lines + [
            'Force-detach the volume while Nova holds it (Cinder lets only '
            'a service do that: the service user\'s credentials and '
            '--service-token):',
            '  ' + cinder.manage_command(
                ctx, '--service-token volume force-detach VOLUME_ID',
                'service'),
            'Then a reboot drops the server\'s stale attachment:',
            '  %s reboot box-server' % prefix]
