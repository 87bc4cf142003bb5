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

"""The commands that go through Cinder's API (:mod:`.api_client`).

``volume force-detach`` and ``attachment show``; each gets a
:class:`~.api_client.Client`.  Their work is in :func:`force_detach` and
:func:`show_attachment`, which the OpenStackClient plugin
(:mod:`cinder_forcedetach.osc`) calls too, as it calls :func:`audit`.
"""

import functools
import json
import sys

from cinder_forcedetach.audit import cases
from cinder_forcedetach.audit import from_api
from cinder_forcedetach.cmd.errors import CliError
from cinder_forcedetach.cmd.errors import EXIT_CONFLICT
from cinder_forcedetach.cmd.errors import EXIT_NOT_FOUND
from cinder_forcedetach.cmd.errors import EXIT_OK
from cinder_forcedetach.cmd.errors import EXIT_USAGE
from cinder_forcedetach.cmd import output
from cinder_forcedetach.cmd.registry import arg
from cinder_forcedetach.cmd.registry import command


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
                   'several attachments from every host (one attachment '
                   'delete each: Cinder refuses an os-force_detach that '
                   'names no host of several)')])
def volume_force_detach(client, args, out):
    """Force-detach, then print the volume's status and attachments."""
    connector = (load_connector(args.connector)
                 if args.connector is not None else None)
    out.emit(force_detach(client, args.volume, connector=connector,
                          attachment_id=args.attachment,
                          all_hosts=args.all_hosts))
    return EXIT_OK


def force_detach(client, volume, connector=None, attachment_id=None,
                 all_hosts=False):
    """Force-detach *volume* (id or name); its status and attachments after.

    What ``cinder-forcedetach volume force-detach`` and ``openstack volume
    force detach`` do: *connector* (a dict) names one host, *attachment_id*
    one attachment; neither, every host, which on a volume with several
    attachments needs *all_hosts*.  Returns ``{'volume_id', 'status',
    'attachments'}`` and, for a re-run or a detach of each attachment,
    ``'result'``; raises :class:`~.errors.CliError`.
    """
    volume_id = client.resolve_volume(volume)
    attached = client.get_volume(volume_id).get('attachments') or []
    if connector is None and not attachment_id and len(attached) > 1:
        # Without a connector Cinder asks the driver to revoke every host:
        # on a multiattach volume that would cut off the hosts that stay.
        if not all_hosts:
            raise CliError(EXIT_USAGE, 'volume %s has %d attachments: give '
                           'the --connector of the host to detach, or '
                           '--all-hosts' % (volume_id, len(attached)))
        return _detach_each(client, volume_id, attached)
    if len(attached) > 1 and (connector is None or not client.service_token):
        return _detach_one_of_several(client, volume_id, attached,
                                      connector, attachment_id)
    result = {}
    try:
        client.force_detach(volume_id, connector=connector,
                            attachment_id=attachment_id)
    except CliError as err:
        # A re-run of a force-detach that finished: Cinder answers 409
        # (the volume is available, or the attachment is gone).
        if err.code != EXIT_CONFLICT:
            raise
        result = _already_detached(client, volume_id, attachment_id, err)
    volume = client.get_volume(volume_id)
    return dict(result, volume_id=volume_id, status=volume.get('status'),
                attachments=_attachment_ids(volume))


def _detach_one_of_several(client, volume_id, attached, connector,
                           attachment_id):
    """One host of a volume with several attachments: its attachments end.

    Cinder refuses an os-force_detach of a volume with several attachments
    unless a service sends it (bug #2004555's guard: 409), and the driver
    refuses one that names no connector among several; an attachment
    delete tears its host down with the connector Cinder kept.  The host
    is *attachment_id*'s, else every attachment of *connector*'s host.
    """
    if attachment_id:
        # Only an attachment of this volume: an id is the client's word.
        ids = [each for each in map(_attachment_id, attached)
               if each == attachment_id]
    else:
        ids = [_attachment_id(a) for a in attached
               if a.get('host_name') == connector.get('host')]
        if not ids:
            raise CliError(EXIT_NOT_FOUND, 'volume %s has no attachment of '
                           'host %s among its %d; Cinder refuses a force-'
                           'detach that names no attachment of several' % (
                               volume_id, connector.get('host'),
                               len(attached)))
    return _delete_attachments(
        client, volume_id, ids,
        'detached: attachment delete of %s' % ', '.join(ids) if ids else
        'already detached: attachment %s is no longer an attachment of '
        'the volume' % attachment_id)


