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

"""Nova, placement and Neutron for the box (``up --nova``).

Real Nova 34 (``nova-api`` under gunicorn, ``nova-conductor``,
``nova-scheduler``, ``nova-compute``) and placement 16 from the venv,
behind the box's Keystone, on the box's MariaDB and RabbitMQ, with
Glance's images.  The compute service runs Nova's fake virt driver
(:mod:`devbox.nova_compute`): servers exist only in
Nova's database, but every volume call — attachment create and
complete, connector, detach, os-reimage's events — is Nova's own code
talking to the box's Cinder and our drivers.

Neutron 29 is real too (``neutron-api`` under gunicorn, ML2 with VXLAN
tenant networks, the router plugin), with no agent: the ML2 mechanism
driver ``box_fake`` (:mod:`devbox.neutron_box`) binds
every port, so networks, subnets, routers and ports exist and servers get
addresses, but no packet flows.

Standard library only, like :mod:`devbox.stack`.
"""

import os
import shutil
import urllib.error

from devbox import boxutil

#: Nova's processes, in start order (after cinder-api).
NOVA_SERVICES = ('nova-api', 'nova-conductor', 'nova-scheduler',
                 'nova-compute')
#: Processes started before Cinder (Nova's services need them).
NOVA_BEFORE_CINDER = ('placement-api', 'neutron-api')
#: Databases of Nova and placement, each with its own user.
NOVA_DATABASES = ('nova_api', 'nova_cell0', 'nova', 'placement', 'neutron')
#: Keystone users of the Nova side, besides Cinder's and Glance's.
NOVA_USERS = ('nova', 'placement', 'neutron')
#: The compute service's host name, the only hypervisor.
COMPUTE_HOST = 'box-compute'
#: Flavors the box makes: (name, id, vcpus, MiB, GiB of root disk).
FLAVORS = (('m1.box', '42', 1, 128, 1), ('m1.box.alt', '84', 1, 192, 1))
#: The shared network (and its subnet) the box makes.
NETWORK, NETWORK_CIDR = 'box-net', '10.99.0.0/24'
#: The image the box uploads for bootable volumes.
IMAGE = 'box-image'


