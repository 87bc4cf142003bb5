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

"""Keystone (``--keystone``): the box's identity service.

PyPI keystone under gunicorn, fernet tokens, its database in the stack's
MariaDB or SQLite; an ``admin``, each enabled service's user in the
``service`` project, and every enabled service's catalog entry.  The
client's credentials are in ``STATE/openrc`` (mode 0600), never printed.
"""

import functools
import json
import os
import urllib.request

from devbox import boxutil
from devbox.services import base

REGION = boxutil.REGION
#: The block-storage API version clients ask for.
CLIENT_API_VERSION = '3.70'


class Keystone(base.WsgiService):

    name = 'keystone-api'
    port_key = 'keystone_port'
    probe = '/v3'
    requires = ('mariadb',)
    databases = {'keystone': 'keystone_db_password'}
    secret_keys = ('admin_password',)

    def enabled(self, info):
        return bool(info.get('keystone'))

    @staticmethod
    def directory(ctx):
        return os.path.join(ctx.dir, 'keystone')

    def write_conf(self, ctx):
        d = self.directory(ctx)
        for sub in ('fernet-keys', 'credential-keys'):
            os.makedirs(os.path.join(d, sub), mode=0o700, exist_ok=True)
        conf = boxutil.conf({
            'DEFAULT': {
                'debug': str(ctx.s.debug),
                'log_file': os.path.join(ctx.log_dir, 'keystone-api.log')},
            'database': {'connection': ctx.database_url('keystone', d)},
            'token': {'provider': 'fernet'},
            'fernet_tokens': {'key_repository': os.path.join(
                d, 'fernet-keys')},
            'fernet_receipts': {'key_repository': os.path.join(
                d, 'fernet-keys')},
            'credential': {'key_repository': os.path.join(
                d, 'credential-keys')},
            # A test box: a token check in ~20 ms instead of ~1 s.
            'cache': {'enabled': 'True', 'backend': 'oslo_cache.dict'},
            'identity': {'password_hash_rounds': '4'},
        })
        path = os.path.join(d, 'keystone.conf')
        boxutil.write_conf(path, conf)
        return path

    def start(self, ctx):
        proc = ctx.proc(self.name)
        if not proc.alive():
            conf_dir, conf = self.directory(ctx), self.write_conf(ctx)
            manage = ['--config-file', conf]
            for step in (['db_sync'],
                         ['fernet_setup', '--keystone-user', 'root',
                          '--keystone-group', 'root'],
                         ['credential_setup', '--keystone-user', 'root',
                          '--keystone-group', 'root']):
                ctx.manage('keystone-manage', manage + step, cwd=conf_dir)
            url = self.url(ctx.info) + '/v3'
            # The password through the environment, never on a command line.
            ctx.manage('keystone-manage', manage + [
                'bootstrap', '--bootstrap-admin-url', url,
                '--bootstrap-public-url', url,
                '--bootstrap-internal-url', url,
                '--bootstrap-region-id', REGION],
                env={'OS_BOOTSTRAP_PASSWORD':
                     ctx.secrets()['admin_password']}, cwd=conf_dir)
            ctx.gunicorn(proc, 'devbox.keystone_wsgi:application',
                         ctx.info['keystone_port'],
                         {'OS_KEYSTONE_CONFIG_DIR': conf_dir}, conf_dir)
            boxutil.wait_for(lambda: self.ready(ctx), ctx.s.timeout,
                             self.name, proc)
        self._accounts(ctx)

    def call(self, ctx, method, path, body=None, token=None):
        """A call to Keystone's v3 API; (status, headers, decoded body)."""
        req = urllib.request.Request(
            self.url(ctx.info) + '/v3' + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers=dict({'Content-Type': 'application/json'},
                         **({'X-Auth-Token': token} if token else {})))
        with urllib.request.urlopen(req, timeout=30) as resp:
            data = resp.read()
            return (resp.status, resp.headers,
                    json.loads(data) if data else {})

    def token(self, ctx, user='admin', project='admin'):
        """A project-scoped token of *user* (its password in secrets)."""
        password = ctx.secrets()['%s_password' % user]
        identity = {'methods': ['password'], 'password': {'user': {
            'name': user, 'domain': {'id': 'default'},
            'password': password}}}
        scope = {'project': {'name': project, 'domain': {'id': 'default'}}}
        _status, headers, _body = self.call(ctx, 'POST', '/auth/tokens', {
            'auth': {'identity': identity, 'scope': scope}})
        return headers['X-Subject-Token']

    def find(self, ctx, token, kind, name, create):
        """Id of the *kind* (``projects``...) *name*; made from *create*."""
        _s, _h, body = self.call(ctx, 'GET', '/%s?name=%s' % (kind, name),
                                 token=token)
        found = body[kind]
        if found:
            return found[0]['id']
        _s, _h, body = self.call(ctx, 'POST', '/' + kind,
                                 {kind[:-1]: create}, token=token)
        return body[kind[:-1]]['id']

    def _accounts(self, ctx):
        """Service project, users and roles, catalog; idempotent."""
        token = self.token(ctx)
        find = functools.partial(self.find, ctx, token)
        default = {'domain_id': 'default'}
        service = find('projects', 'service', dict(default, name='service'))
        admin_project = find('projects', 'admin', None)
        roles = [find('roles', role, {'name': role})
                 for role in ('admin', 'service')]
        enabled = [svc for svc in ctx.registry.values()
                   if svc.enabled(ctx.info)]
        for user in [u for svc in enabled for u in svc.keystone_users]:
            user_id = find('users', user, dict(
                default, name=user, default_project_id=service,
                password=ctx.secrets()[user + '_password']))
            for role_id in roles:
                self.call(ctx, 'PUT', '/projects/%s/users/%s/roles/%s' % (
                    service, user_id, role_id), token=token)
        for name, kind, url in [e for svc in enabled
                                for e in svc.catalog(ctx)]:
            svc_id = find('services', name, {'name': name, 'type': kind})
            _s, _h, body = self.call(
                ctx, 'GET', '/endpoints?service_id=%s&interface=public' %
                svc_id, token=token)
            if not body['endpoints']:
                self.call(ctx, 'POST', '/endpoints', {'endpoint': {
                    'service_id': svc_id, 'interface': 'public', 'url': url,
                    'region_id': REGION}}, token=token)
        if ctx.info.get('project_id') != admin_project:
            ctx.info['project_id'] = admin_project
            ctx.save_info()
        self._write_openrc(ctx)

    @staticmethod
    def openrc_path(ctx, user='admin'):
        """The client credentials of *user* (admin, or the service user)."""
        return os.path.join(ctx.dir, 'openrc' if user == 'admin' else
                            'openrc-' + user)

    def authtoken_section(self, ctx, user):
        """``[keystone_authtoken]`` of a service whose user is *user*."""
        url = self.url(ctx.info) + '/v3'
        return {'www_authenticate_uri': url, 'auth_url': url,
                'auth_type': 'password', 'username': user,
                'password': ctx.secrets()[user + '_password'],
                'project_name': 'service', 'user_domain_name': 'Default',
                'project_domain_name': 'Default', 'region_name': REGION}

    def service_auth(self, ctx, user):
        """A client section's password-auth options as *user*."""
        section = dict(self.authtoken_section(ctx, user))
        del section['www_authenticate_uri']
        return section

    def _write_openrc(self, ctx):
        """The admin's credentials for clients, mode 0600; never printed."""
        values = [('OS_AUTH_TYPE', 'password'),
                  ('OS_AUTH_URL', self.url(ctx.info) + '/v3'),
                  ('OS_USERNAME', 'admin'),
                  ('OS_PASSWORD', ctx.secrets()['admin_password']),
                  ('OS_PROJECT_NAME', 'admin'),
                  ('OS_USER_DOMAIN_NAME', 'Default'),
                  ('OS_PROJECT_DOMAIN_NAME', 'Default'),
                  ('OS_REGION_NAME', REGION),
                  ('OS_IDENTITY_API_VERSION', '3'),
                  ('OS_VOLUME_API_VERSION', CLIENT_API_VERSION)]
        boxutil.write_private(self.openrc_path(ctx), ''.join(
            'export %s=%s\n' % kv for kv in values))
        # The cinder service user, whose token is a service token (role
        # service): what Nova sends, and what --service-token needs.
        service = dict(values, OS_USERNAME='cinder',
                       OS_PASSWORD=ctx.secrets()['cinder_password'],
                       OS_PROJECT_NAME='service')
        boxutil.write_private(self.openrc_path(ctx, 'service'), ''.join(
            'export %s=%s\n' % (k, service[k]) for k, _v in values))

    def ready_lines(self, ctx):
        return ['  keystone   %s/v3, pid %s (users admin, cinder; region %s)'
                % (self.url(ctx.info), ctx.proc(self.name).pid, REGION)]
