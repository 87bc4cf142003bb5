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

"""``openstack volume force detach``, ``openstack volume attachment
connection show`` and ``openstack volume audit``.

Each calls the function ``cinder-forcedetach`` or Horizon's panel calls
(:func:`~cinder_forcedetach.cmd.api_commands.force_detach`,
:func:`~cinder_forcedetach.cmd.api_commands.show_attachment`,
:func:`~cinder_forcedetach.cmd.api_commands.audit`) and shows its result
as cliff does (``-f table|json|value|yaml|shell|csv``).  A
:class:`~cinder_forcedetach.cmd.errors.CliError` becomes osc-lib's
``CommandError``: its message on stderr, exit status 1, as every
``openstack`` command fails.  ``cinder-forcedetach`` keeps the finer exit
codes (2 not found, 3 conflict, ...) for scripts.
"""

import copy

from osc_lib.cli import format_columns
from osc_lib.command import command
from osc_lib import exceptions

from cinder_forcedetach.audit import cases
from cinder_forcedetach.cmd import api_commands
from cinder_forcedetach.cmd.errors import CliError
from cinder_forcedetach.osc import plugin


def _client(app, service_token=False):
    """The plugin's client; a copy sending a service token if asked."""
    client = app.client_manager.forcedetach
    if service_token and not client.service_token:
        client = copy.copy(client)
        client.service_token = True
    return client


def _command_error(err):
    return exceptions.CommandError(err.message)


class ForceDetachVolume(command.ShowOne):
    _description = (
        'Force-detach a volume from one host (--connector), one attachment '
        '(--attachment) or every host: the volume driver tears the '
        'backend\'s access down before Cinder resets its database')

    def get_parser(self, prog_name):
        parser = super(ForceDetachVolume, self).get_parser(prog_name)
        parser.add_argument(
            'volume', metavar='<volume>',
            help='Volume to force-detach (name or ID)')
        parser.add_argument(
            '--attachment', metavar='<attachment-id>',
            help='Attachment to end')
        parser.add_argument(
            '--connector', metavar='<json|@file>',
            help="The host's connector (os-brick connector properties) as "
                 "JSON, @FILE, or @- for stdin (default: every host)")
        parser.add_argument(
            '--all-hosts', action='store_true',
            help='Without --connector, allow detaching a volume with '
                 'several attachments from every host (one attachment '
                 'delete each)')
        parser.add_argument(
            '--service-token', action='store_true',
            help='Send the token as a service token too, as Nova does: '
                 'Cinder requires it to force-detach an attachment Nova '
                 'may still use (bug #2004555); needs a service role')
        return parser

    def take_action(self, parsed_args):
        client = _client(self.app, parsed_args.service_token)
        try:
            connector = (api_commands.load_connector(parsed_args.connector)
                         if parsed_args.connector is not None else None)
            result = api_commands.force_detach(
                client, parsed_args.volume, connector=connector,
                attachment_id=parsed_args.attachment,
                all_hosts=parsed_args.all_hosts)
        except CliError as err:
            raise _command_error(err) from err
        columns = ('attachments', 'result', 'status', 'volume_id')
        return columns, (format_columns.ListColumn(result['attachments']),
                         result.get('result', 'force-detached'),
                         result['status'], result['volume_id'])


class ShowVolumeAttachmentConnection(command.ShowOne):
    _description = (
        'Show an attachment and its connection info; passwords, keys, '
        'keyrings and tokens in it are masked')

    def get_parser(self, prog_name):
        parser = super(ShowVolumeAttachmentConnection, self).get_parser(
            prog_name)
        parser.add_argument(
            'attachment', metavar='<attachment-id>',
            help='Attachment to show (ID)')
        parser.add_argument(
            '--show-secrets', action='store_true',
            help='Show passwords and keys in clear')
        return parser

    def take_action(self, parsed_args):
        try:
            attachment = api_commands.show_attachment(
                _client(self.app), parsed_args.attachment,
                show_secrets=parsed_args.show_secrets)
        except CliError as err:
            raise _command_error(err) from err
        info = dict(attachment)
        info['connection_info'] = format_columns.DictColumn(
            info.get('connection_info') or {})
        columns, values = zip(*sorted(info.items()))
        return columns, values


def _non_negative(text):
    value = float(text)
    if value < 0:
        raise ValueError(text)
    return value


class AuditVolumes(command.Lister):
    _description = (
        'Find the volumes Cinder and Nova disagree on (stuck in a '
        'transition, in-use without an attachment, an attachment no '
        'instance maps, a mapping Cinder forgot...) from their APIs, and '
        'with --fix repair them by force-detach (the backend is torn down '
        'before Cinder\'s database changes); anything an active instance '
        'may hold is refused.  What only the backend shows (an export left '
        'by reset-state) is the volume host\'s "cinder-forcedetach audit". '
        'Exit status 1 when a repair failed')

    def get_parser(self, prog_name):
        parser = super(AuditVolumes, self).get_parser(prog_name)
        parser.add_argument(
            '--fix', action='store_true',
            help='Repair what was found (force-detach through Cinder)')
        parser.add_argument(
            '--case', metavar='<case>', action='append',
            choices=list(cases.CASES),
            help='With --fix, repair only this case (repeat for more): '
                 '%s' % ', '.join(cases.CASES))
        parser.add_argument(
            '--fix-limit', metavar='<count>', type=int,
            default=cases.DEFAULT_FIX_LIMIT,
            help='With --fix, repair at most this many findings '
                 '(default %d)' % cases.DEFAULT_FIX_LIMIT)
        parser.add_argument(
            '--grace', metavar='<seconds>', type=_non_negative,
            default=cases.DEFAULT_GRACE,
            help='Leave out volumes changed within this many seconds: an '
                 'operation may still be under way (default %d)' %
                 cases.DEFAULT_GRACE)
        parser.add_argument(
            '--no-nova', action='store_true',
            help='Do not read Nova (its cases are not found, and repairs '
                 'of attachments an instance owns are refused)')
        return parser

    def take_action(self, parsed_args):
        self.failed = False
        manager = self.app.client_manager
        try:
            nova = (None if parsed_args.no_nova else
                    plugin.make_compute_client(manager))
            findings, _skipped = api_commands.audit(
                manager.forcedetach, nova, grace=parsed_args.grace,
                fix=parsed_args.fix, only=parsed_args.case,
                limit=parsed_args.fix_limit)
        except CliError as err:
            raise _command_error(err) from err
        self.failed = any(f.result.startswith('failed') for f in findings)
        rows = [f.row() for f in findings]
        return cases.COLUMNS, [[row[c] for c in cases.COLUMNS]
                               for row in rows]

    def run(self, parsed_args):
        status = super(AuditVolumes, self).run(parsed_args)
        return status or (1 if self.failed else 0)