class NovaParts(object):
    """Mixed into the box's ``Stack``: Nova, placement, Neutron."""

    # -- URLs -----------------------------------------------------------------

    def placement_url(self, info=None):
        info = info or self.info
        return 'http://%s:%d' % (info['host'], info['placement_port'])

    def nova_url(self, info=None):
        info = info or self.info
        return 'http://%s:%d' % (info['host'], info['nova_port'])

    def neutron_url(self, info=None):
        info = info or self.info
        return 'http://%s:%d' % (info['host'], info['neutron_port'])

    def nova_catalog(self):
        """(service name, type, URL) Keystone lists for the Nova side."""
        return [('nova', 'compute', self.nova_url() + '/v2.1'),
                ('placement', 'placement', self.placement_url()),
                ('neutron', 'network', self.neutron_url())]

    def _service_auth(self, user):
        """A client section's password-auth options as *user*."""
        section = dict(self.authtoken_section(user))
        del section['www_authenticate_uri']
        return section

    # -- placement ----------------------------------------------------------

    def _write_placement_conf(self):
        d = os.path.join(self.dir, 'placement')
        os.makedirs(d, exist_ok=True)
        conf = boxutil.conf({
            'DEFAULT': {'debug': str(self.s.debug),
                        'log_file': os.path.join(self.log_dir,
                                                 'placement-api.log')},
            'placement_database': {
                'connection': self.service_database_url('placement', d)},
            'api': {'auth_strategy': 'keystone'},
            'keystone_authtoken': self.authtoken_section('placement'),
        })
        boxutil.write_conf(os.path.join(d, 'placement.conf'), conf)
        return d, os.path.join(d, 'placement.conf')

    def _start_placement(self, proc):
        if proc.alive():
            return
        conf_dir, conf_path = self._write_placement_conf()
        self._sync_then_serve(
            proc, 'placement-manage', ['db', 'sync'], conf_path,
            'placement.wsgi.api:application', self.info['placement_port'],
            {'OS_PLACEMENT_CONFIG_DIR': conf_dir},
            lambda: boxutil.http_ok(self.placement_url()))

    # -- neutron ------------------------------------------------------------

    def _write_neutron_conf(self):
        info, d = self.info, os.path.join(self.dir, 'neutron')
        paste = os.path.join(info['venv'], 'etc', 'neutron', 'api-paste.ini')
        if not os.path.exists(paste):
            raise boxutil.StackError(
                '%s not found: is neutron installed in %s? '
                '(tools/install-deps.sh installs it)' % (paste, info['venv']))
        for sub in ('state', 'locks'):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        shutil.copy(paste, os.path.join(d, 'api-paste.ini'))
        conf = boxutil.conf({
            'DEFAULT': {
                'debug': str(self.s.debug),
                'log_file': os.path.join(self.log_dir, 'neutron-api.log'),
                'state_path': os.path.join(d, 'state'),
                'api_paste_config': os.path.join(d, 'api-paste.ini'),
                'transport_url': self.transport_url(),
                'auth_strategy': 'keystone',
                'core_plugin': 'ml2',
                'service_plugins': 'router',
                # No agent runs: nothing tells Nova a port went up.
                'notify_nova_on_port_status_changes': 'False',
                'notify_nova_on_port_data_changes': 'False',
            },
            'database': {'connection': self.service_database_url(
                'neutron', d)},
            'keystone_authtoken': self.authtoken_section('neutron'),
            'oslo_concurrency': {'lock_path': os.path.join(d, 'locks')},
            'ml2': {'type_drivers': 'flat,vxlan',
                    'tenant_network_types': 'vxlan',
                    'mechanism_drivers': 'box_fake',
                    'extension_drivers': 'port_security'},
            'ml2_type_vxlan': {'vni_ranges': '1:1000'},
            'securitygroup': {'firewall_driver': 'noop'},
        })
        boxutil.write_conf(os.path.join(d, 'neutron.conf'), conf)
        return d, os.path.join(d, 'neutron.conf')

    def _start_neutron(self, proc):
        if proc.alive():
            return
        conf_dir, conf_path = self._write_neutron_conf()
        self._sync_then_serve(
            proc, 'neutron-db-manage', ['upgrade', 'heads'], conf_path,
            'devbox.neutron_wsgi:application',
            self.info['neutron_port'],
            {'OS_NEUTRON_CONFIG_DIR': conf_dir,
             'OS_NEUTRON_CONFIG_FILES': os.path.basename(conf_path)},
            lambda: boxutil.http_ok(self.neutron_url()))
        # Neutron builds its policy enforcer on the first request and
        # publishes it before its rules are registered: a second thread
        # in that window would be refused.  One request first.
        self.http_json(self.neutron_url() + '/v2.0/networks', 'GET')

    # -- nova -------------------------------------------------------------

    def nova_dir(self):
        return os.path.join(self.dir, 'nova')

    def nova_conf_path(self):
        return os.path.join(self.nova_dir(), 'nova.conf')

    def _write_nova_conf(self):
        info, d = self.info, self.nova_dir()
        venv = info['venv']
        paste = os.path.join(venv, 'etc', 'nova', 'api-paste.ini')
        if not os.path.exists(paste):
            raise boxutil.StackError(
                '%s not found: is nova installed in %s? '
                '(tools/install-deps.sh installs it)' % (paste, venv))
        for sub in ('state', 'instances', 'locks'):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        shutil.copy(paste, os.path.join(d, 'api-paste.ini'))
        helper = '%s --config-file %s' % (
            os.path.join(venv, 'bin', 'privsep-helper'),
            self.nova_conf_path())
        nova_auth = self._service_auth('nova')
        conf = boxutil.conf({
            'DEFAULT': {
                'debug': str(self.s.debug),
                'log_dir': self.log_dir,
                'state_path': os.path.join(d, 'state'),
                'instances_path': os.path.join(d, 'instances'),
                'host': COMPUTE_HOST,
                'my_ip': info['host'],
                'my_block_storage_ip': info['host'],
                'transport_url': self.transport_url(),
                'compute_driver': 'box_fake.BoxFakeDriver',
                # One compute host: a resize stays on it (as devstack).
                'allow_resize_to_same_host': 'True',
                # One request at a time per service keeps the box small.
                'osapi_compute_workers': '1',
                'metadata_workers': '1',
            },
            'wsgi': {'api_paste_config': os.path.join(d, 'api-paste.ini')},
            'api': {'auth_strategy': 'keystone'},
            'api_database': {'connection': self.service_database_url(
                'nova_api', d)},
            'database': {'connection': self.service_database_url('nova', d)},
            'keystone_authtoken': dict(self.authtoken_section('nova'),
                                       service_token_roles_required='True'),
            'placement': nova_auth,
            'glance': dict(nova_auth),
            'cinder': dict(nova_auth, os_region_name=boxutil.REGION),
            'neutron': dict(nova_auth, endpoint_override=self.neutron_url()),
            # What a cloud does: Nova's calls to Cinder carry a service
            # token, so Cinder tells Nova's own detaches from a user's.
            'service_user': dict(nova_auth, send_service_user_token='True'),
            'scheduler': {'workers': '1',
                          'discover_hosts_in_cells_interval': '10'},
            'conductor': {'workers': '1'},
            'oslo_concurrency': {'lock_path': os.path.join(d, 'locks')},
            'privsep': {'helper_command': helper},
            'privsep_osbrick': {'helper_command': helper},
            'vnc': {'enabled': 'False'},
            'spice': {'enabled': 'False'},
            'serial_console': {'enabled': 'False'},
            # A fake hypervisor: no images are copied, no resources used.
            'compute': {'cpu_allocation_ratio': '16.0'},
        })
        boxutil.write_conf(self.nova_conf_path(), conf)

    def _nova_manage(self, *args, ok=(0,)):
        self._manage('nova-manage', ['--config-file', self.nova_conf_path()]
                     + list(args), cwd=self.nova_dir(), ok=ok)

    def _nova_db_setup(self):
        """Nova's API and cell databases, cell0 and cell1 (idempotent)."""
        self._nova_manage('api_db', 'sync')
        self._nova_manage('cell_v2', 'map_cell0', '--database_connection',
                          self.service_database_url('nova_cell0',
                                                    self.nova_dir()))
        self._nova_manage('db', 'sync')
        # 2: cell1 exists already (a second up).
        self._nova_manage('cell_v2', 'create_cell', '--name', 'cell1',
                          ok=(0, 2))

    def _start_nova(self, procs):
        self._write_nova_conf()
        self._nova_db_setup()
        # nova-api's own file names its log (gunicorn's argv would).
        api_conf = os.path.join(self.nova_dir(), 'nova-api.conf')
        boxutil.write_conf(api_conf, boxutil.conf({'DEFAULT': {
            'log_file': os.path.join(self.log_dir, 'nova-api.log')}}))
        env = {'OS_NOVA_CONFIG_DIR': self.nova_dir(),
               'OS_NOVA_CONFIG_FILES': 'api-paste.ini;nova.conf;'
                                       'nova-api.conf'}
        api = procs['nova-api']
        if not api.alive():
            self._gunicorn(api, 'devbox.nova_wsgi:'
                           'application', self.info['nova_port'], env,
                           self.nova_dir())
        conf = ['--config-file', self.nova_conf_path()]
        python = os.path.join(self.info['venv'], 'bin', 'python')
        for name in ('nova-conductor', 'nova-scheduler'):
            if not procs[name].alive():
                procs[name].start([self._venv_bin(name)] + conf,
                                  cwd=self.nova_dir())
        if not procs['nova-compute'].alive():
            procs['nova-compute'].start(
                [python, '-m', 'devbox.nova_compute'] +
                conf + ['--log-file', 'nova-compute.log'],
                cwd=self.nova_dir())
        boxutil.wait_for(lambda: boxutil.http_ok(self.nova_url() + '/v2.1/'),
                         self.s.timeout, 'nova-api', api)
        boxutil.wait_for(lambda: self._compute_up(procs), self.s.timeout,
                         'nova-compute to be up')
        # The scheduler maps new hosts every 10 s; do it now.
        self._nova_manage('cell_v2', 'discover_hosts')
        boxutil.wait_for(self._hypervisor_listed, self.s.timeout,
                         'the compute host in os-hypervisors')
        self._ensure_flavors()
        self._ensure_image()
        self._ensure_network()

    def nova(self, method, path, body=None, version='2.1'):
        """A call to Nova's API as the box's admin."""
        return self.http_json(self.nova_url() + '/v2.1' + path, method,
                              body, {'OpenStack-API-Version':
                                     'compute %s' % version})

    def nova_services(self):
        """{binary: state} of Nova's services, {} when the API is down."""
        try:
            services = self.nova('GET', '/os-services')['services']
        except (urllib.error.URLError, OSError, ValueError):
            return {}
        return {s['binary']: (s['state'], s['status']) for s in services}

    def _compute_up(self, procs):
        for name in NOVA_SERVICES:
            if not procs[name].alive():
                raise boxutil.StackError('%s exited; see %s and %s' % (
                    name, procs[name].out_path,
                    os.path.join(self.log_dir, name + '.log')))
        states = self.nova_services()
        return all(states.get(b) == ('up', 'enabled')
                   for b in NOVA_SERVICES[1:])

    def _hypervisor_listed(self):
        found = self.nova('GET', '/os-hypervisors')['hypervisors']
        return any(h['hypervisor_hostname'] == COMPUTE_HOST for h in found)

    def _ensure_flavors(self):
        have = {f['name'] for f in self.nova('GET', '/flavors')['flavors']}
        for name, flavor_id, vcpus, ram, disk in FLAVORS:
            if name not in have:
                self.nova('POST', '/flavors', {'flavor': {
                    'name': name, 'id': flavor_id, 'vcpus': vcpus,
                    'ram': ram, 'disk': disk}})

    def _ensure_network(self):
        """A shared tenant network with a subnet, for every project."""
        url = self.neutron_url() + '/v2.0'
        if self.http_json(url + '/networks?name=' + NETWORK,
                          'GET')['networks']:
            return
        net = self.http_json(url + '/networks', 'POST', {'network': {
            'name': NETWORK, 'shared': True}})['network']
        self.http_json(url + '/subnets', 'POST', {'subnet': {
            'name': NETWORK, 'network_id': net['id'], 'ip_version': 4,
            'cidr': NETWORK_CIDR}})

    def _ensure_image(self):
        """A small raw image to make bootable volumes from."""
        found = self.http_json(self.glance_url() + '/v2/images?name=' +
                               IMAGE, 'GET')['images']
        if not found:
            # The fake driver never reads it: a marker, then zeros.
            data = b'cinder-forcedetach box image\n'.ljust(1 << 20, b'\0')
            self.glance_upload(IMAGE, data)

    def nova_status_detail(self, name, info):
        """(detail, healthy) of a Nova-side process's status line, or None."""
        if name in NOVA_SERVICES[1:]:
            state = self.nova_services().get(name)
            return ('%s %s' % (COMPUTE_HOST if name == 'nova-compute' else
                               'nova', '/'.join(state) if state else
                               'not in os-services'),
                    state == ('up', 'enabled'))
        urls = {'placement-api': self.placement_url(info),
                'nova-api': self.nova_url(info) + '/v2.1/',
                'neutron-api': self.neutron_url(info)}
        if name not in urls:
            return None
        answers = boxutil.http_ok(urls[name])
        return ('%s %s' % (urls[name], 'answers' if answers else
                           'NOT answering'), answers)

    def nova_ready_lines(self, procs):
        return [
            '  placement  %s, pid %s' % (self.placement_url(),
                                         procs['placement-api'].pid),
            '  nova       %s/v2.1, pids %s (compute host %s, Nova\'s fake '
            'virt driver; flavors %s)' % (
                self.nova_url(), ', '.join(
                    '%s %s' % (n, procs[n].pid) for n in NOVA_SERVICES),
                COMPUTE_HOST, ', '.join(f[0] for f in FLAVORS)),
            '  neutron    %s, pid %s (ML2; no agents: the box_fake mechanism '
            'driver binds every port)' % (self.neutron_url(),
                                          procs['neutron-api'].pid)]

    def nova_commands(self):
        prefix = '. %s && %s' % (self.openrc_path(), os.path.join(
            self.info['venv'], 'bin', 'nova'))
        return [
            'Create a bootable volume from the box\'s image:',
            '  %s create --image %s --name box-boot 1' % (
                self.client_command('').rstrip(), IMAGE),
            'Boot a server from it (Nova\'s fake driver; no network):',
            '  %s boot --flavor %s --nic none --block-device source=volume,'
            'id=VOLUME_ID,dest=volume,bootindex=0 --poll box-server' % (
                prefix, FLAVORS[0][0]),
            'Its attachments:',
            '  %s volume-attachments box-server' % prefix,
            'Force-detach the volume while Nova holds it (Cinder lets only '
            'a service do that: the service user\'s credentials and '
            '--service-token):',
            '  ' + self.manage_command(
                '--service-token volume force-detach VOLUME_ID', 'service'),
            'Then a reboot drops the server\'s stale attachment:',
            '  %s reboot box-server' % prefix]
