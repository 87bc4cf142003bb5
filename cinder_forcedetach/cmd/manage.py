"""cinder-forcedetach: operator commands against any Cinder endpoint.

Usage (nova-manage / cinder-manage style)::

    cinder-forcedetach [global options] volume force-detach VOLUME
        [--connector JSON|@FILE] [--attachment ATTACHMENT_ID]
    cinder-forcedetach [global options] attachment show ATTACHMENT_ID
        [--show-secrets]
    cinder-forcedetach [global options] attachment refresh ATTACHMENT_ID
        [--config-file FILE]... [--config-dir DIR] [--debug]
    cinder-forcedetach [global options] fence list [--volume ID]
        [--backend NAME] [--config-file FILE]... [--config-dir DIR]
    cinder-forcedetach [global options] fence lift (--volume ID |
        --address ADDR) [--backend NAME] [--config-file FILE]...

Global options: ``--format table|json``, ``--timeout SECONDS``,
``--service-token`` and the connection options below.

Authentication, from the usual ``OS_*`` variables (or the same-named
options, e.g. ``--os-auth-type``):

* ``OS_AUTH_TYPE=noauth`` (Cinder's ``auth_strategy = noauth``): the
  endpoint comes from ``--os-endpoint``, ``CINDER_ENDPOINT`` (what
  python-cinderclient 9 reads) or ``CINDERCLIENT_BYPASS_URL``
  (``http://HOST:PORT/v3`` or ``.../v3/PROJECT``), the
  project from ``OS_PROJECT_ID`` (hex), the user from ``OS_USER_ID``.
  ``tools/stack.sh up`` prints these.
* ``OS_AUTH_TYPE=token`` with ``OS_TOKEN`` and an endpoint.
* Any keystoneauth plugin (``password``, ``v3password``,
  ``v3applicationcredential``, ...) with its options from ``OS_*``
  variables (``OS_AUTH_URL``, ``OS_USERNAME``, ``OS_PASSWORD``,
  ``OS_PROJECT_NAME``, ``OS_USER_DOMAIN_NAME``, ...); the endpoint is then
  looked up in the catalog (``OS_INTERFACE``, ``OS_REGION_NAME``) unless
  given.

``--service-token`` marks the request as coming from a service, as Nova's
requests do, which Cinder requires (bug #2004555) to force-detach an
attachment Nova still uses: with Keystone the command also sends its own
token as ``X-Service-Token`` (its user needs one of Cinder's
``[keystone_authtoken] service_token_roles``); with noauth it sends the
``X-Service-Roles`` header that keystonemiddleware would have set.

Exit codes (stable, for scripts):

====  ======================================================================
0     success
1     usage error or bad input (bad JSON connector, HTTP 400, 401, 403)
2     not found (volume, attachment: HTTP 404)
3     conflict or wrong state (HTTP 409; HTTP 400 for an invalid volume
      state)
4     backend or server error (HTTP 5xx)
5     endpoint unreachable (connection refused, timeout, no endpoint)
====  ======================================================================

``attachment refresh`` and ``fence list|lift`` are not API calls: like
``cinder-manage`` they run on a volume host, read cinder.conf and ask the
backend's driver (a new connection_info, :mod:`cinder_forcedetach.cmd.refresh`;
the fences force-detach recorded, :mod:`cinder_forcedetach.cmd.fence`);
their exit codes are the ones above.

Adding a command: write a function ``f(client, args, out)`` returning the
exit code, decorate it with :func:`command` (category, name, help,
arguments), and it appears as ``cinder-forcedetach CATEGORY NAME``.
"""

import argparse
import json
import os
import re
import sys
import urllib.parse
import warnings

from keystoneauth1 import exceptions as ks_exc
from keystoneauth1 import loading as ks_loading
from keystoneauth1 import plugin as ks_plugin
from keystoneauth1 import session as ks_session
from keystoneauth1 import token_endpoint

from cinder_forcedetach.cmd import local

