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

"""Placement (``--nova``): the resource providers Nova schedules on.

PyPI openstack-placement under gunicorn, behind the box's Keystone, its
database in the stack's MariaDB; ``placement-manage db sync`` first.
"""

import os

from devbox import boxutil
from devbox.services import base


class Placement(base.WsgiService):

    name = 'placement-api'
    port_key = 'placement_port'
    requires = ('keystone-api', 'mariadb')
    databases = {'placement': 'placement_db_password'}
    keystone_users = ('placement',)

    def enabled(self, info):
        return bool(info.get('nova'))

    def catalog(self, ctx):
        return [('placement', 'placement', self.url(ctx.info))]

    def write_conf(self, ctx):
        d = os.path.join(ctx.dir, 'placement')
        os.makedirs(d, exist_ok=True)
        conf = boxutil.conf({
            'DEFAULT': {'debug': str(ctx.s.debug),
                        'log_file': os.path.join(ctx.log_dir,
                                                 'placement-api.log')},
            'placement_database': {
                'connection': ctx.database_url('placement', d)},
            'api': {'auth_strategy': 'keystone'},
            'keystone_authtoken': ctx.service(
                'keystone-api').authtoken_section(ctx, 'placement'),
        })
        path = os.path.join(d, 'placement.conf')
        boxutil.write_conf(path, conf)
        return path

    def start(self, ctx):
        proc = ctx.proc(self.name)
        if proc.alive():
            return
        conf_path = self.write_conf(ctx)
        ctx.sync_then_serve(
            proc, 'placement-manage', ['db', 'sync'], conf_path,
            'placement.wsgi.api:application', ctx.info['placement_port'],
            {'OS_PLACEMENT_CONFIG_DIR': os.path.dirname(conf_path)},
            lambda: self.ready(ctx))

    def ready_lines(self, ctx):
        return ['  placement  %s, pid %s' % (self.url(ctx.info),
                                             ctx.proc(self.name).pid)]
