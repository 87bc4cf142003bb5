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

"""Glance (``--glance``): images for create-from-image and os-reimage.

PyPI glance under gunicorn, one worker, behind the box's Keystone or with
no auth; a file store under ``STATE/glance/images``, and with an RBD
backend the images in the box's Ceph (Cinder clones them); its database in
the stack's MariaDB, or SQLite; ``glance-manage db sync`` first.
"""

import json
import os
import shutil
import urllib.request

from devbox import boxutil
from devbox.services import base


class Glance(base.WsgiService):

    name = 'glance-api'
    port_key = 'glance_port'
    probe = '/healthcheck'
    requires = ('keystone-api', 'ceph', 'mariadb')
    databases = {'glance': 'glance_db_password'}
    keystone_users = ('glance',)

    def enabled(self, info):
        return bool(info.get('glance'))

    def catalog(self, ctx):
        return [('glance', 'image', self.url(ctx.info))]

    def write_conf(self, ctx):
        info, d = ctx.info, os.path.join(ctx.dir, 'glance')
        paste = os.path.join(info['venv'], 'etc', 'glance',
                             'glance-api-paste.ini')
        if not os.path.exists(paste):
            raise base.StackError('%s not found: is glance installed in %s? '
                                  '(tools/install-deps.sh installs it)' % (
                                      paste, info['venv']))
        for sub in ('images', 'staging', 'tasks', 'locks'):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        shutil.copy(paste, os.path.join(d, 'glance-api-paste.ini'))
        conf = boxutil.conf({
            'DEFAULT': {
                'debug': str(ctx.s.debug),
                'log_file': os.path.join(ctx.log_dir, 'glance-api.log'),
                'worker_self_reference_url': self.url(info),
                'enabled_backends': 'box:file',
                'node_staging_uri': 'file://' + os.path.join(d, 'staging'),
            },
            'database': {'connection': ctx.database_url('glance', d)},
            'glance_store': {'default_backend': 'box'},
            'box': {'filesystem_store_datadir': os.path.join(d, 'images')},
        })
        if ctx.enabled('ceph'):
            # Images in the box's Ceph, where Cinder's RBD driver clones
            # them (copy-on-write) instead of copying their bytes; the
            # image's rbd:// location is shown to Cinder for that.
            conf['DEFAULT'].update(enabled_backends='box:file,ceph:rbd',
                                   show_image_direct_url='True')
            conf['glance_store']['default_backend'] = 'ceph'
            conf['ceph'] = self._rbd_store(ctx, d)
        for store in ('staging', 'tasks'):
            conf['os_glance_%s_store' % store] = {
                'filesystem_store_datadir': os.path.join(d, store)}
        conf['oslo_concurrency'] = {'lock_path': os.path.join(d, 'locks')}
        if info.get('keystone'):
            conf['paste_deploy'] = {'flavor': 'keystone'}
            conf['keystone_authtoken'] = ctx.service(
                'keystone-api').authtoken_section(ctx, 'glance')
        else:
            # No keystone: Glance's unauthenticated-context pipeline, and
            # its legacy policies (the new ones want a project in a token).
            conf['paste_deploy'] = {'flavor': ''}
            conf['oslo_policy'] = {'enforce_new_defaults': 'False',
                                   'enforce_scope': 'False'}
        path = os.path.join(d, 'glance-api.conf')
        boxutil.write_conf(path, conf)
        return path

    @staticmethod
    def _rbd_store(ctx, directory):
        """Glance's RBD store options: the images pool, as client.cinder.

        Its own ceph.conf names the keyring (glance_store has no option
        for it).
        """
        ceph = ctx.service('ceph').settings(ctx)
        conf_path = os.path.join(directory, 'ceph.conf')
        with open(ceph['CEPH_CONF']) as f:
            text = f.read()
        boxutil.write_private(conf_path, text + '\n[client.%s]\nkeyring = %s\n'
                              % (ceph['CEPH_USER'], ceph['CEPH_KEYRING']))
        return {'rbd_store_pool': ceph['CEPH_IMAGES_POOL'],
                'rbd_store_user': ceph['CEPH_USER'],
                'rbd_store_ceph_conf': conf_path}

    def start(self, ctx):
        proc = ctx.proc(self.name)
        if proc.alive():
            return
        conf_path = self.write_conf(ctx)
        ctx.sync_then_serve(proc, 'glance-manage', ['db', 'sync'],
                            conf_path, 'glance.wsgi.api:application',
                            ctx.info['glance_port'],
                            {'OS_GLANCE_CONFIG_DIR': os.path.dirname(
                                conf_path)},
                            lambda: self.ready(ctx))

    def upload(self, ctx, name, data, disk_format='raw', visibility='shared',
               container_format='bare', properties=None):
        """An active image of *data* with *properties*; its id."""
        images = self.url(ctx.info) + '/v2/images'
        auth = ({'X-Auth-Token': ctx.auth_token()}
                if ctx.info.get('keystone') else {})
        req = urllib.request.Request(images, method='POST', data=json.dumps(
            dict(properties or {}, name=name, disk_format=disk_format,
                 container_format=container_format,
                 visibility=visibility)).encode(),
            headers=dict(auth, **{'Content-Type': 'application/json'}))
        with urllib.request.urlopen(req, timeout=30) as resp:
            image_id = json.loads(resp.read())['id']
        req = urllib.request.Request(
            '%s/%s/file' % (images, image_id), method='PUT', data=data,
            headers=dict(auth, **{'Content-Type': 'application/octet-stream'}))
        urllib.request.urlopen(req, timeout=120).close()
        return image_id

    def ready_lines(self, ctx):
        return ['  glance     %s/v2, pid %s (%s, file store)' % (
            self.url(ctx.info), ctx.proc(self.name).pid,
            'keystone' if ctx.info.get('keystone') else 'no auth')]