EXIT_OK = local.EXIT_OK
EXIT_USAGE = local.EXIT_USAGE
EXIT_NOT_FOUND = local.EXIT_NOT_FOUND
EXIT_CONFLICT = local.EXIT_CONFLICT
EXIT_BACKEND = local.EXIT_BACKEND
EXIT_UNREACHABLE = local.EXIT_UNREACHABLE
CliError = local.CliError
mask_secrets = local.mask_secrets

DEFAULT_API_VERSION = '3.27'  # the attachments API
UUID_RE = re.compile(r'^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?'
                     r'[0-9a-f]{12}$', re.IGNORECASE)
# Cinder answers 400 for a volume in the wrong state (InvalidVolume).
WRONG_STATE_RE = re.compile(r'InvalidVolume|status must be|invalid state|'
                            r'current status is', re.IGNORECASE)


# -- commands registry --------------------------------------------------------

COMMANDS = {}


def arg(*args, **kwargs):
    """An argparse argument of a command (see :func:`command`)."""
    return (args, kwargs)


def command(category, name, help, arguments=()):
    """Register ``f(client, args, out) -> exit code`` as CATEGORY NAME."""
    def decorator(func):
        COMMANDS.setdefault(category, {})[name] = (func, help,
                                                   list(arguments))
        return func
    return decorator


# -- HTTP -----------------------------------------------------------------


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


def _env(*names, default=None):
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
        value = _env('OS_' + opt.dest.upper(),
                     *['OS_' + d.dest.upper() for d in opt.deprecated])
        if value is not None:
            options[opt.dest] = value
    try:
        return loader.load_from_options(**options)
    except ks_exc.MissingRequiredOptions as err:
        raise CliError(EXIT_USAGE, 'missing auth options: %s' % ', '.join(
            'OS_' + o.dest.upper() for o in err.options))


