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

"""What the flow and the drivers ask of Cinder's attachment rows."""

from __future__ import annotations

import json
from typing import Any, Iterable, Optional, TYPE_CHECKING

from cinder.objects import fields

if TYPE_CHECKING:
    from cinder import objects

ENDED_ATTACH_STATUSES = (fields.VolumeAttachStatus.DETACHED,
                         fields.VolumeAttachStatus.DELETED)


def is_live(attachment: objects.VolumeAttachment) -> bool:
    """Whether an attachment still (or may still) reaches the backend."""
    return attachment.attach_status not in ENDED_ATTACH_STATUSES


def row_is_live(attachment: objects.VolumeAttachment) -> bool:
    """Whether a row read with deleted ones is neither deleted nor ended."""
    return not attachment.deleted and is_live(attachment)


def export_users(attachments: Iterable[objects.VolumeAttachment]
                 ) -> list[objects.VolumeAttachment]:
    """The attachments whose host may use the export: those with a connector.

    An attachment without one (Nova reserves those for a shelved-offloaded
    server) never reached the backend; the host that later completes it
    gets the export made again.
    """
    return [a for a in attachments if a.connector]


def same_host(attachment_connector: Optional[dict[str, Any]],
              connector: Optional[dict[str, Any]]) -> bool:
    """Whether two connectors name the same host (name, IQN or a WWPN)."""
    if not attachment_connector or not connector:
        return False
    for key in ('host', 'initiator'):
        if attachment_connector.get(key) and (
                attachment_connector.get(key) == connector.get(key)):
            return True
    wwpns = set(attachment_connector.get('wwpns') or [])
    return bool(wwpns & set(connector.get('wwpns') or []))


def of_other_hosts(attachments: Iterable[objects.VolumeAttachment],
                   connector: Optional[dict[str, Any]]
                   ) -> list[objects.VolumeAttachment]:
    """Live attachments, with a connector, of hosts other than *connector*.

    Those whose access stays when that host leaves.
    """
    return [a for a in attachments
            if is_live(a) and a.connector and
            not same_host(a.connector, connector)]


class Attachments(list):
    """Attachments passed between tasks; shown by id only.

    Taskflow's listener logs task results: the attachments' connection_info
    holds CHAP passwords, which must not reach the logs.
    """

    def __repr__(self) -> str:
        return 'Attachments(%s)' % ', '.join(a.id for a in self)

    __str__ = __repr__


#: Volume admin metadata recording, while a teardown runs, the hosts it
#: revokes.  A volume service that restarts after a crash half-way (Cinder's
#: ensure_export at start-up) must not grant them again.  Two forms, each
#: within the column's 255 characters:
#:
#: * our force-detach: a JSON list of connectors reduced to the fields that
#:   name a host (null = every host), in force until the flow resets the
#:   database (a re-run clears it);
#: * Cinder's own detach (terminate_connection, which leaves the database
#:   to Cinder): ``{"attachments": [ids], "every": bool}``, in force while
#:   one of those attachments is still live -- Cinder's detach finishing
#:   ends it, and a later attachment of the same host is never affected.
TEARDOWN_MARK = 'forcedetach_teardown'
TEARDOWN_MARK_MAX = 255
#: What a recorded connector keeps: what names the host and what the
#: drivers revoke by.
HOST_FIELDS = ('host', 'initiator', 'ip', 'wwpns', 'nqn')


def teardown_record(hosts: Iterable[Optional[dict[str, Any]]],
                    attachment_ids: Optional[Iterable[str]] = None
                    ) -> str:
    """The value of :data:`TEARDOWN_MARK`.

    *hosts*: connectors, ``None`` for every host.  With *attachment_ids*
    the record is bound to those attachments.  Raises ``ValueError`` when
    it cannot be stored (before anything is torn down).
    """
    hosts = list(hosts)
    if attachment_ids is None:
        value = json.dumps([{k: c[k] for k in HOST_FIELDS if c.get(k)}
                            if c else None for c in hosts])
    else:
        value = json.dumps({'attachments': sorted(attachment_ids),
                            'every': any(c is None for c in hosts)})
    if len(value) > TEARDOWN_MARK_MAX:
        raise ValueError('the teardown record of %d host(s) is %d characters;'
                         ' at most %d fit' % (len(hosts), len(value),
                                              TEARDOWN_MARK_MAX))
    return value


def parse_teardown(text: Optional[str], live: Iterable[Any]
                   ) -> Optional[list[Optional[dict[str, Any]]]]:
    """Connectors of a teardown record still in force, or None.

    *live*: the volume's live attachments (``id`` and ``connector``).  A
    list holding ``None`` means every host; an unreadable record counts as
    every host.
    """
    if not text:
        return None
    try:
        value = json.loads(text)
    except (TypeError, ValueError):
        return [None]
    if isinstance(value, dict):
        ids = set(value.get('attachments') or ())
        leaving = [a for a in live if a.id in ids]
        if not leaving:
            return None         # Cinder finished that detach
        if value.get('every'):
            return [None]
        return [a.connector for a in leaving if a.connector] or [None]
    if not isinstance(value, list):
        return [None]
    return [c if isinstance(c, dict) else None for c in value] or [None]


def hosts_in_teardown(volume: objects.Volume
                      ) -> Optional[list[Optional[dict[str, Any]]]]:
    """Connectors a teardown was revoking when it stopped, or None.

    Read from the volume's admin metadata; see :data:`TEARDOWN_MARK`.
    """
    return parse_teardown(
        (volume.admin_metadata or {}).get(TEARDOWN_MARK),
        [a for a in volume.volume_attachment or () if is_live(a)])
