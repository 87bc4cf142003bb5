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
    cinder-forcedetach [global options] audit [--fix [--fix-limit N]]
        [--case CASE]... [--grace SECONDS] [--backend NAME]...
        [--nova-file FILE | --no-nova] [--config-file FILE]...
    cinder-forcedetach [global options] host fence HOST [--backend NAME]...
        [--ip-wide] [--dry-run] [--config-file FILE]...

Global options: ``--format table|json|value``, ``--timeout SECONDS``,
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

Exit codes (stable, for scripts), see :mod:`.errors`: 0 success, 1 usage
error or bad input (also HTTP 400/401/403), 2 not found, 3 conflict or
wrong state, 4 backend or server error, 5 endpoint unreachable.

``audit`` has exit codes of its own, in the manner of ``nova-manage
placement audit``: see :mod:`cinder_forcedetach.cmd.audit`.

``attachment refresh``, ``fence list|lift``, ``audit`` and ``host fence``
are not API calls: like ``cinder-manage`` they run on a volume host, read
cinder.conf and ask the backend's driver (a new connection_info,
:mod:`cinder_forcedetach.cmd.refresh`; the fences force-detach recorded,
:mod:`cinder_forcedetach.cmd.fence`; what each backend exports,
:mod:`cinder_forcedetach.cmd.audit`; a dead host cut off its volumes,
:mod:`cinder_forcedetach.cmd.host`).

Adding a command: write a function ``f(resource, args, out)`` returning the
exit code, decorate it with :func:`.registry.command` (category, name,
help, arguments, ``local=True`` for one that runs on a volume host) in a
module imported below, and it appears as ``cinder-forcedetach CATEGORY
NAME``.
"""

import argparse
import sys
import warnings

from cinder_forcedetach.cmd import api_client
from cinder_forcedetach.cmd import api_commands  # noqa: F401 (registers)
from cinder_forcedetach.cmd import audit  # noqa: F401 (registers)
from cinder_forcedetach.cmd import errors
# The exit codes, as scripts and tests know them: manage.EXIT_*.
from cinder_forcedetach.cmd.errors import EXIT_BACKEND  # noqa: F401
from cinder_forcedetach.cmd.errors import EXIT_CONFLICT  # noqa: F401
from cinder_forcedetach.cmd.errors import EXIT_NOT_FOUND  # noqa: F401
from cinder_forcedetach.cmd.errors import EXIT_OK  # noqa: F401
from cinder_forcedetach.cmd.errors import EXIT_UNREACHABLE  # noqa: F401
from cinder_forcedetach.cmd.errors import EXIT_USAGE
from cinder_forcedetach.cmd import fence  # noqa: F401 (registers)
from cinder_forcedetach.cmd import host  # noqa: F401 (registers)
from cinder_forcedetach.cmd import local
from cinder_forcedetach.cmd import output
from cinder_forcedetach.cmd import refresh  # noqa: F401 (registers)
from cinder_forcedetach.cmd import registry


class _Parser(argparse.ArgumentParser):
    """argparse exiting with EXIT_USAGE (1) instead of 2 on errors."""

    def error(self, message):
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, '%s: error: %s\n' % (self.prog, message))


def _add_output_options(parser, default=None):
    """Options accepted before the category and after the action."""
    def dflt(value):
        return value if default is None else default
    parser.add_argument('--format', choices=output.FORMATS,
                        default=dflt('table'), help='output format')
    parser.add_argument('--timeout', type=float, default=dflt(60.0),
                        help='seconds to wait for each HTTP answer')
    parser.add_argument('--service-token', action='store_true',
                        default=dflt(False),
                        help='send the request as a service would (needed '
                             'to force-detach attachments Nova still uses)')


def build_parser():
    """The parser of every command in :data:`.registry.COMMANDS`."""
    parser = _Parser(
        prog='cinder-forcedetach',
        description='Operator commands of cinder-forcedetach.',
        epilog='Exit codes: 0 ok, 1 usage/bad input, 2 not found, '
               '3 conflict/wrong state, 4 backend/server error, '
               '5 endpoint unreachable.')
    _add_output_options(parser)
    api_client.add_arguments(parser)
    categories = parser.add_subparsers(dest='category', metavar='CATEGORY')
    categories.required = True
    for category in sorted(registry.COMMANDS):
        help_text = registry.CATEGORIES.get(category,
                                            '%s commands' % category)
        cat_parser = categories.add_parser(category, help=help_text,
                                           description=help_text)
        if None in registry.COMMANDS[category]:
            # A command without action: ``cinder-forcedetach audit``.
            _add_command(cat_parser, registry.COMMANDS[category][None])
            continue
        actions = cat_parser.add_subparsers(dest='action', metavar='ACTION')
        actions.required = True
        for name in sorted(registry.COMMANDS[category]):
            cmd = registry.COMMANDS[category][name]
            _add_command(actions.add_parser(name, help=cmd.help,
                                            description=cmd.description),
                         cmd)
    return parser


def _add_command(sub, cmd):
    _add_output_options(sub, argparse.SUPPRESS)
    registry.add_arguments(sub, cmd.arguments)
    if cmd.local:
        registry.add_arguments(sub, local.CONFIG_ARGUMENTS)
    sub.set_defaults(command=cmd)


def main(argv=None, stdout=None, stderr=None):
    """Run ``cinder-forcedetach ARGV``; returns the exit code."""
    stderr = stderr or sys.stderr
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:  # --help, or a usage error (EXIT_USAGE)
        return exc.code
    cmd = args.command
    out = output.Output(args.format, stdout)
    if cmd.local:
        # Runs on this host against cinder.conf, not through the API;
        # importing Cinder would print eventlet's deprecation notice.
        warnings.filterwarnings('ignore', message=r'\s*Eventlet is deprecated')
        return local.run(cmd, args, out, stderr)
    try:
        return cmd.func(api_client.Client.from_args(args), args, out)
    except errors.CliError as err:
        stderr.write('cinder-forcedetach: error: %s\n' % err.message)
        return err.code


if __name__ == '__main__':
    sys.exit(main())
