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

"""A Cinder v3 API client for the cinder-forcedetach commands.

:meth:`Client.from_args` authenticates from the ``--os-*`` options and
``OS_*`` variables: Cinder's noauth (:class:`NoAuthPlugin`), a token and
an endpoint, or any keystoneauth plugin (the endpoint then from the
catalog).  Every failure is a :class:`~.errors.CliError` whose exit code
says what went wrong (:func:`exit_code_for`).
"""

import json
import os
import re
import urllib.parse

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import plugin as ks_plugin
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint

from cinder_forcedetach.cmd.errors import CliError
from cinder_forcedetach.cmd.errors import EXIT_BACKEND
from cinder_forcedetach.cmd.errors import EXIT_CONFLICT
from cinder_forcedetach.cmd.errors import EXIT_NOT_FOUND
from cinder_forcedetach.cmd.errors import EXIT_UNREACHABLE
from cinder_forcedetach.cmd.errors import EXIT_USAGE

DEFAULT_API_VERSION = '3.27'  # the attachments API
UUID_RE = re.compile(r'^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?'
                     r'[0-9a-f]{12}$', re.IGNORECASE)
# Cinder answers 400 for a volume in the wrong state (InvalidVolume).
WRONG_STATE_RE = re.compile(r'InvalidVolume|status must be|invalid state|'
                            r'current status is', re.IGNORECASE)


class NoAuthPlugin(ks_plugin.BaseAuthPlugin):
    """Cinder's noauth: the token is ``user:project``, no Keystone."""

    def __init__(self, user_id, project_id, endpoint):
        super(NoAuthPlugin, self).__init__()
        self.user_id = user_id
        self.project_id = project_id
        self.endpoint = endpoint

    def get_headers(self, session, **kwargs):
        return {'X-Auth-Token': '%s:%s' % (self.user_id, self.project_id)}

    def get_endpoint(self, session, **kwargs):
        return self.endpoint

    def get_user_id(self, session, **kwargs):
        return self.user_id

    def get_project_id(self, session, **kwargs):
        return self.project_id


def env(*names, default=None):
    """The first non-empty of the environment variables *names*."""
    for name in names:
        value = os.environ.get(name)
        if value:
            return value
    return default


def _noauth_endpoint(endpoint, project_id):
    """``http://h:p/v3[/project]`` -> (``http://h:p/v3/project``, project)."""
    path = urllib.parse.urlparse(endpoint).path.rstrip('/')
    parts = path.split('/')
    if parts and parts[-1] not in ('v3', '') and (
            len(parts) < 2 or parts[-2] == 'v3'):
        in_url = parts[-1]
        if project_id and project_id != in_url:
            raise CliError(EXIT_USAGE, 'project %s in the endpoint differs '
                           'from OS_PROJECT_ID %s' % (in_url, project_id))
        return endpoint.rstrip('/'), in_url
    if not project_id:
        raise CliError(EXIT_USAGE, 'noauth needs a project id '
                       '(OS_PROJECT_ID or an endpoint ending in /PROJECT)')
    return '%s/%s' % (endpoint.rstrip('/'), project_id), project_id


def _keystone_plugin(auth_type):
    """A keystoneauth plugin whose options come from OS_* variables."""
    try:
        loader = ks_loading.get_plugin_loader(auth_type)
    except ks_exc.NoMatchingPlugin:
        raise CliError(EXIT_USAGE, 'unknown auth type %s' % auth_type)
    options = {}
    for opt in loader.get_options():
        value = env('OS_' + opt.dest.upper(),
                    *['OS_' + d.dest.upper() for d in opt.deprecated])
        if value is not None:
            options[opt.dest] = value
    try:
        return loader.load_from_options(**options)
    except ks_exc.MissingRequiredOptions as err:
        raise CliError(EXIT_USAGE, 'missing auth options: %s' % ', '.join(
            'OS_' + o.dest.upper() for o in err.options))


def add_arguments(parser):
    """The connection options, defaults from the environment."""
    parser.add_argument('--os-auth-type',
                        default=env('OS_AUTH_TYPE', default=None))
    parser.add_argument('--os-endpoint',
                        default=env('CINDER_ENDPOINT',
                                    'CINDERCLIENT_BYPASS_URL'),
                        help='Cinder v3 endpoint (env CINDER_ENDPOINT or '
                             'CINDERCLIENT_BYPASS_URL)')
    parser.add_argument('--os-project-id', default=env('OS_PROJECT_ID'))
    parser.add_argument('--os-user-id', default=env('OS_USER_ID'))
    parser.add_argument('--os-volume-api-version',
                        default=env('OS_VOLUME_API_VERSION',
                                    default=DEFAULT_API_VERSION))
    parser.add_argument('--insecure', action='store_true',
                        help='do not verify the TLS certificate')


