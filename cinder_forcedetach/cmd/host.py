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

"""``cinder-forcedetach host fence HOST``: a dead compute host off its volumes.

Usage::

    cinder-forcedetach host fence HOST [--backend NAME]... [--ip-wide]
        [--dry-run] [--config-file FILE]... [--config-dir DIR]
        [--format table|json]

Before an operator evacuates the servers of a compute host that is down,
or seems down but may still be writing (partitioned), every volume that
host holds must be cut from it, or the evacuated servers' new host and
the old one write the same volumes.  This command runs on a volume host,
like ``fence list``: it reads cinder.conf, finds in Cinder's database the
live attachments of HOST (``attached_host``, as Nova's connector named
it) on each backend (``--backend``, default every enabled one), and calls
the backend driver's ``fence_host`` once per backend: each volume goes
through the force-detach flow (its lock; host access revoked and its
clients fenced; export removed when no other host uses it; only then the
attachments of HOST ended in Cinder's database), the fence of all of them
in one pass where the driver can (RBD: each client of the host
blocklisted once, one wait).  Other hosts' attachments, access and
clients are untouched.  Each volume done is a forced detach of reason
``host`` (``forcedetach.detach.forced``).  The evacuated servers can then
attach their volumes on their new host.

``--ip-wide`` (RBD only) blocklists the host's whole address instead of
each client instance: every client it starts until the entry expires or
is lifted (``fence lift --address``) is refused too.  ``--dry-run`` lists
what would be cut and changes nothing.

Prints a row per volume: volume, backend, attachments of HOST, result
(``fenced``, ``failed``, or ``planned`` with ``--dry-run``), the client
addresses fenced, the error.  Run again, it finds nothing left and
succeeds.  Exit codes: 0 every volume done (or nothing attached to
HOST), 1 usage error (a HOST that is no host name or IP address), 2
backend not found, 4 some volume failed (its rows in Cinder unchanged; run
again once the backend is reachable).  A backend that fails as a whole (its
driver cannot be built or cannot fence, ``--ip-wide`` on a driver other
than RBD's) fails its own rows, with the error; the other backends are
still fenced.
"""

import collections
import json

from oslo_utils import strutils

from cinder_forcedetach.cmd.errors import CliError
from cinder_forcedetach.cmd.errors import EXIT_BACKEND
from cinder_forcedetach.cmd.errors import EXIT_OK
from cinder_forcedetach.cmd.errors import EXIT_USAGE
from cinder_forcedetach.cmd import local
from cinder_forcedetach.cmd import registry
from cinder_forcedetach.cmd.registry import arg

HELP = ('Cut a dead or partitioned compute host off every volume it holds, '
        'before its servers are evacuated (runs locally on a volume host, '
        'reads cinder.conf).')
COLUMNS = ('volume_id', 'backend', 'attachments', 'result', 'fenced',
           'error')
FENCED, FAILED, PLANNED = 'fenced', 'failed', 'planned'

registry.category('host', HELP)


@registry.command(
    'host', 'fence', HELP, local=True, what='fence of host {host}',
    arguments=[
        arg('host', metavar='HOST',
            help='the compute host, as its attachments name it '
                 '(attached_host: Nova\'s [DEFAULT] host)'),
        arg('--backend', action='append', metavar='NAME',
            help='only this backend (cinder.conf section; repeatable; '
                 'default: every enabled backend)'),
        arg('--ip-wide', action='store_true',
            help='blocklist the host\'s whole address, not each client '
                 '(RBD)'),
        arg('--dry-run', action='store_true',
            help='list what would be cut; change nothing'),
    ])