class Client(object):
    """A Cinder v3 endpoint, through a keystoneauth session."""

    def __init__(self, session, endpoint, api_version=DEFAULT_API_VERSION,
                 service_token=False, timeout=60.0, service_roles=None):
        self.session = session
        self.endpoint = endpoint.rstrip('/')
        self.api_version = api_version
        self.service_token = service_token
        self.service_roles = service_roles
        self.timeout = timeout

    @classmethod
    def from_args(cls, args):
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
            token = _env('OS_TOKEN')
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
                    interface=_env('OS_INTERFACE', default='public'),
                    region_name=_env('OS_REGION_NAME'))
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
        headers = {'OpenStack-API-Version': 'volume %s' % self.api_version,
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
        return self.request('GET', '/volumes/%s' % volume_id)['volume']

    def force_detach(self, volume_id, connector=None, attachment_id=None):
        params = {}
        if connector is not None:
            params['connector'] = connector
        if attachment_id:
            params['attachment_id'] = attachment_id
        self.request('POST', '/volumes/%s/action' % volume_id,
                     {'os-force_detach': params}, ok=(202,))

    def get_attachment(self, attachment_id):
        return self.request('GET',
                            '/attachments/%s' % attachment_id)['attachment']


def exit_code_for(status, text=''):
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


# -- secrets and output ------------------------------------------------------


def flatten(value, prefix=''):
    """[(dotted key, scalar)] rows of nested dicts, for tables."""
    rows = []
    if isinstance(value, dict) and value:
        for key in value:
            name = '%s.%s' % (prefix, key) if prefix else str(key)
            rows.extend(flatten(value[key], name))
    elif isinstance(value, list) and value and any(
            isinstance(v, (dict, list)) for v in value):
        for i, item in enumerate(value):
            rows.extend(flatten(item, '%s[%d]' % (prefix, i)))
    else:
        if isinstance(value, (dict, list)):
            value = json.dumps(value)
        rows.append((prefix, '' if value is None else str(value)))
    return rows


class Output(object):
    """Prints a result as a two-column table or as JSON."""

    def __init__(self, fmt='table', stream=None):
        self.fmt = fmt
        self.stream = stream or sys.stdout

    def emit(self, data):
        if self.fmt == 'json':
            self.stream.write(json.dumps(data, indent=2, sort_keys=True) +
                              '\n')
            return
        rows = flatten(data)
        width = max([len('Property')] + [len(k) for k, _v in rows])
        vwidth = max([len('Value')] + [len(v) for _k, v in rows])
        line = '+-%s-+-%s-+' % ('-' * width, '-' * vwidth)
        out = [line, '| %s | %s |' % ('Property'.ljust(width),
                                      'Value'.ljust(vwidth)), line]
        out += ['| %s | %s |' % (k.ljust(width), v.ljust(vwidth))
                for k, v in rows]
        out.append(line)
        self.stream.write('\n'.join(out) + '\n')


# -- commands ---------------------------------------------------------------


def load_connector(text):
    """A connector dict from JSON text, ``@FILE`` or ``@-`` (stdin)."""
    source = 'the --connector value'
    if text.startswith('@'):
        source = text[1:]
        try:
            if source == '-':
                text = sys.stdin.read()
            else:
                with open(source) as f:
                    text = f.read()
        except OSError as err:
            raise CliError(EXIT_USAGE, 'cannot read connector file: %s' % err)
    try:
        connector = json.loads(text)
    except ValueError as err:
        raise CliError(EXIT_USAGE, '%s is not JSON: %s' % (source, err))
    if not isinstance(connector, dict):
        raise CliError(EXIT_USAGE, 'a connector is a JSON object, not %s' %
                       type(connector).__name__)
    return connector


@command('volume', 'force-detach',
         'Detach a volume from one host (--connector), one attachment '
         '(--attachment) or every host; the driver tears the backend down '
         'before Cinder resets its database.',
         [arg('volume', metavar='VOLUME', help='volume id or unique name'),
          arg('--connector', metavar='JSON|@FILE',
              help="the host's connector (os-brick connector properties) "
                   "as JSON, @FILE or @- for stdin; default: every host"),
          arg('--attachment', metavar='ATTACHMENT_ID',
              help='the attachment to end'),
          arg('--all-hosts', action='store_true',
              help='without --connector, allow detaching a volume that has '
                   'several attachments from every host at once')])
def volume_force_detach(client, args, out):
    connector = (load_connector(args.connector)
                 if args.connector is not None else None)
    volume_id = client.resolve_volume(args.volume)
    if connector is None and not args.all_hosts:
        # Without a connector Cinder asks the driver to revoke every host:
        # on a multiattach volume that would cut off the hosts that stay.
        attached = client.get_volume(volume_id).get('attachments') or []
        if len(attached) > 1:
            raise CliError(EXIT_USAGE, 'volume %s has %d attachments: give '
                           'the --connector of the host to detach, or '
                           '--all-hosts' % (volume_id, len(attached)))
    client.force_detach(volume_id, connector=connector,
                        attachment_id=args.attachment)
    volume = client.get_volume(volume_id)
    out.emit({'volume_id': volume_id,
              'status': volume.get('status'),
              'attachments': [a.get('attachment_id') or a.get('id')
                              for a in volume.get('attachments') or []]})
    return EXIT_OK


@command('attachment', 'show',
         'Show an attachment; secrets in its connection_info are masked.',
         [arg('attachment', metavar='ATTACHMENT_ID'),
          arg('--show-secrets', action='store_true',
              help='print passwords and keys in clear')])
def attachment_show(client, args, out):
    attachment = client.get_attachment(args.attachment)
    if not args.show_secrets:
        attachment = mask_secrets(attachment)
    out.emit(attachment)
    return EXIT_OK


# -- main -------------------------------------------------------------------


class _Parser(argparse.ArgumentParser):
    """argparse exiting with EXIT_USAGE (1) instead of 2 on errors."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, '%s: error: %s\n' % (self.prog, message))


def _add_output_options(parser, default=None):
    """Options accepted before the category and after the action."""
    def dflt(value):
        return value if default is None else default
    parser.add_argument('--format', choices=('table', 'json'),
                        default=dflt('table'), help='output format')
    parser.add_argument('--timeout', type=float, default=dflt(60.0),
                        help='seconds to wait for each HTTP answer')
    parser.add_argument('--service-token', action='store_true',
                        default=dflt(False),
                        help='send the request as a service would (needed '
                             'to force-detach attachments Nova still uses)')


def build_parser():
    parser = _Parser(
        prog='cinder-forcedetach',
        description='Operator commands of cinder-forcedetach.',
        epilog='Exit codes: 0 ok, 1 usage/bad input, 2 not found, '
               '3 conflict/wrong state, 4 backend/server error, '
               '5 endpoint unreachable.')
    _add_output_options(parser)
    parser.add_argument('--os-auth-type',
                        default=_env('OS_AUTH_TYPE', default=None))
    parser.add_argument('--os-endpoint',
                        default=_env('CINDER_ENDPOINT',
                                     'CINDERCLIENT_BYPASS_URL'),
                        help='Cinder v3 endpoint (env CINDER_ENDPOINT or '
                             'CINDERCLIENT_BYPASS_URL)')
    parser.add_argument('--os-project-id', default=_env('OS_PROJECT_ID'))
    parser.add_argument('--os-user-id', default=_env('OS_USER_ID'))
    parser.add_argument('--os-volume-api-version',
                        default=_env('OS_VOLUME_API_VERSION',
                                     default=DEFAULT_API_VERSION))
    parser.add_argument('--insecure', action='store_true',
                        help='do not verify the TLS certificate')
    categories = parser.add_subparsers(dest='category', metavar='CATEGORY')
    categories.required = True
    for category in sorted(COMMANDS):
        cat_parser = categories.add_parser(category,
                                           help='%s commands' % category)
        actions = cat_parser.add_subparsers(dest='action', metavar='ACTION')
        actions.required = True
        for name in sorted(COMMANDS[category]):
            func, help_text, arguments = COMMANDS[category][name]
            sub = actions.add_parser(name, help=help_text,
                                     description=help_text)
            _add_output_options(sub, argparse.SUPPRESS)
            for a_args, a_kwargs in arguments:
                sub.add_argument(*a_args, **a_kwargs)
            sub.set_defaults(func=func)
        if category == 'attachment':
            _add_refresh(actions)
    _add_fence(categories)
    return parser


def _add_refresh(actions):
    """``attachment refresh``: delegated to :mod:`.refresh` (local)."""
    try:
        from cinder_forcedetach.cmd import refresh
    except ImportError:  # pragma: no cover - shipped with the package
        return
    sub = actions.add_parser('refresh', help=refresh.HELP,
                             description=refresh.HELP)
    _add_output_options(sub, argparse.SUPPRESS)
    refresh.add_arguments(sub, with_format=False)
    sub.set_defaults(func=None, local_run=refresh.run)


def _add_fence(categories):
    """``fence list|lift``: delegated to :mod:`.fence` (local)."""
    from cinder_forcedetach.cmd import fence
    cat_parser = categories.add_parser('fence', help=fence.HELP,
                                       description=fence.HELP)
    actions = cat_parser.add_subparsers(dest='action', metavar='ACTION')
    actions.required = True
    for sub in fence.add_arguments(actions, with_format=False):
        _add_output_options(sub, argparse.SUPPRESS)
        sub.set_defaults(func=None, local_run=fence.run)


def main(argv=None, stdout=None, stderr=None):
    stderr = stderr or sys.stderr
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error (EXIT_USAGE)
        return exc.code
    local_run = getattr(args, 'local_run', None)
    if local_run is not None:
        # Runs on this host against cinder.conf, not through the API;
        # importing Cinder would print eventlet's deprecation notice.
        warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')
        return local_run(args, stdout or sys.stdout, stderr)
    out = Output(args.format, stdout)
    try:
        client = Client.from_args(args)
        return args.func(client, args, out)
    except CliError as err:
        stderr.write('cinder-forcedetach: error: %s\n' % err.message)
        return err.code


if __name__ == '__main__':
    sys.exit(main())