class Client(object):
    """A Cinder v3 endpoint, through a keystoneauth session.

    *service_type*: the microversion header's service (``compute`` reads
    Nova's API with the same calls).
    """

    def __init__(self, session, endpoint, api_version=DEFAULT_API_VERSION,
                 service_token=False, timeout=60.0, service_roles=None,
                 service_type='volume'):
        self.session = session
        self.service_type = service_type
        self.endpoint = endpoint.rstrip('/')
        self.api_version = api_version
        self.service_token = service_token
        self.service_roles = service_roles
        self.timeout = timeout

    @classmethod
    def from_args(cls, args):
        """The client the parsed options and OS_* variables describe."""
        auth_type = (args.os_auth_type or '').lower()
        endpoint = args.os_endpoint
        roles = None
        if auth_type in ('noauth', 'none', 'noauth2'):
            if not endpoint:
                raise CliError(EXIT_USAGE, 'noauth needs an endpoint '
                               '(--os-endpoint or CINDER_ENDPOINT)')
            endpoint, project = _noauth_endpoint(endpoint,
                                                 args.os_project_id)
            auth = NoAuthPlugin(args.os_user_id or 'admin', project,
                                endpoint)
            roles = 'service'
        elif auth_type in ('token', 'admin_token'):
            token = env('OS_TOKEN')
            if not (endpoint and token):
                raise CliError(EXIT_USAGE,
                               'token auth needs OS_TOKEN and an endpoint')
            auth = token_endpoint.Token(endpoint, token)
        elif auth_type:
            auth = _keystone_plugin(auth_type)
        else:
            raise CliError(EXIT_USAGE, 'no auth type: set OS_AUTH_TYPE '
                           '(noauth, token, password, ...)')
        session = ks_session.Session(auth=auth, verify=not args.insecure)
        if not endpoint:
            try:
                endpoint = session.get_endpoint(
                    service_type='block-storage',
                    interface=env('OS_INTERFACE', default='public'),
                    region_name=env('OS_REGION_NAME'))
            except ks_exc.EndpointNotFound:
                endpoint = None
            except ks_exc.Unauthorized as err:
                raise CliError(EXIT_USAGE, 'authentication failed: %s' % err)
            except (ks_exc.ConnectFailure, ks_exc.ConnectTimeout,
                    ks_exc.DiscoveryFailure) as err:
                raise CliError(EXIT_UNREACHABLE, str(err))
            if not endpoint:
                raise CliError(EXIT_UNREACHABLE, 'no block-storage endpoint '
                               'in the catalog; give --os-endpoint')
        return cls(session, endpoint, api_version=args.os_volume_api_version,
                   service_token=args.service_token, timeout=args.timeout,
                   service_roles=roles)

    def _headers(self):
        headers = {'OpenStack-API-Version': '%s %s' % (self.service_type,
                                                       self.api_version),
                   'Accept': 'application/json'}
        if self.service_token:
            if self.service_roles:
                # noauth: nothing validates tokens; this is the header
                # keystonemiddleware sets for a valid service token.
                headers['X-Service-Roles'] = self.service_roles
            else:
                headers['X-Service-Token'] = self.session.get_token()
        return headers

    def request(self, method, path, body=None, ok=(200, 202, 204)):
        """Send a request; return the decoded body or raise CliError."""
        url = '%s/%s' % (self.endpoint, path.lstrip('/'))
        try:
            resp = self.session.request(
                url, method, json=body, headers=self._headers(),
                raise_exc=False, timeout=self.timeout, log=False)
        except (ks_exc.ConnectFailure, ks_exc.ConnectTimeout,
                ks_exc.RequestTimeout, ks_exc.DiscoveryFailure,
                ks_exc.SSLError) as err:
            reason = re.search(r'\[Errno -?\d+\] ([^\'")]+)', str(err))
            raise CliError(EXIT_UNREACHABLE, 'cannot reach %s: %s' % (
                self.endpoint, reason.group(1) if reason else
                type(err).__name__))
        except ks_exc.Unauthorized as err:
            raise CliError(EXIT_USAGE, 'authentication failed: %s' % err)
        if resp.status_code in ok:
            return resp.json() if resp.content else {}
        raise CliError(exit_code_for(resp.status_code, resp.text),
                       '%s %s: HTTP %d: %s' % (method, path, resp.status_code,
                                               error_message(resp)))

    # -- resources ---------------------------------------------------------

    def resolve_volume(self, ref):
        """A volume id from an id or a unique name."""
        if UUID_RE.match(ref):
            return ref
        vols = self.request('GET', '/volumes?name=%s' % urllib.parse.quote(
            ref))['volumes']
        if not vols:
            raise CliError(EXIT_NOT_FOUND, 'no volume named %s' % ref)
        if len(vols) > 1:
            raise CliError(EXIT_USAGE, '%d volumes are named %s; give the '
                           'id' % (len(vols), ref))
        return vols[0]['id']

    def get_volume(self, volume_id):
        """The volume, as ``GET /volumes/ID`` shows it."""
        return self.request('GET', '/volumes/%s' % volume_id)['volume']

    def force_detach(self, volume_id, connector=None, attachment_id=None):
        """``os-force_detach``: one host (*connector*) or every host."""
        params = {}
        if connector is not None:
            params['connector'] = connector
        if attachment_id:
            params['attachment_id'] = attachment_id
        self.request('POST', '/volumes/%s/action' % volume_id,
                     {'os-force_detach': params}, ok=(202,))

    def delete_attachment(self, attachment_id):
        """``DELETE /attachments/ID``: Cinder's detach of one attachment."""
        self.request('DELETE', '/attachments/%s' % attachment_id)

    def get_attachment(self, attachment_id):
        """The attachment, connection_info included (unmasked)."""
        return self.request('GET',
                            '/attachments/%s' % attachment_id)['attachment']


def exit_code_for(status, text=''):
    """The exit code of an HTTP error *status* with body *text*."""
    if status == 404:
        return EXIT_NOT_FOUND
    if status == 409:
        return EXIT_CONFLICT
    if status == 400 and WRONG_STATE_RE.search(text or ''):
        return EXIT_CONFLICT
    if status >= 500:
        return EXIT_BACKEND
    return EXIT_USAGE


def error_message(resp):
    """Cinder's error message from an error response body."""
    try:
        body = resp.json()
    except ValueError:
        return (resp.text or '').strip()[:500]
    if isinstance(body, dict) and len(body) == 1:
        inner = next(iter(body.values()))
        if isinstance(inner, dict) and 'message' in inner:
            return inner['message']
    return json.dumps(body)[:500]