def host_fence(conf, args, out):
    """Fence HOST on each backend; print a row per volume."""
    from cinder import context

    from cinder_forcedetach import connector_grammar
    from cinder_forcedetach import notifications

    if not (connector_grammar.is_host_name(args.host) or
            connector_grammar.is_ip(args.host)):
        raise CliError(EXIT_USAGE, 'HOST must be a host name or an IP '
                       'address, as a connector names it')
    ctxt = context.get_admin_context()
    backends = local.backends(args.backend)
    cluster = local.cluster_of(conf)
    notifications.init_command(conf)
    try:
        rows = []
        for group, backend_host in backends:
            rows += _fence_backend(ctxt, args, group, backend_host,
                                   cluster)
    finally:
        notifications.end_command()
    out.emit_list(rows, COLUMNS)
    return EXIT_BACKEND if any(r['result'] == FAILED for r in rows) \
        else EXIT_OK


def held_by(ctxt, host, backend_host, cluster):
    """``{volume_id: (volume, [live attachments of host])}`` on a backend.

    A volume is on the backend *backend_host* when the audit's rule says
    so (:func:`cinder_forcedetach.audit.sources.backend_resolver`: its own
    host, or in a cluster its cluster's backend of the same name).  An
    attachment without a connector (reserved) never reached the backend:
    not counted.
    """
    from cinder import objects

    from cinder_forcedetach import attachments as fd_attachments
    from cinder_forcedetach.audit import sources

    backend_of = sources.backend_resolver(cluster, [backend_host])
    held = {}
    for att in objects.VolumeAttachmentList.get_all_by_host(ctxt, host):
        if not fd_attachments.is_live(att) or not att.connector:
            continue
        if att.volume_id not in held:
            volume = objects.Volume.get_by_id(ctxt, att.volume_id)
            ours = backend_of(volume.host, volume.cluster_name) == backend_host
            held[att.volume_id] = (volume, []) if ours else None
        if held[att.volume_id] is not None:
            held[att.volume_id][1].append(att)
    return {vid: v for vid, v in held.items() if v is not None}


def _connector_key(connector):
    """What makes two connectors of one host fence the same clients."""
    return json.dumps({k: connector.get(k) for k in (
        'host', 'ip', 'initiator', 'wwpns', 'nqn')}, sort_keys=True)


def _fence_backend(ctxt, args, group, backend_host, cluster):
    """The rows of one backend; a backend that fails fails its rows only.

    A driver that cannot be built or cannot fence, or a fence that fails
    as a whole (``--ip-wide`` on a driver without it, the backend
    unreachable), makes its volumes' rows ``failed`` with the error; the
    other backends are still fenced.
    """
    held = held_by(ctxt, args.host, backend_host, cluster)
    if not held:
        return []
    # One fence per connector the host's attachments carry (one, unless
    # the host changed its address or initiator between attachments).
    groups = collections.defaultdict(list)
    for volume, atts in (held[vid] for vid in sorted(held)):
        newest = max(atts, key=lambda a: (a.attach_time or a.created_at,
                                          a.id))
        groups[_connector_key(newest.connector)].append(
            (volume, newest.connector))
    try:
        driver = local.command_driver(ctxt, group, backend_host, cluster)
    except Exception as err:
        driver, driver_error = None, err
    else:
        if not hasattr(driver, 'fence_host'):
            driver, driver_error = None, CliError(
                EXIT_USAGE, 'the driver of backend %s (%s) cannot fence a '
                'host' % (group, type(driver).__name__))
    rows = []
    for members in groups.values():
        volumes = [volume for volume, _c in members]
        connector = members[0][1]
        done, failed = {v.id: [] for v in volumes}, {}
        if driver is None:
            failed = dict.fromkeys(done, driver_error)
        elif not args.dry_run:
            try:
                report = driver.fence_host(ctxt, connector, volumes,
                                           ip_wide=args.ip_wide)
                done, failed = report.done, report.failed
            except Exception as err:
                failed = dict.fromkeys(done, err)
        for volume in volumes:
            error = failed.get(volume.id)
            rows.append({
                'volume_id': volume.id, 'backend': group,
                'attachments': sorted(a.id for a in held[volume.id][1]),
                'result': (FAILED if error is not None else
                           PLANNED if args.dry_run else FENCED),
                'fenced': sorted(done.get(volume.id) or []),
                'error': '' if error is None else strutils.mask_password(
                    '%s: %s' % (type(error).__name__, error))})
    return rows
