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

"""Neutron (``--nova``): networks, subnets and ports for Nova's servers.

PyPI neutron under gunicorn (``neutron-api``), ML2 with VXLAN tenant
networks and the router plugin, and no agent: the ML2 mechanism driver
``box_fake`` (:mod:`devbox.neutron_box`) binds every port, so servers get
addresses but no packet flows.  A shared network the box makes.
"""

import os
import shutil

from devbox import boxutil
from devbox.services import base

#: The shared network (and its subnet) the box makes.
NETWORK, NETWORK_CIDR = 'box-net', '10.99.0.0/24'


class Neutron(base.WsgiService):

    name = 'neutron-api'
    port_key = 'neutron_port'
    requires = ('rabbitmq', 'keystone-api', 'mariadb')
    databases = {'neutron': 'neutron_db_password'}
    keystone_users = ('neutron',)

    def enabled(self, info):
        return bool(info.get('nova'))

    def catalog(self, ctx):
        return [('neutron', 'network', self.url(ctx.info))]

    def write_conf(self, ctx):
        info, d = ctx.info, os.path.join(ctx.dir, 'neutron')
        paste = os.path.join(info['venv'], 'etc', 'neutron', 'api-paste.ini')
        if not os.path.exists(paste):
            raise base.StackError(
                '%s not found: is neutron installed in %s? '
                '(tools/install-deps.sh installs it)' % (paste, info['venv']))
        for sub in ('state', 'locks'):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        shutil.copy(paste, os.path.join(d, 'api-paste.ini'))
        conf = boxutil.conf({
            'DEFAULT': {
                'debug': str(ctx.s.debug),
                'log_file': os.path.join(ctx.log_dir, 'neutron-api.log'),
                'state_path': os.path.join(d, 'state'),
                'api_paste_config': os.path.join(d, 'api-paste.ini'),
                'transport_url': ctx.service('rabbitmq').transport_url(ctx),
                'auth_strategy': 'keystone',
                'core_plugin': 'ml2',
                'service_plugins': 'router',
                # No agent runs: nothing tells Nova a port went up.
                'notify_nova_on_port_status_changes': 'False',
                'notify_nova_on_port_data_changes': 'False',
            },
            'database': {'connection': ctx.database_url('neutron', d)},
            'keystone_authtoken': ctx.service(
                'keystone-api').authtoken_section(ctx, 'neutron'),
            'oslo_concurrency': {'lock_path': os.path.join(d, 'locks')},
            'ml2': {'type_drivers': 'flat,vxlan',
                    'tenant_network_types': 'vxlan',
                    'mechanism_drivers': 'box_fake',
                    'extension_drivers': 'port_security'},
            'ml2_type_vxlan': {'vni_ranges': '1:1000'},
            'securitygroup': {'firewall_driver': 'noop'},
        })
        path = os.path.join(d, 'neutron.conf')
        boxutil.write_conf(path, conf)
        return path

    def start(self, ctx):
        proc = ctx.proc(self.name)
        if not proc.alive():
            conf_path = self.write_conf(ctx)
            ctx.sync_then_serve(
                proc, 'neutron-db-manage', ['upgrade', 'heads'], conf_path,
                'devbox.neutron_wsgi:application', ctx.info['neutron_port'],
                {'OS_NEUTRON_CONFIG_DIR': os.path.dirname(conf_path),
                 'OS_NEUTRON_CONFIG_FILES': os.path.basename(conf_path)},
                lambda: self.ready(ctx))
            # Neutron builds its policy enforcer on the first request and
            # publishes it before its rules are registered: a second thread
            # in that window would be refused.  One request first.
            ctx.http_json(self.url(ctx.info) + '/v2.0/networks', 'GET')
        self._ensure_network(ctx)

    def _ensure_network(self, ctx):
        """A shared tenant network with a subnet, for every project."""
        url = self.url(ctx.info) + '/v2.0'
        if ctx.http_json(url + '/networks?name=' + NETWORK,
                         'GET')['networks']:
            return
        net = ctx.http_json(url + '/networks', 'POST', {'network': {
            'name': NETWORK, 'shared': True}})['network']
        ctx.http_json(url + '/subnets', 'POST', {'subnet': {
            'name': NETWORK, 'network_id': net['id'], 'ip_version': 4,
            'cidr': NETWORK_CIDR}})

    def ready_lines(self, ctx):
        return ['  neutron    %s, pid %s (ML2; no agents: the box_fake '
                'mechanism driver binds every port)' % (
                    self.url(ctx.info), ctx.proc(self.name).pid)]
