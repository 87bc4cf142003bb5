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


"""What the audit finds from Cinder's and Nova's APIs alone.

Horizon's panel and ``openstack volume audit`` run the audit's own
classification (:func:`cinder_forcedetach.audit.cases.classify`) on what an
admin's token reads: volumes and attachments from Cinder's API, servers
from Nova's.  The backend is not read from here (that is the volume
host's ``cinder-forcedetach audit``): a leaked export, or an attachment
the backend does not export, is not found here; the Cinder and Nova cases
are.  Nothing here imports Horizon or Cinder: a client is anything with
:meth:`~cinder_forcedetach.cmd.api_client.Client.request`.
"""

import datetime
import urllib.parse

from cinder_forcedetach.audit import cases
from cinder_forcedetach.audit import records

#: Attachment statuses that no longer reach the backend (Cinder's
#: ``VolumeAttachStatus.DETACHED`` and ``DELETED``).
ENDED = ('detached', 'deleted')
#: Volume statuses the panel lists even without a finding.
LISTED_STATUSES = cases.TRANSITIONS + ('in-use', 'error_attaching',
                                       'error_detaching', 'maintenance')
#: Nova's microversion whose server listing names each server's volumes
#: and its vm_state (as the audit's :mod:`.sources` asks).
NOVA_API_VERSION = '2.89'
#: Items asked per request of a paged listing.
PAGE = 1000
#: Keys of an attachment's connection_info ``data`` that name the export
#: (never a credential: ``auth_*``, ``keyring``, ``secret_*`` are left out).
EXPORT_KEYS = ('target_iqn', 'target_portal', 'target_lun', 'target_wwn',
               'name', 'hosts')


def _pages(client, path, key, params):
    """Every item of a paged listing (``limit``/``marker``)."""
    items, marker = [], None
    while True:
        query = dict(params, limit=PAGE, **({'marker': marker}
                                            if marker else {}))
        page = client.request('GET', '%s?%s' % (
            path, urllib.parse.urlencode(sorted(query.items()))))[key]
        items += page
        if len(page) < PAGE:
            return items
        marker = page[-1]['id']


def volumes(cinder):
    """Every volume of every project (``GET /volumes/detail``)."""
    return _pages(cinder, '/volumes/detail', 'volumes', {'all_tenants': 1})


def attachments(cinder, volume_id=None):
    """Attachment summaries (id, status, instance), of *volume_id* only."""
    return _pages(cinder, '/attachments', 'attachments', dict(
        {'all_tenants': 1}, **({'volume_id': volume_id} if volume_id
                               else {})))


def servers(nova):
    """Nova's servers of every project (at :data:`NOVA_API_VERSION`)."""
    return _pages(nova, '/servers/detail', 'servers', {'all_tenants': 1})


def read(cinder, nova=None, now=None):
    """A :class:`~cinder_forcedetach.audit.cases.Snapshot` of both APIs.

    *nova* None: Nova is not consulted (the audit then refuses what an
    instance may hold).
    """
    return snapshot(volumes(cinder), attachments(cinder),
                    servers(nova) if nova is not None else None, now=now)


def parse_time(text):
    """A naive UTC datetime of an API timestamp, or None."""
    if not text:
        return None
    text = text.rstrip('Z').split('+')[0]
    for fmt in ('%Y-%m-%dT%H:%M:%S.%f', '%Y-%m-%dT%H:%M:%S'):
        try:
            return datetime.datetime.strptime(text, fmt)
        except ValueError:
            pass
    return None


def backend_of(volume):
    """``host@backend`` of an API volume (the pool dropped)."""
    return (volume.get('os-vol-host-attr:host') or '').split('#')[0] or None


def snapshot(volumes, attachments, servers=None, now=None):
    """A :class:`~cinder_forcedetach.audit.cases.Snapshot` of API answers.

    *volumes*: ``GET /volumes/detail?all_tenants=1``; *attachments*:
    ``GET /attachments?all_tenants=1`` (their summaries: no
    connection_info); *servers*: ``GET /servers/detail?all_tenants=1``, or
    None where Nova is not in the catalog (the audit then refuses what an
    instance may hold).  The API shows no attach_status and no connector:
    a reserved attachment is one without a connector, as Cinder makes it.
    """
    hosts = {}
    for vol in volumes:
        for att in vol.get('attachments') or []:
            hosts[att.get('attachment_id') or att.get('id')] = att.get(
                'host_name')
    vols, backends, live = {}, {}, {}
    for vol in volumes:
        backend = backend_of(vol) or '(no host)'
        backends.setdefault(backend, cases.Backend(backend, grants=False))
        vols[vol['id']] = records.Volume(
            vol['id'], vol.get('name'), vol['status'], None, backend,
            parse_time(vol.get('updated_at')), False, None)
    for att in attachments:
        if att.get('status') in ENDED or att.get('volume_id') not in vols:
            continue
        live.setdefault(att['volume_id'], []).append(records.Attachment(
            att['id'], att['volume_id'], att.get('status'),
            att.get('instance'), None, hosts.get(att['id']), None))
    nova = cases.Nova.from_servers(servers) if servers is not None else None
    return cases.Snapshot(vols, live, backends, nova,
                          now or datetime.datetime.utcnow())


def by_volume(snap, grace=cases.DEFAULT_GRACE):
    """``{volume id: [Finding]}`` and the ids left for the grace period."""
    findings, _skipped = cases.classify(snap, grace)
    result = {}
    for finding in findings:
        result.setdefault(finding.volume_id, []).append(finding)
    in_flux = {vid for vid, vol in snap.volumes.items()
               if cases.recently_changed(vol, snap.attachments.get(vid, []),
                                         snap.now, grace)}
    return result, in_flux


def listed(volume, live, findings):
    """Whether the panel lists *volume*: attached, stuck or found wrong."""
    return bool(live or findings or volume.status in LISTED_STATUSES)


def export_of(connection_info):
    """What an attachment's export is, named without any credential."""
    info = connection_info or {}
    # Cinder's attachments API flattens it: no "data" level.
    data = info.get('data') or info
    parts = ['%s=%s' % (key, data[key]) for key in EXPORT_KEYS
             if data.get(key) not in (None, '', [])]
    kind = info.get('driver_volume_type')
    return ' '.join(([kind] if kind else []) + parts)