def _detach_each(client, volume_id, attached):
    """Every host of a volume with several attachments: one delete each.

    Cinder's os-force_detach names no host here (its guard answers 409,
    and a teardown without a connector among several is refused); each
    attachment delete tears its host down with the connector Cinder kept.
    """
    return _delete_attachments(
        client, volume_id, [_attachment_id(a) for a in attached],
        'every host detached, one attachment delete each')


def _delete_attachments(client, volume_id, ids, result):
    """Delete each attachment of *ids*; *result* and the volume after."""
    for each in ids:
        try:
            client.delete_attachment(each)
        except CliError as err:
            if err.code != EXIT_NOT_FOUND:     # gone already: a re-run
                raise
    volume = client.get_volume(volume_id)
    return {'result': result, 'volume_id': volume_id,
            'status': volume.get('status'),
            'attachments': _attachment_ids(volume)}


def _attachment_id(attachment):
    """The id of one of a volume's ``attachments`` entries."""
    return attachment.get('attachment_id') or attachment.get('id')


def _attachment_ids(volume):
    return [_attachment_id(a) for a in volume.get('attachments') or []]


def _already_detached(client, volume_id, attachment_id, conflict):
    """``{'result': 'already detached'}``, or *conflict* raised again."""
    try:
        volume = client.get_volume(volume_id)
    except CliError:
        raise conflict
    attached = _attachment_ids(volume)
    if attachment_id and attachment_id not in attached:
        return {'result': 'already detached: attachment %s is no longer an '
                          'attachment of the volume' % attachment_id}
    if not attachment_id and not attached and (
            volume.get('status') == 'available'):
        return {'result': 'already detached'}
    raise conflict


@command('attachment', 'show',
         'Show an attachment; secrets in its connection_info are masked.',
         [arg('attachment', metavar='ATTACHMENT_ID'),
          arg('--show-secrets', action='store_true',
              help='print passwords and keys in clear')])
def attachment_show(client, args, out):
    """Print one attachment."""
    out.emit(show_attachment(client, args.attachment,
                             show_secrets=args.show_secrets))
    return EXIT_OK


def show_attachment(client, attachment_id, show_secrets=False):
    """The attachment, its connection_info's secrets masked unless asked.

    What ``cinder-forcedetach attachment show`` and ``openstack volume
    attachment connection show`` print.
    """
    attachment = client.get_attachment(attachment_id)
    if not show_secrets:
        attachment = output.mask_secrets(attachment)
    return attachment


def audit(cinder, nova=None, grace=cases.DEFAULT_GRACE, fix=False,
          only=None, limit=cases.DEFAULT_FIX_LIMIT):
    """The audit's Cinder and Nova cases from their APIs; repaired if *fix*.

    What ``openstack volume audit`` does (Horizon's panel reads the same
    :mod:`~cinder_forcedetach.audit.from_api`).  *nova*: a client on Nova's
    API at :data:`~.from_api.NOVA_API_VERSION`, or None where the cloud
    has no Nova (what an instance may hold is then refused).  A repair is
    the force-detach of :func:`force_detach`: the volume driver tears the
    backend down before Cinder's rows change.  Returns ``(findings,
    skipped)`` as :func:`~cinder_forcedetach.audit.cases.classify`, each
    finding's ``result`` set by the repair.
    """
    findings, skipped = cases.classify(from_api.read(cinder, nova), grace)
    if fix:
        cases.fix_each(findings, functools.partial(_repair, cinder),
                       limit=limit, only=only)
    return findings, skipped


def _repair(client, finding):
    """One finding's repair through Cinder's API."""
    if finding.action == cases.DETACH:
        force_detach(client, finding.volume_id,
                     attachment_id=finding.attachment_id)
    elif finding.action == cases.DETACH_ALL:
        force_detach(client, finding.volume_id, all_hosts=True)
    else:
        # The API findings are all of these two; the backend's (revoke,
        # teardown, fence) come from the volume host's audit only.
        raise CliError(EXIT_USAGE, 'a %s repair runs on the volume host '
                                   '(cinder-forcedetach audit --fix)' %
                       finding.action)
