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

"""Fence on grant: no host gets access while one Cinder forgot still has it.

``cinder reset-state --state available --attach-status detached`` (and
Horizon's "Update Volume Status", which resets the status alone) change
Cinder's rows and nothing on the backend: the host that held the volume
keeps its ACL entry and session, or its librbd client.  Cinder then lets
another host attach, and two hosts write one volume.

So before every grant (the mixin's ``initialize_connection``, under the
volume's lock) the driver reads who the backend lets reach the volume
(``volume_holders``) and cuts, through its own teardown hooks
(``revoke_host_access``, ``fence_clients``), every holder that no live
attachment explains:

* on a multiattach volume, a holder is explained by the host being granted
  and by the connector of any live attachment;
* on any other volume Cinder allows a second attachment only to the same
  instance (a live migration's destination): a holder is explained by the
  host being granted and by live attachments of the instance(s) whose
  attachment is being granted (the live attachments without a connector
  yet).  A live attachment of another instance is one a status-only reset
  left behind: its host is cut.

What is cut is logged at WARNING, recorded in the volume's admin metadata
(:data:`RECORD_KEY`) and notified (``forcedetach.detach.forced``, reason
``grant``).  A backend that cannot be read, or a cut that fails, fails the
grant: Cinder's attach fails and nothing is granted.
"""

from __future__ import annotations

import json
import types
from typing import Any, Iterable, Sequence, TYPE_CHECKING

from cinder.db import api as db_api
from oslo_log import log as logging
from oslo_utils import timeutils

from cinder_forcedetach import attachments as fd_attachments
from cinder_forcedetach import host_access
from cinder_forcedetach import notifications

if TYPE_CHECKING:
    from cinder import context as cinder_context
    from cinder import objects

LOG = logging.getLogger(__name__)

#: Volume admin metadata: the last holders a grant cut, and when.
RECORD_KEY = 'forcedetach_grant_fence'
#: ``reason`` of the ``forcedetach.detach.forced`` notification.
REASON = notifications.GRANT


def explaining_connectors(volume: objects.Volume,
                          attachments: Iterable[objects.VolumeAttachment],
                          connector: dict[str, Any]
                          ) -> list[dict[str, Any]]:
    """Connectors whose hosts keep access when *connector* is granted."""
    live = [a for a in attachments if fd_attachments.is_live(a)]
    with_connector = [a for a in live if a.connector]
    pending = [a for a in live if not a.connector]
    if not volume.multiattach and pending:
        # Cinder lets a second attachment in only for the same instance
        # (a live migration); an attachment without an instance is no
        # instance's, and explains no other (a status-only reset left it).
        granting = {a.instance_uuid for a in pending if a.instance_uuid}
        with_connector = [a for a in with_connector
                          if a.instance_uuid and a.instance_uuid in granting]
    return [connector] + [a.connector for a in with_connector]


def unexplained(holders: Iterable[host_access.Holder],
                explaining: Iterable[dict[str, Any]]
                ) -> list[host_access.Holder]:
    """The holders no connector of *explaining* accounts for.

    A holder that names no host (an export nobody may reach) holds
    nothing; an address rule that admits any host (``ALL``) goes with the
    sessions it admits, which are holders of their own.
    """
    keys = frozenset().union(*(host_access.connector_keys(c)
                               for c in explaining))
    return [h for h in holders
            if h.keys and host_access.ANY_HOST not in h.keys and
            not h.keys & keys]


def unique_connectors(holders: Iterable[host_access.Holder]
                      ) -> list[dict[str, Any]]:
    """The connectors of *holders*, each once."""
    seen: set[str] = set()
    result: list[dict[str, Any]] = []
    for holder in holders:
        if not holder.connector:
            continue
        key = json.dumps(holder.connector, sort_keys=True)
        if key not in seen:
            seen.add(key)
            result.append(holder.connector)
    return result


def fence_before_grant(driver: Any, context: cinder_context.RequestContext,
                       volume: objects.Volume, connector: dict[str, Any],
                       attachments: Iterable[objects.VolumeAttachment]
                       ) -> list[host_access.Holder]:
    """Cut the holders of *volume* no live attachment explains.

    :param attachments: the volume's attachments as the database has them
        now (read under the volume's lock).
    :returns: the holders cut (empty when there was nothing to cut, or
        when the driver cannot list holders: ``volume_holders`` None).
    :raises: whatever reading the backend or cutting raised: the grant
        must then fail.
    """
    holders = driver.volume_holders(volume)
    if holders is None:
        return []
    explaining = explaining_connectors(volume, attachments, connector)
    cut = unexplained(holders, explaining)
    if not cut:
        return []
    labels = sorted({'%s %s' % (h.kind, h.label) for h in cut})
    LOG.warning('Volume %(vol)s is being granted to host %(host)s, but the '
                'backend still lets %(holders)s reach it with no live '
                'attachment in Cinder to explain it (a reset of the '
                'volume\'s state left it): cutting it off first.',
                {'vol': volume.id, 'host': connector.get('host'),
                 'holders': ', '.join(labels)})
    connectors = unique_connectors(cut)
    for holder_connector in connectors:
        driver.revoke_host_access(volume, holder_connector)
    driver.fence_clients(volume, connectors,
                         [types.SimpleNamespace(connector=c)
                          for c in explaining])
    _record(context, volume, connector, labels)
    notifications.detach_forced(
        context, getattr(driver, 'host', None), REASON,
        {'volume_id': volume.id, 'granted_to': connector.get('host'),
         'cut': labels})
    return cut


def _record(context: cinder_context.RequestContext, volume: objects.Volume,
            connector: dict[str, Any], labels: Sequence[str]) -> None:
    value = {'at': timeutils.utcnow().isoformat(),
             'granted_to': connector.get('host'), 'cut': labels}
    text = json.dumps(value)
    while len(text) > 255 and value['cut']:
        value['cut'] = value['cut'][:-1]
        value['more'] = len(labels) - len(value['cut'])
        text = json.dumps(value)
    db_api.volume_admin_metadata_update(context.elevated(), volume.id,
                                        {RECORD_KEY: text[:255]}, False)
